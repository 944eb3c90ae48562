"""`mdvdb schema`, and the metadata side of `mdvdb search` (filters, facets, tiers)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mdvdb.cli.app import (
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    JsonOption,
    RootOption,
    app,
    load,
    print_json,
    user_errors,
)

DEFAULT_CAP = 20
VALUES_SHOWN = 200  # facet values listed in "No matches. Valid values: ..."


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
    with user_errors():
        config = load(root)
        from query import open_index
        from query.schema import load_schema, overlay_is_stale

        index = open_index(config=config)
        merged = load_schema(index.snapshot)
        if not merged.present:
            raise CliError("this index has no frontmatter schema yet: run `mdvdb ingest`")
        if overlay_is_stale(index):
            typer.echo(
                "warning: .markdownvdb.schema.yml changed since the last ingest; "
                "run `mdvdb ingest` to merge it",
                err=True,
            )
        if check:
            _check(merged, as_json)
        elif field is not None:
            _one_field(index, merged, field, as_json)
        elif as_json:
            print_json({"files": index.snapshot.file.meta.get("files", 0), **merged.to_json()})
        else:
            _print_schema(merged, int(index.snapshot.meta.get("files", 0)))


def _print_schema(merged, files: int) -> None:
    overlay = "none" if merged.overlay_digest is None else ".markdownvdb.schema.yml"
    typer.echo(f"{len(merged.fields)} frontmatter fields over {files} files (overlay: {overlay})")
    if merged.overlay_error:
        typer.echo(f"overlay ignored: {merged.overlay_error}")
    width = max((len(name) for name in merged.fields), default=0)
    for info in merged.fields.values():
        kind = info.type
        if info.type == "mixed" or info.type != info.inferred_type != "none":
            found = ", ".join(f"{t} {n}" for t, n in sorted(info.type_counts.items()))
            kind += f" (found: {found})" if found else " (no file has it yet)"
        flags = "  required" if info.required else ""
        typer.echo(f"{info.name.ljust(width)}  {kind}  {info.files} files{flags}")
        if info.description:
            typer.echo(f"{'':{width}}  {info.description}")
        if info.values is not None:
            shown = ", ".join(f"{v} ({n})" for v, n in info.values)
            typer.echo(f"{'':{width}}  values: {shown}")
        elif info.distinct:
            typer.echo(f"{'':{width}}  {info.distinct} distinct values")
        if info.allowed is not None:
            typer.echo(f"{'':{width}}  allowed: {', '.join(info.allowed)}")


def _one_field(index, merged, name: str, as_json: bool) -> None:
    from dataclasses import asdict

    info = merged.get(name)
    if info is None:
        known = ", ".join(merged.field_names()) or "(none)"
        raise CliError(f"unknown field {name!r}; known: {known}", EXIT_USAGE)
    counts = _value_counts(index, info)
    if as_json:
        print_json({**asdict(info), "values": counts})
        return
    typer.echo(f"{info.name}: {info.type}, {info.files} files, {info.distinct} distinct values")
    if info.description:
        typer.echo(info.description)
    for value, n in counts:
        typer.echo(f"  {value}  ({n})")


def _value_counts(index, info) -> list[tuple[str, int]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    files = index.snapshot.table("files")
    if info.column is None or info.column not in files.column_names:
        return []
    column = files.column(info.column).combine_chunks()
    if pa.types.is_list(column.type):
        column = pc.list_flatten(column)
    if not pa.types.is_string(column.type):
        column = pc.cast(column, pa.string())
    counted = pc.value_counts(column.drop_null()).to_pylist()
    return sorted(((c["values"], c["counts"]) for c in counted), key=lambda vc: (-vc[1], vc[0]))


def _check(merged, as_json: bool) -> None:
    problems = [(p.path, p.field, p.problem) for p in merged.problems]
    if merged.overlay_error:
        problems.insert(0, (".markdownvdb.schema.yml", "", merged.overlay_error))
    if as_json:
        print_json(
            {
                "ok": not problems,
                "problems": [{"path": p, "field": f, "problem": m} for p, f, m in problems],
            }
        )
    else:
        for path, name, problem in problems:
            typer.echo(f"{path}: {name}: {problem}" if name else f"{path}: {problem}")
        if problems:
            files = len({p for p, _, _ in problems})
            typer.echo(f"{len(problems)} problems in {files} files", err=True)
        elif merged.overlay_digest is None:
            typer.echo("No overlay (.markdownvdb.schema.yml): nothing to check.")
        else:
            typer.echo("Every file fits the overlay.")
    if problems:
        raise typer.Exit(EXIT_ERROR)


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


def default_cap(config) -> int:
    """20 results, the kb-search cap, unless MDVDB_SEARCH_DEFAULT_LIMIT was set."""
    if config.origins.get("MDVDB_SEARCH_DEFAULT_LIMIT", "the default") != "the default":
        return config.search_default_limit
    return DEFAULT_CAP


def run_search(
    config,
    query: str | None,
    filter_texts: list[str],
    tag: str | None,
    category: str | None,
    limit: int | None,
    as_json: bool,
    files: bool = False,
    max_tokens: int | None = None,
    explain: bool = False,
    search_options: dict[str, Any] | None = None,
) -> None:
    """Facets and filters restrict the files; with a query, title matches come first."""
    from query import open_index
    from query.facets import facets_of, unmatched
    from query.filters import FilterError, matching_files, parse_filter

    index = open_index(config=config)
    cap = limit or default_cap(config)
    facets = facets_of(index, tag, category)
    options = {k: v for k, v in (search_options or {}).items() if v is not None}
    try:
        filters = [parse_filter(text) for text in filter_texts]
        filters += [facet.filter() for facet in facets]
        for facet in facets:
            values = unmatched(index, facet)
            if values is not None:
                _no_such_value(facet, values, query, as_json)
                return
        if query:
            from query.tiers import tiered_search

            wanted = cap * 4 if files else cap  # --files folds sections into files
            response = tiered_search(index, query, filters, limit=wanted, **options)
        else:
            found, total = matching_files(index, filters, limit=cap)
    except FilterError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if not query:
        _print_files(found, total, cap, as_json)
        return
    if max_tokens is not None:
        from query import shaping

        kept = shaping.within_budget([hit for _, hit in response.results], max_tokens)
        tiers = [tier for tier, _ in response.results][: len(kept)]
        response.results = list(zip(tiers, kept, strict=True))
    if files:
        _print_by_file(query, response, cap, as_json)
    elif as_json:
        print_json(response.to_json(explain))
    elif not response.results:
        _suggest(index, filters)
    else:
        _print_tiers(response, explain)


def _print_tiers(response, explain: bool) -> None:
    tier = None
    for i, (this_tier, hit) in enumerate(response.results, 1):
        if this_tier != tier:
            tier = this_tier
            typer.echo("## Title Matches" if tier == "title" else "## Content Matches")
        heading = " > ".join(hit.heading_path)
        typer.echo(f"{i}. {hit.path}:{hit.start_line}-{hit.end_line}  ({hit.score:.3f})")
        if heading:
            typer.echo(f"   {heading}")
        typer.echo(f"   {hit.excerpt}")
        if explain and hit.explain:
            parts = ", ".join(f"{k}={v:+.4g}" for k, v in hit.explain.items())
            typer.echo(f"   explain: {parts}")
    if response.truncated:
        _cap_note(len(response.results), response.total)


def _print_by_file(query: str, response, cap: int, as_json: bool) -> None:
    """`--files`: one line per file in tier order (title documents first)."""
    from query import shaping

    hits = shaping.by_file([hit for _, hit in response.results], cap)
    if as_json:
        print_json({"query": query, "files": [h.to_json() for h in hits]})
        return
    for hit in hits:
        typer.echo(f"{hit.score:.3f}  {hit.path}")


def _print_files(found, total: int, cap: int, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "query": None,
                "results": [{**f.to_json(), "tier": "filter"} for f in found],
                "total": total,
                "shown": len(found),
                "truncated": total > len(found),
            }
        )
        return
    if not found:
        typer.echo("No matches.")
        return
    for f in found:
        typer.echo(f"- [{plain_title(f.title)}]({link_target(f.path)})")
    if total > len(found):
        _cap_note(len(found), total)


def plain_title(title: str) -> str:
    """A title fit for link text: Markdown links reduced to their text, brackets escaped."""
    import re

    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return text.replace("[", "\\[").replace("]", "\\]")


def link_target(path: str) -> str:
    """CommonMark takes a destination with spaces or parentheses only inside <...>."""
    return f"<{path}>" if any(c in path for c in " ()<>") else path


def _cap_note(shown: int, total: int) -> None:
    typer.echo(
        f"Showing top {shown} of {total} matches. Narrow the query for more specific results."
    )


def _no_such_value(facet, values: list[str], query: str | None, as_json: bool) -> None:
    if values:
        listed = ", ".join(values[:VALUES_SHOWN])
        if len(values) > VALUES_SHOWN:
            listed += (
                f" ... and {len(values) - VALUES_SHOWN} more (`mdvdb schema {facet.field}` "
                "lists them all)"
            )
        message = f"No matches. Valid values: {listed}"
    else:
        message = (
            f"No matches. Valid values: none (no file has a {facet.field!r} field; "
            "`mdvdb schema` lists the fields there are)"
        )
    if as_json:
        print_json(
            {
                "query": query,
                "results": [],
                "total": 0,
                "message": message,
                "facet": facet.flag,
                "valid_values": values,
            }
        )
        return
    typer.echo(message)


def _suggest(index, filters) -> None:
    typer.echo("No matches.")
    typer.echo("Suggestions:")
    typer.echo("- check the spelling of the query and of any filter values")
    typer.echo("- try broader or fewer terms")
    if filters:
        typer.echo(
            "- drop a filter, or list valid values with `mdvdb schema` (`mdvdb schema FIELD` "
            "for every value of one field)"
        )
    else:
        typer.echo("- list the fields and their values with `mdvdb schema`")
    typer.echo("- if files changed since the last ingest, run `mdvdb ingest` (`mdvdb status`)")
