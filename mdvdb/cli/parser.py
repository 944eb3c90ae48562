"""The one argument parser of `mdvdb`: each command's arguments, read from its `Command`.

typer only prints the help built from the same declaration: its import would cost a cold
`mdvdb search` more than its budget (docs/benchmarks.md, "Session 2: the typer-free hot path").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.options import Option, Spec

__all__ = ["Command", "UsageError", "parse", "ROOT", "JSON"]

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
# A negative number (`-1`, `-.5`, `-inf`) is taken as a value, for the option's check to judge.
_NEGATIVE = re.compile(r"-(?:[0-9.].*|inf(?:inity)?|nan)", re.IGNORECASE)

# The options every command shares (`--json`: those whose Command says so).
ROOT = Option(
    "root",
    None,
    Spec(
        Path,
        "Project root (default: the nearest folder upward with .markdownvdb or an index).",
        ("--root",),
    ),
)
JSON = Option("as_json", False, Spec(bool, "One JSON document on stdout.", ("--json",)))


class UsageError(Exception):
    """Why an argument list was refused: one line for the user (exit 2)."""


@dataclass(frozen=True)
class Command:
    """One `mdvdb` command: its options, and `run(**values)`, which gets every option by
    field name (`root`, `as_json` too) and returns the exit code (None: 0)."""

    name: str
    options: Sequence[Option]
    run: Callable[..., int | None]
    help: str = ""  # `mdvdb NAME --help`; its first sentence is the line in `mdvdb --help`
    json: bool = True
    help_flags: tuple[str, ...] = ("--help",)

    @property
    def every_option(self) -> tuple[Option, ...]:
        return (*self.options, ROOT, *(JSON,) * self.json)


def is_switch(spec: Spec) -> bool:
    """A `--x/--no-x` pair: the first sets True, the second False."""
    return spec.value is bool and len(spec.flags) == 2 and spec.flags[1].startswith("--no-")


def _converter(option: Option) -> Callable[[str], Any]:
    """A value of `option` from its text; UsageError (saying why) when it is not one."""
    spec, shown = option.spec, "/".join(option.spec.flags) or option.name.upper()

    def convert(raw: str) -> Any:
        if spec.choices is not None:
            if raw not in spec.choices:
                raise UsageError(f"{shown}: {raw!r} is not one of {', '.join(spec.choices)}")
            return raw
        if spec.value is float:
            if not _FLOAT.fullmatch(raw):
                raise UsageError(f"{shown}: expected a finite number, got {raw!r}")
            value: Any = float(raw)
        elif spec.value is int:
            if not _INT.fullmatch(raw):
                raise UsageError(f"{shown}: expected a whole number, got {raw!r}")
            value = int(raw)
        else:
            return raw
        problem = option.bound_problem(value, shown)
        if problem:
            raise UsageError(problem)
        return value

    return convert


class _Plan:
    """A command's options arranged for parsing: flags, valued and repeated options."""

    def __init__(self, options: Sequence[Option]) -> None:
        self.flags: dict[str, tuple[str, bool]] = {}
        self.valued: dict[str, tuple[str, Callable[[str], Any]]] = {}
        self.repeated: dict[str, str] = {}
        self.dash_values: set[str] = set()  # options whose value may start with `-`
        self.positionals = [option for option in options if not option.spec.flags]
        for option in options:
            flags, spec = option.spec.flags, option.spec
            if not flags:
                continue
            if spec.dash_value:
                self.dash_values.update(flags)
            if spec.value is bool:
                if is_switch(spec):  # --govern / --no-govern
                    self.flags[flags[0]] = (option.name, True)
                    self.flags[flags[1]] = (option.name, False)
                else:
                    self.flags.update(dict.fromkeys(flags, (option.name, not option.default)))
            elif spec.repeat:
                self.repeated.update(dict.fromkeys(flags, option.name))
            else:
                self.valued.update(dict.fromkeys(flags, (option.name, _converter(option))))
        # short options that take a value glued on: `-n5`, `-efoo`
        self.short = {f for f in (*self.valued, *self.repeated) if len(f) == 2}


def parse(command: Command, argv: list[str]) -> dict[str, Any]:
    """Every option of `command` by field name (default when not given; repeated ones as
    lists, `once` ones as a value or None), or UsageError; a valued option's last one wins."""
    options = command.every_option
    plan = _Plan(options)
    given, positional = _read(plan, argv)
    values: dict[str, Any] = {o.name: o.default for o in options if not o.required}
    for option in options:
        if option.spec.repeat and option.spec.flags:
            found = given.pop(option.name, [])
            if option.spec.repeat == "once" and len(found) > 1:
                flag = option.spec.flags[0]
                raise UsageError(
                    f"{flag} given {len(found)} times; give it once (--tag and --category "
                    "combine with AND; use --filter for more)"
                )
            values[option.name] = (
                (found[0] if found else None) if option.spec.repeat == "once" else found
            )
    values.update(given)
    _place(plan.positionals, positional, values)
    return values


def _place(positionals: list[Option], given: list[str], values: dict[str, Any]) -> None:
    """The positional arguments into their fields (a `repeat` one takes the rest)."""
    for option in positionals:
        if option.spec.repeat:
            if option.required and not given:
                raise UsageError(f"missing argument {option.name.upper()}")
            values[option.name], given = list(given), []
        elif given:
            values[option.name] = _converter(option)(given.pop(0))
        elif option.required:
            raise UsageError(f"missing argument {option.name.upper()}")
    if given:
        raise UsageError(f"unexpected argument: {given[0]}")


def _read(plan: _Plan, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The options given (by field name; repeated ones as lists) and the positionals."""
    args: dict[str, Any] = {dest: [] for dest in plan.repeated.values()}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional += argv[i:]
            break
        if arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        if arg.startswith("--"):
            name, equals, inline = arg.partition("=")
            value = inline if equals else None
        elif arg[:2] in plan.short and len(arg) > 2 and arg[2] != "=":
            name, value = arg[:2], arg[2:]
        else:
            name, value = arg, None
        if name in plan.flags:
            if value is not None:
                raise UsageError(f"{name} takes no value")
            dest, const = plan.flags[name]
            args[dest] = const
            continue
        if name not in plan.valued and name not in plan.repeated:
            raise UsageError(f"no such option: {name}")
        if value is None:
            if i >= len(argv) or (
                argv[i].startswith("-")
                and name not in plan.dash_values
                and not _NEGATIVE.fullmatch(argv[i])
            ):
                raise UsageError(f"{name} needs a value")
            value = argv[i]
            i += 1
        if name in plan.repeated:
            args[plan.repeated[name]].append(value)
        else:
            dest, convert = plan.valued[name]
            args[dest] = convert(value)
    return args, positional
