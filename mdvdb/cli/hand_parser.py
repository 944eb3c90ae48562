"""The hand parser of the hot path: a command's arguments, read from its declared options
without typer.

`mdvdb search` and `mdvdb grep` are called hundreds of times a session, and typer's import
and per-call setup would be most of their cold time. So each parses its arguments with a
`HandParser` built from the same declaration as its typer command (`query.options`): the
argument forms people and agents use (flags, `--opt value`, `--opt=value`, `-n5`, `--`,
repeated options). Whatever it is not sure of comes back as a `Problem`: `search` then leaves
the arguments to typer (which words the usage error), `grep` prints the problem as one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mdvdb.cli.errors import JSON_FLAG, ROOT_FLAG
from query import Option

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


@dataclass(frozen=True)
class Problem:
    """Why an argument list was not parsed: one line for the user."""

    message: str


class _Unsure(Exception):
    pass


def _float(raw: str) -> float | None:
    return float(raw) if _FLOAT.fullmatch(raw) else None


def _converter(option: Option) -> Callable[[str], Any]:
    """A value of `option` from its text; _Unsure (saying why) when it is not one."""
    spec = option.spec
    shown = "/".join(spec.flags)
    if spec.choices is not None:
        choices = spec.choices

        def choice(raw: str) -> str:
            if raw not in choices:
                raise _Unsure(f"{shown}: {raw!r} is not one of {', '.join(choices)}")
            return raw

        return choice
    if spec.value is float:

        def real(raw: str) -> float:
            value = _float(raw)
            if value is None:
                raise _Unsure(f"{shown}: expected a number, got {raw!r}")
            return value

        return real
    if spec.value is int:
        low = spec.minimum

        def whole(raw: str) -> int:
            if not _INT.fullmatch(raw):
                raise _Unsure(f"{shown}: expected a whole number, got {raw!r}")
            value = int(raw)
            if low is not None and value < low:
                raise _Unsure(f"{shown}: must be at least {low}, got {value}")
            return value

        return whole
    return lambda raw: raw


class HandParser:
    """The parser of one command: its declared options plus the shared `--root` and `--json`
    (giving `root` and `as_json`). `last_wins`: a repeated option takes its last value, as
    typer does (else a repeat is a Problem: `search` leaves it to typer)."""

    def __init__(self, options: Sequence[Option], last_wins: bool = False) -> None:
        self.last_wins = last_wins
        # A flag sets its field to a constant; a valued option converts its text; a repeated
        # one collects a list.
        self.flags: dict[str, tuple[str, bool]] = {JSON_FLAG: ("as_json", True)}
        self.valued: dict[str, tuple[str, Callable[[str], Any]]] = {
            ROOT_FLAG: ("root", lambda raw: raw)
        }
        self.repeated: dict[str, str] = {}
        self.dash_values: set[str] = set()  # options whose value may start with `-`
        self.positional = ""
        for option in options:
            flags, spec = option.spec.flags, option.spec
            if not flags:
                self.positional = option.name
                continue
            if spec.dash_value:
                self.dash_values.update(flags)
            if spec.value is bool:
                if len(flags) == 2:  # --govern / --no-govern
                    self.flags[flags[0]] = (option.name, True)
                    self.flags[flags[1]] = (option.name, False)
                else:
                    self.flags[flags[0]] = (option.name, not option.default)
            elif spec.repeat:
                self.repeated.update(dict.fromkeys(flags, option.name))
            else:
                self.valued.update(dict.fromkeys(flags, (option.name, _converter(option))))
        self.once = [option.name for option in options if option.spec.repeat == "once"]
        # short options that take a value glued on: `-n5`, `-efoo`
        self.short = {f for f in (*self.valued, *self.repeated) if len(f) == 2}

    def parse(self, argv: list[str]) -> dict[str, Any] | Problem:
        """The given options by field name (repeated ones as lists, `once` ones as a value
        or None, the positional or None), or the Problem with `argv`."""
        try:
            return self._parse(argv)
        except _Unsure as problem:
            return Problem(str(problem))

    def _parse(self, argv: list[str]) -> dict[str, Any]:
        args: dict[str, Any] = {dest: [] for dest in self.repeated.values()}
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
            elif arg[:2] in self.short and len(arg) > 2 and arg[2] != "=":
                name, value = arg[:2], arg[2:]
            else:
                name, value = arg, None
            if name in self.flags:
                if value is not None:
                    raise _Unsure(f"{name} takes no value")
                dest, const = self.flags[name]
                if dest in args and args[dest] != const and not self.last_wins:
                    raise _Unsure(f"{name} contradicts an earlier option")
                args[dest] = const
                continue
            if name not in self.valued and name not in self.repeated:
                raise _Unsure(f"no such option: {name}")
            if value is None:
                dash_ok = name in self.dash_values
                if i >= len(argv) or (
                    argv[i].startswith("-") and not dash_ok and _float(argv[i]) is None
                ):
                    raise _Unsure(f"{name} needs a value")
                value = argv[i]
                i += 1
            if name in self.repeated:
                args[self.repeated[name]].append(value)
                continue
            dest, convert = self.valued[name]
            converted = convert(value)
            if dest in args and not self.last_wins:
                raise _Unsure(f"{name} given twice")
            args[dest] = converted
        if len(positional) > (1 if self.positional else 0):
            raise _Unsure(f"unexpected argument: {positional[-1]}")
        for name in self.once:
            if len(args[name]) > 1:
                raise _Unsure(f"{name} given {len(args[name])} times")
            args[name] = args[name][0] if args[name] else None
        if self.positional:
            args[self.positional] = positional[0] if positional else None
        return args
