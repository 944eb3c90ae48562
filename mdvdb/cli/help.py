"""`mdvdb --help` and `mdvdb COMMAND --help`: typer commands built from the declarations.

typer is handed only `--help` (or nothing, for the bare `mdvdb`); `mdvdb.cli.parser` parses.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer

from kernel.options import Option
from mdvdb.cli.parser import Command, is_switch

__all__ = ["show"]

TITLE = "Markdown VDB: search folders of Markdown by meaning, keywords or exact text."
KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _parameter(option: Option) -> inspect.Parameter:
    spec = option.spec
    value: Any = spec.value
    if not spec.flags:  # a positional argument
        kind = list[value] | None if spec.repeat else value if option.required else value | None
        default = inspect.Parameter.empty if option.required else None
        annotation = Annotated[kind, typer.Argument(help=spec.help, show_default=False)]
        return inspect.Parameter(option.dest, KEYWORD, default=default, annotation=annotation)
    declared = ["/".join(spec.flags)] if is_switch(spec) else list(spec.flags)
    info = typer.Option(
        *declared,
        min=spec.minimum,
        max=spec.maximum,
        help=spec.help or None,
        metavar=spec.metavar or None,
    )
    default: Any = option.default
    if spec.value is bool:
        kind: Any = bool if option.default is not None else bool | None
        default = False if option.is_negative_flag else option.default
    elif spec.repeat:
        kind, default = list[value] | None, None
    elif spec.choices:
        # the enum typer shows as `[a|b|c]`
        enum = StrEnum(option.name.title().replace("_", ""), {c: c for c in spec.choices})
        kind, default = enum | None, None if default is None else enum(default)
    else:
        kind = value | None
    return inspect.Parameter(
        option.dest, KEYWORD, default=default, annotation=Annotated[kind, info]
    )


def _typer_command(command: Command):
    """A function whose signature typer reads; its body never runs (typer prints help)."""

    def never_run(**values: Any) -> None:
        raise AssertionError("typer only prints help; mdvdb.cli.parser parses")

    signature = inspect.Signature([_parameter(o) for o in command.every_option])
    never_run.__signature__ = signature  # type: ignore[attr-defined]
    never_run.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    never_run.__doc__ = command.help
    return never_run


def _app(commands: Sequence[Command]) -> typer.Typer:
    app = typer.Typer(
        name="mdvdb",
        help=TITLE,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    @app.callback()
    def _options(
        show_version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
    ) -> None:
        """Markdown VDB: search folders of Markdown by meaning, keywords or exact text."""

    for command in commands:
        app.command(command.name, context_settings={"help_option_names": list(command.help_flags)})(
            _typer_command(command)
        )
    return app


def show(commands: Sequence[Command], name: str | None = None, bare: bool = False) -> int:
    """Print the help of command `name` (None: of `mdvdb`; `bare`: `mdvdb` alone); its exit code."""
    if name is None:
        app, argv = _app(commands), [] if bare else ["--help"]
    else:
        [command] = [c for c in commands if c.name == name]
        app, argv = _app([command]), [name, "--help"]
    try:
        app(argv, prog_name="mdvdb")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 0
    return 0
