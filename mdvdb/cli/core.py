"""The foundation commands: ingest, search, get, status."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from kernel.config import Config
from kernel.terminal import printable
from mdvdb.cli.app import (
    EXIT_NO_INDEX,
    EXIT_OK,
    EXIT_STALE,
    CliError,
    JsonOption,
    RootOption,
    app,
    load,
    print_json,
    refuse_if_off,
    user_errors,
)
from mdvdb.cli.declared import declare_command, field_values, on_project
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
@on_project
def get(
    config: Config,
    as_json: bool,
    path: Annotated[str, typer.Argument(help="A file path, relative to the project root.")],
) -> None:
    """Print one indexed document: its content and metadata."""
    from query import open_index

    doc = open_index(config=config).get_document(path)
    if as_json:
        print_json(doc.to_json())
        return
    typer.echo(printable(f"# {doc.path}  ({doc.title})", one_line=True))
    for key, value in doc.metadata.items():
        typer.echo(printable(f"{key}: {value}", one_line=True))
    typer.echo("")
    typer.echo(printable(doc.content), nl=not doc.content.endswith("\n"))


@app.command()
@on_project
def status(
    config: Config,
    as_json: bool,
    check: Annotated[
        bool,
        typer.Option("--check", help="Only an exit code: 0 fresh, 3 stale, 4 no index."),
    ] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Read and check the whole index; exit 1 if unsound.")
    ] = False,
) -> None:
    """What the index holds and whether it is up to date."""
    if check:
        refuse_if_off(config)  # the same line and code as `search`: one check suffices
    if verify:
        from mdvdb.cli.verify import run_verify

        return run_verify(config, as_json)
    st, damage = _status_of(config)
    if st.exists:
        st.new_files = _new_files(config, st)
    if damage and not as_json:
        # the readers' own line ("index damaged: run `mdvdb ingest --full` (...)") as is
        raise CliError(damage if damage.startswith("index damaged") else f"damaged index: {damage}")
    if check:
        code = EXIT_OK if st.fresh else EXIT_STALE if st.exists else EXIT_NO_INDEX
        if as_json:
            print_json({"fresh": st.fresh, "exists": st.exists, "exit": code})
        raise typer.Exit(code)
    if as_json:
        print_json({**st.to_json(), "damaged": damage, "switched_off": config.switched_off})
        return
    if not st.exists:
        raise CliError(f"no index at {st.index_path}: run `mdvdb ingest`")
    updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.last_update or 0))
    typer.echo(f"index:      {st.index_path} ({st.index_bytes / 1e6:.1f} MB)")
    typer.echo(f"documents:  {st.files}")
    typer.echo(f"chunks:     {st.chunks}")
    typer.echo(f"updated:    {updated}")
    typer.echo(f"embeddings: {st.provider}:{st.model} ({st.dimensions} dims)")
    if st.provider_mismatch:
        typer.echo(f"stale:      {st.provider_mismatch}; run `mdvdb ingest`")
    stale = st.stale_files + st.new_files
    if stale:
        typer.echo(f"stale:      {len(stale)} files changed since indexing, e.g.:")
        for path in stale[:10]:
            typer.echo(f"  {printable(path, one_line=True)}")
    elif not st.provider_mismatch:
        typer.echo("stale:      none")
    if st.errors:
        typer.echo(f"problems:   {len(st.errors)} reported by the last ingest, e.g.:")
        for path, problem in st.errors[:10]:
            typer.echo(f"  {printable(f'{path}: {problem}', one_line=True)}")
    if config.switched_off:
        typer.echo("switched off: .mdvdb-off exists here; `mdvdb search` exits 5")


def _status_of(config):
    """The index's status, and what is wrong with it when the file is there but unreadable
    (`Index.status` calls such an index absent)."""
    from kernel.index_format import IndexFormatError
    from query import open_index

    index = open_index(config=config)
    try:
        st = index.status()
    except (OSError, ValueError, IndexFormatError) as exc:  # damaged, torn or foreign
        from query import Status

        st, reason = Status(index_path=str(config.index_path), exists=False), str(exc)
    else:
        if st.exists or not config.index_path.exists():
            return st, None
        try:
            index.snapshot  # noqa: B018 - the load says why it failed
            reason = "unreadable"
        except Exception as exc:
            reason = str(exc)
    if not config.index_path.exists():
        return st, None
    reason = reason.rstrip(".")
    if str(config.index_path) not in reason:
        reason = f"{config.index_path}: {reason}; run `mdvdb ingest --full`"
    return st, reason


def _new_files(config, st) -> list[str]:
    """Files on disk that the index does not have (uses the ingest's own walk and rules)."""
    from pipeline import walk
    from query import new_files, open_index

    return new_files(open_index(config=config).snapshot, config.root, walk(config, []))
