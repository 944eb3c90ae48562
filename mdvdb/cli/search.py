"""`mdvdb search` without typer: the argument parser of the hot path, and the printers.

Agents call search hundreds of times a session; typer's import and per-call setup cost ~100 ms
of a ~350 ms cold call. So `mdvdb.cli.main` gives `search` to `fast_main()` first: it parses
the argument forms agents and people use (flags, `--opt value`, `--opt=value`, `-n5`, `--`) and
hands back None for anything else (`--help`, an unknown option, a bad number, a missing query,
a repeated facet...), which typer then parses and reports exactly as before. This parser is
kept, rather than typer's alone, only because of that cold-path cost; it is built
(`mdvdb.cli.hand_parser`) from the same declaration as the typer command in `core.py`
(`query.search_options`), and both call `run_search`, so both paths print the same bytes (a
test runs both on the same argument lists).
"""

from __future__ import annotations

from typing import Any

from kernel.terminal import printable
from mdvdb.cli.errors import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    echo,
    load,
    print_json,
    refuse_if_off,
    user_errors,
)
from mdvdb.cli.hand_parser import HandParser, Problem
from query import OPTIONS

VALUES_SHOWN = 200  # facet values listed in "No matches. Valid values: ..."

# Unsure of an argument list (a repeat, a bad value, an unknown option): typer parses it.
PARSER = HandParser(OPTIONS)


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The search arguments (`SearchRequest` fields, `root`, `as_json`), or None when typer
    should parse (and maybe reject) them."""
    args = PARSER.parse(argv)
    if isinstance(args, Problem):
        return None
    if not (args["query"] or args["filters"] or args["tag"] or args["category"]):
        return None
    return args


def fast_main(argv: list[str], one_shot: bool = False) -> int | None:
    """Search and print; the exit code, or None to have typer parse `argv`. `one_shot`: this
    process exits after the search (`mdvdb.cli.main`), so the index is read without pyarrow
    (`kernel.arrow_lite`; MDVDB_ARROW_READER=1 reads it with pyarrow all the same); a warm
    server's calls use the index it mapped and warmed at start."""
    args = parse(argv)
    if args is None:
        return None
    import os

    from kernel.index_format import ARROW_READER_ENV

    if not one_shot or os.environ.get(ARROW_READER_ENV):
        import_arrow_without_cloudpickle()
    with user_errors():
        root, as_json = args.pop("root", None), args.pop("as_json", False)
        config = load(root)
        refuse_if_off(config)
        run_search(config, as_json, args, lite=one_shot)
    return EXIT_OK


def import_arrow_without_cloudpickle() -> None:
    """Import pyarrow as a search needs it. pyarrow imports cloudpickle whenever it is
    installed (doit depends on it), for pickling Arrow objects, which a search never does;
    with it (and uuid, logging) that is ~15 ms of CPU of a ~200 ms cold search. Hidden for
    the length of this import only, so that anything later can still import it."""
    import sys

    if "pyarrow" in sys.modules or "cloudpickle" in sys.modules:
        return
    sys.modules["cloudpickle"] = None  # type: ignore[assignment]  # makes its import fail
    try:
        import pyarrow  # noqa: F401
    finally:
        del sys.modules["cloudpickle"]


