"""The foundation commands: ingest, search, get, status."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mdvdb.cli.app import (
    JsonOption,
    RootOption,
    app,
    load,
    refuse_if_off,
    user_errors,
)
from mdvdb.cli.declared import declare_command, field_values
from query import OPTIONS


@app.command()
def ingest(
    paths: Annotated[list[str] | None, typer.Argument(help="Only re-check these files.")] = None,
    full: Annotated[bool, typer.Option("--full", help="Re-hash, re-parse, re-chunk all.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing when nothing changed.")
    ] = False,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Exit 1 at once if another writer runs.")
    ] = False,
    if_present: Annotated[
        bool,
        typer.Option(
            "--if-present",
            help="For hooks: do nothing (exit 0, silent) unless the folder is set up "
            "(.markdownvdb or an index) and not switched off (.mdvdb-off).",
        ),
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="local, ray (a Ray cluster started for the run) or ray:ADDRESS "
            "(MDVDB_EXECUTOR; docs/scale-out.md).",
        ),
    ] = None,
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """Index the source folders (only what changed since the last run)."""
    # The same run as the parser of the hot path (`mdvdb.cli.ingest`, no typer).
    from mdvdb.cli.ingest import run_ingest

    run_ingest(
        paths,
        None if root is None else str(root),
        full=full,
        quiet=quiet,
        no_wait=no_wait,
        if_present=if_present,
        as_json=as_json,
        executor=executor,
    )


# The typer command below is generated from the one declaration of the search options
# (`query.search_options`, by `mdvdb.cli.declared`): help, bounds and choices come from there,
# as for the hand parser in `search.py` (the cold path) and the MCP tool.
def request_fields(ctx: typer.Context, values: dict[str, Any]) -> dict[str, Any]:
    """The typer command's values as `SearchRequest` fields, as the hand parser gives them."""
    from mdvdb.cli.metadata import one_facet

    return field_values(OPTIONS, values, lambda flag, given: one_facet(ctx, flag, given))


def search(ctx: typer.Context, **values: Any) -> None:
    """Search the index; title matches first, then content. With no query, list the files
    that pass the filters."""
    from mdvdb.cli.metadata import usage_error
    from mdvdb.cli.search import run_search

    root, as_json = values.pop("root"), values.pop("as_json")
    fields = request_fields(ctx, values)
    if not (fields["query"] or fields["filters"] or fields["tag"] or fields["category"]):
        usage_error(ctx, "give a QUERY, --filter, --tag or --category")
    with user_errors():
        config = load(root)
        refuse_if_off(config)
        run_search(config, as_json, fields)


app.command()(declare_command(search, OPTIONS))


@app.command()
def get(
    path: Annotated[str, typer.Argument(help="A file path, relative to the project root.")],
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print one indexed document: its content and metadata."""
    # The same run as the parser of the hot path (`mdvdb.cli.get`, no typer).
    from mdvdb.cli.get import run_get

    run_get(path, None if root is None else str(root), as_json)


@app.command()
def status(
    check: Annotated[
        bool,
        typer.Option("--check", help="Only an exit code: 0 fresh, 3 stale, 4 no index."),
    ] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Read and check the whole index; exit 1 if unsound.")
    ] = False,
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """What the index holds and whether it is up to date."""
    # The same run as the parser of the hot path (`mdvdb.cli.status`, no typer).
    from mdvdb.cli.status import run_status

    code = run_status(None if root is None else str(root), as_json, check, verify)
    if code:
        raise typer.Exit(code)
