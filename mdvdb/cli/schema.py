"""`mdvdb schema [FIELD]`: the frontmatter schema, merged with the overlay."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.options import Spec, declared, option
from mdvdb.cli import errors
from mdvdb.cli.errors import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    line,
    load,
    print_json,
    user_errors,
)
from mdvdb.cli.parser import Command


@dataclass(frozen=True)
class SchemaOptions:
    field: str | None = option(
        None, Spec(str, "One field: its details and every value with counts.")
    )
    check: bool = option(
        False, Spec(bool, "List files that break the overlay; exit 1 if any.", ("--check",))
    )


def run_schema(
    field: str | None = None,
    root: str | None = None,
    as_json: bool = False,
    check: bool = False,
) -> int:
    """Print the schema (or one field, or the overlay's problems); the exit code."""
    with user_errors():
        from query import load_schema, open_index, overlay_is_stale

        index = open_index(config=load(root), lite=errors.ONE_SHOT)
        merged = load_schema(index.snapshot)
        if not merged.present:
            raise CliError("this index has no frontmatter schema yet: run `mdvdb ingest`")
        stale = overlay_is_stale(index)
        if stale:
            line(f"warning: {STALE_OVERLAY}", err=True)
        if check:
            return _check(merged, as_json)
        if field is not None:
            _one_field(index, merged, field, as_json)
        elif as_json:
            data = {"files": index.snapshot.file.meta.get("files", 0), **merged.to_json()}
            data["problems_total"] = len(merged.problems)
            print_json({**data, **({"warning": STALE_OVERLAY} if stale else {})})
        else:
            _print_schema(merged, int(index.snapshot.meta.get("files", 0)))
        return EXIT_OK


STALE_OVERLAY = (
    ".markdownvdb.schema.yml changed since the last ingest; run `mdvdb ingest` to merge it"
)


def _print_schema(merged, files: int) -> None:
    from kernel.yaml_values import yaml_value

    overlay = "none" if merged.overlay_digest is None else ".markdownvdb.schema.yml"
    line(f"{len(merged.fields)} frontmatter fields over {files} files (overlay: {overlay})")
    if merged.overlay_error:
        line(f"overlay ignored: {merged.overlay_error}")
    width = max((len(name) for name in merged.fields), default=0)
    for info in merged.fields.values():
        kind = info.type
        if info.type == "mixed" or info.type != info.inferred_type != "none":
            found = ", ".join(f"{t} {n}" for t, n in sorted(info.type_counts.items()))
            kind += f" (found: {found})" if found else " (no file has it yet)"
        flags = "  required" if info.required else ""
        line(f"{info.name.ljust(width)}  {kind}  {info.files} files{flags}")
        if info.description:
            line(f"{'':{width}}  {info.description}")
        if info.values is not None:
            shown = ", ".join(f"{yaml_value(v)} ({n})" for v, n in info.values)
            line(f"{'':{width}}  values: {shown}")
        elif info.distinct:
            line(f"{'':{width}}  {info.distinct} distinct values")
        if info.allowed is not None:
            line(f"{'':{width}}  allowed: {', '.join(info.allowed)}")


def _one_field(index, merged, name: str, as_json: bool) -> None:
    from dataclasses import asdict

    info = merged.get(name)
    if info is None:
        known = ", ".join(merged.field_names()) or "(none)"
        raise CliError(f"unknown field {name!r}; known: {known}", EXIT_USAGE)
    from kernel.yaml_values import yaml_value
    from query import value_counts

    counts = value_counts(index.snapshot, info)
    if as_json:
        print_json({**asdict(info), "values": counts, "values_total": len(counts)})
        return
    line(f"{info.name}: {info.type}, {info.files} files, {info.distinct} distinct values")
    if info.description:
        line(info.description)
    for value, n in counts:
        line(f"  {yaml_value(value)}  ({n})")


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
            line(f"{path}: {name}: {problem}" if name else f"{path}: {problem}")
        if problems:
            files = len({p for p, _, _ in problems})
            line(f"{len(problems)} problems in {files} files", err=True)
        elif merged.overlay_digest is None:
            line("No overlay (.markdownvdb.schema.yml): nothing to check.")
        else:
            line("Every file fits the overlay.")
    return EXIT_ERROR if problems else EXIT_OK


COMMAND = Command(
    "schema",
    declared(SchemaOptions),
    run_schema,
    help="The frontmatter schema: fields, types, file counts, values; merged with the overlay.",
)
