"""The typer app and the options its commands share (exit codes and errors: `errors.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mdvdb.cli.errors import (  # noqa: F401 - re-exported for the command modules
    EXIT_ERROR,
    EXIT_NO_INDEX,
    EXIT_OFF,
    EXIT_OK,
    EXIT_STALE,
    EXIT_USAGE,
    JSON_FLAG,
    JSON_HELP,
    ROOT_FLAG,
    ROOT_HELP,
    CliError,
    load,
    print_json,
    refuse_if_off,
    user_errors,
)

app = typer.Typer(
    name="mdvdb",
    help="Markdown VDB: search folders of Markdown by meaning, keywords or exact text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

RootOption = Annotated[Path | None, typer.Option(ROOT_FLAG, help=ROOT_HELP)]
JsonOption = Annotated[bool, typer.Option(JSON_FLAG, help=JSON_HELP)]


def _print_version(value: bool) -> None:
    if value:
        from mdvdb.cli import version

        typer.echo(f"mdvdb {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Markdown VDB: search folders of Markdown by meaning, keywords or exact text."""
