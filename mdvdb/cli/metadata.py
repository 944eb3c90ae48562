"""`mdvdb schema`, and the usage errors of `mdvdb search`'s typer path."""

from __future__ import annotations

from typing import Annotated

import typer

from kernel.config import Config
from mdvdb.cli.app import (
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    app,
    print_json,
)
from mdvdb.cli.declared import on_project


@app.command()
@on_project
def schema(
    config: Config,
    as_json: bool,
    field: Annotated[
        str | None, typer.Argument(help="One field: its details and every value with counts.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option("--check", help="List files that break the overlay; exit 1 if any."),
    ] = False,
) -> None:
    """The frontmatter schema: fields, types, file counts, values; merged with the overlay."""
    from query import load_schema, open_index, overlay_is_stale

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
    from query import value_counts

    counts = value_counts(index.snapshot, info)
    if as_json:
        print_json({**asdict(info), "values": counts})
        return
    typer.echo(f"{info.name}: {info.type}, {info.files} files, {info.distinct} distinct values")
    if info.description:
        typer.echo(info.description)
    for value, n in counts:
        typer.echo(f"  {value}  ({n})")


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
