"""`mdvdb schema`'s typer command (its run: `mdvdb.cli.schema`), and the usage errors of
`mdvdb search`'s typer path."""

from __future__ import annotations

from typing import Annotated

import typer

from mdvdb.cli.app import EXIT_USAGE, JsonOption, RootOption, app


@app.command()
def schema(
    field: Annotated[
        str | None, typer.Argument(help="One field: its details and every value with counts.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option("--check", help="List files that break the overlay; exit 1 if any."),
    ] = False,
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """The frontmatter schema: fields, types, file counts, values; merged with the overlay."""
    # The same run as the parser of the hot path (`mdvdb.cli.schema`, no typer).
    from mdvdb.cli.schema import run_schema

    code = run_schema(field, None if root is None else str(root), as_json, check)
    if code:
        raise typer.Exit(code)


# -- search -------------------------------------------------------------------------------


def usage_error(ctx: typer.Context, message: str) -> None:
    """Click's own usage-error output (usage line, help hint, error), exit 2; written here
    because typer vendors its click and its exception classes are private."""
    typer.echo(ctx.get_usage(), err=True)
    typer.echo(f"Try '{ctx.command_path} --help' for help.\n", err=True)
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def one_facet(ctx: typer.Context, flag: str, values: list[str] | None) -> str | None:
    """A facet flag given once at most: a repeated one is a usage error with the usage line."""
    if not values:
        return None
    if len(values) > 1:
        usage_error(
            ctx,
            f"{flag} given {len(values)} times; give it once (--tag and --category combine "
            "with AND; use --filter for more)",
        )
    return values[0]