def run_search(config, as_json: bool, fields: dict[str, Any], lite: bool = False) -> None:
    """Run one `query.request` search (the library the MCP server uses too) and print it;
    `fields` are `SearchRequest` fields as either parser gives them; `lite`: map the index
    without pyarrow (`query.open_index`)."""
    from query import FilterError, RequestError, SearchRequest, open_index, run_request

    index = open_index(config=config, lite=lite)
    # No -n: MDVDB_SEARCH_DEFAULT_LIMIT (10), resolved by the request as for the library.
    wanted = SearchRequest(**fields)
    try:
        with index.pinned():
            outcome = run_request(index, wanted)
    except (FilterError, RequestError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    empty = not (outcome.listed or outcome.files or (outcome.tiers and outcome.tiers.results))
    if empty:  # the same suggestions whatever left nothing (query.no_match)
        from query import explain_no_match as explain

        missed = explain(index, outcome)
        if not as_json:
            for line in missed.lines():
                echo(line)
            return
    if outcome.no_such_value is not None:
        _no_such_value(outcome.no_such_value, wanted.query, as_json, missed.to_json())
    elif outcome.listed is not None:
        _print_files(outcome.listed, outcome.total, as_json, missed.to_json() if empty else None)
    elif outcome.files is not None:
        _print_by_file(wanted.query, outcome.files, as_json, missed.to_json() if empty else None)
    elif as_json:
        data = outcome.tiers.to_json(wanted.explain)
        if empty:
            data["no_match"] = missed.to_json()
        print_json(data)
    else:
        _print_tiers(outcome.tiers, wanted.explain)


def _print_tiers(response, explain: bool) -> None:
    tier = None
    for i, (this_tier, hit) in enumerate(response.results, 1):
        if this_tier != tier:
            tier = this_tier
            echo("## Title Matches" if tier == "title" else "## Content Matches")
        heading = printable(" > ".join(hit.heading_path), one_line=True)
        path = printable(hit.path, one_line=True)
        echo(f"{i}. {path}:{hit.start_line}-{hit.end_line}  ({hit.score:.3f})")
        if heading:
            echo(f"   {heading}")
        echo(f"   {hit.excerpt}")
        if hit.also_in_count:
            echo(f"   {also_in_line(hit)}")
        if explain and hit.explain:
            parts = ", ".join(f"{k}={v:+.4g}" for k, v in hit.explain.items())
            echo(f"   explain: {parts}")


def also_in_line(hit, shown: int = 3) -> str:
    """`also in 4 other files: a.md, b.md, c.md, …` (or `also at lines 40-52` for a copy in
    the same file)."""
    from query import other_files

    others = other_files(hit)
    if not others:
        lines = ", ".join(f"{c['start_line']}-{c['end_line']}" for c in hit.also_in[:shown])
        return f"also at lines {lines}"
    paths = list(dict.fromkeys(c["path"] for c in hit.also_in if c["path"] != hit.path))
    listed = ", ".join(paths[:shown]) + (", …" if others > shown else "")
    return f"also in {others} other file{'s' if others != 1 else ''}: {listed}"


def _print_by_file(query: str | None, hits, as_json: bool, no_match=None) -> None:
    """`--files`: one line per file in tier order (title documents first)."""
    if as_json:
        data = {"query": query, "files": [h.to_json() for h in hits]}
        if no_match is not None:
            data["no_match"] = no_match
        print_json(data)
        return
    for hit in hits:
        echo(f"{hit.score:.3f}  {printable(hit.path, one_line=True)}")


def _print_files(found, total: int, as_json: bool, no_match=None) -> None:
    if as_json:
        data = {
            "query": None,
            "results": [{**f.to_json(), "tier": "filter"} for f in found],
            "total": total,
            "shown": len(found),
            "truncated": total > len(found),
        }
        if no_match is not None:
            data["no_match"] = no_match
        print_json(data)
        return
    for f in found:
        title, target = plain_title(f.title), link_target(f.path)
        echo(f"- [{printable(title, one_line=True)}]({printable(target, one_line=True)})")
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
    echo(f"Showing top {shown} of {total} matches. Narrow the query for more specific results.")


def _no_such_value(missing, query: str | None, as_json: bool, no_match) -> None:
    """`--json` only: the human form is query.no_match's, headed by the valid values."""
    print_json(
        {
            "query": query,
            "results": [],
            "total": 0,
            "message": missing.message(VALUES_SHOWN),
            "facet": missing.facet.flag.lstrip("-"),
            "valid_values": missing.values,
            "no_match": no_match,
        }
    )
