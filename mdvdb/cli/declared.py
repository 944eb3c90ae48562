"""A typer command's parameters from declared options (`query.options`): the other half of
what `mdvdb.cli.hand_parser` builds from the same declaration.

`search` (declared by `query.search_options`) and `grep` (`query.grep.options`) are typer
commands whose signature is generated here, with the shared `--root` and `--json` last, so
their `--help`, bounds and choices are the declaration's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import cache
from typing import Annotated, Any

import typer

from mdvdb.cli.app import JsonOption, RootOption
from query import Option

KEYWORD = inspect.Parameter.KEYWORD_ONLY


@cache
def choices_enum(name: str, choices: tuple[str, ...]) -> type[StrEnum]:
    """The enum typer shows as `[a|b|c]` and checks a value against."""
    return StrEnum(name, {choice: choice for choice in choices})


def typer_parameter(option: Option) -> inspect.Parameter:
    spec = option.spec
    if not spec.flags:  # the positional argument
        annotation = Annotated[spec.value | None, typer.Argument(help=spec.help)]
        return inspect.Parameter(option.dest, KEYWORD, default=None, annotation=annotation)
    switch = spec.value is bool and len(spec.flags) == 2  # --govern/--no-govern
    declared = ["/".join(spec.flags)] if switch else spec.flags
    info = typer.Option(
        *declared, min=spec.minimum, help=spec.help or None, metavar=spec.metavar or None
    )
    default: Any = option.default
    if spec.value is bool:
        kind: Any = bool if option.default is not None else bool | None
        default = False if option.is_negative_flag else option.default
    elif spec.repeat:
        kind, default = list[spec.value] | None, None
    elif spec.choices:
        enum = choices_enum(option.name.title().replace("_", ""), spec.choices)
        kind, default = enum | None, None if default is None else enum(default)
    else:
        kind = spec.value | None
    return inspect.Parameter(
        option.dest, KEYWORD, default=default, annotation=Annotated[kind, info]
    )


def declare_command(command: Callable[..., Any], options: Sequence[Option]) -> Callable[..., Any]:
    """Give `command(ctx, **values)` the signature typer reads: `ctx`, every option, then
    `--root` (`root`) and `--json` (`as_json`)."""
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("ctx", KEYWORD, annotation=typer.Context),
            *(typer_parameter(option) for option in options),
            inspect.Parameter("root", KEYWORD, default=None, annotation=RootOption),
            inspect.Parameter("as_json", KEYWORD, default=False, annotation=JsonOption),
        ]
    )
    command.__annotations__ = {
        p.name: p.annotation for p in command.__signature__.parameters.values()
    }
    return command


def field_values(
    options: Sequence[Option],
    values: dict[str, Any],
    once: Callable[[str, list[str] | None], str | None] | None = None,
) -> dict[str, Any]:
    """The typer command's values by field name, as the hand parser gives them; `once(flag,
    values)` turns the list of a `once` option into its one value (or a usage error)."""
    fields: dict[str, Any] = {}
    for option in options:
        value = values[option.dest]
        if option.is_negative_flag:
            value = not value
        elif option.spec.repeat == "once" and once is not None:
            value = once(option.spec.flags[0], value)
        elif option.spec.repeat:
            value = value or []
        elif isinstance(value, StrEnum):
            value = value.value
        fields[option.name] = value
    return fields


def on_project(command: Callable[..., Any]) -> Callable[..., Any]:
    """A typer command over one project: `command(config, as_json, **options)` gets the
    configuration `--root` names (`errors.load`) and `--json`, and runs inside
    `user_errors()`. The two shared options and that prelude, declared once for every
    command that has them (they come last in `--help`, as before)."""
    from mdvdb.cli.errors import load, user_errors

    own = list(inspect.signature(command, eval_str=True).parameters.values())[2:]

    @functools.wraps(command)
    def run(root: Any = None, as_json: bool = False, **options: Any) -> Any:
        with user_errors():
            return command(load(root), as_json, **options)

    signature = inspect.Signature(
        [
            *(p.replace(kind=KEYWORD) for p in own),
            inspect.Parameter("root", KEYWORD, default=None, annotation=RootOption),
            inspect.Parameter("as_json", KEYWORD, default=False, annotation=JsonOption),
        ],
        return_annotation=None,
    )
    run.__signature__ = signature  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return run
