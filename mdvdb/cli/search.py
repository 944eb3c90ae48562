"""`mdvdb search`: the index searched, the results printed (titles first, then content)."""

from __future__ import annotations

import re  # loaded by the parser already
from typing import Any

from kernel.terminal import printable
from mdvdb.cli import errors
from mdvdb.cli.errors import (
    EXIT_USAGE,
    CliError,
    echo,
    load,
    print_json,
    refuse_if_off,
    user_errors,
)
from mdvdb.cli.parser import Command, UsageError
from query import OPTIONS

VALUES_SHOWN = 200  # facet values listed in "No matches. Valid values: ..."
TIER_HEADINGS = {
    "title": "## Title Matches",
    "content": "## Content Matches",
    "repeated": "## Only In A Repeated Block (a footer or template many files share)",
}


def search(root: str | None, as_json: bool, **fields: Any) -> None:
    """`fields`: the `SearchRequest` fields the parser read."""
    scoped = ("filters", "tag", "category", "paths", "sources", "since", "before")
    if not (fields["query"] or any(fields[name] for name in scoped)):
        raise UsageError("give a QUERY, --filter, --tag, --category, --path, --source or --since")
    with user_errors():
        config = load(root)
        refuse_if_off(config)
        run_search(config, as_json, fields)


COMMAND = Command(
    "search",
    OPTIONS,
    search,
    help="Search the index; title matches first, then content. With no query, list "
    "the files that pass the filters.",
)


def run_search(config, as_json: bool, fields: dict[str, Any]) -> None:
    """Run one `query.request` search and print it; `fields`: `SearchRequest` fields."""
    from query import open_index

    index = open_index(config=config, lite=errors.ONE_SHOT)
    wanted, outcome = search_outcome(index, fields)
    if as_json:
        print_json(json_answer(index, wanted, outcome))
        return
    if _is_empty(outcome):  # the same suggestions whatever left nothing (query.no_match)
        from query import explain_no_match

        for line in explain_no_match(index, outcome).lines():
            echo(line)
    elif outcome.listed is not None:
        _print_files(outcome)
    elif outcome.files is not None:
        for hit in outcome.files:  # `--files`: one line per file in tier order
            echo(f"{hit.score:.3f}  {printable(hit.path, one_line=True)}")
    else:
        _print_tiers(outcome.tiers, wanted.explain)


def search_outcome(index, fields: dict[str, Any]):
    """(the request, its outcome) of `SearchRequest` fields; a bad one is a usage error."""
    from query import FilterError, RequestError, SearchRequest, run_request

    wanted = SearchRequest(**fields)
    try:
        with index.pinned():
            return wanted, run_request(index, wanted)
    except (FilterError, RequestError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _is_empty(outcome) -> bool:
    return not (outcome.listed or outcome.files or (outcome.tiers and outcome.tiers.results))


def json_answer(index, wanted, outcome) -> dict[str, Any]:
    """The `--json` document of a search (docs/json.md), also `mdvdb serve --ray`'s answer."""
    no_match = None
    if _is_empty(outcome):
        from query import explain_no_match

        no_match = explain_no_match(index, outcome).to_json()
    if outcome.no_such_value is not None:  # the human form is query.no_match's
        missing = outcome.no_such_value
        return {
            "query": wanted.query,
            "results": [],
            "total": 0,
            "message": missing.message(VALUES_SHOWN),
            "facet": missing.facet.flag.lstrip("-"),
            "valid_values": missing.values,
            "no_match": no_match,
        }
    if outcome.listed is not None:
        found, total = outcome.listed, outcome.total
        data = {
            "query": None,
            "results": [{**f.to_json(), "tier": "filter"} for f in found],
            "total": total,
            "shown": len(found),
            "truncated": total > len(found),
        }
    elif outcome.files is not None:
        data = {"query": wanted.query, "files": [h.to_json() for h in outcome.files]}
    else:
        data = outcome.tiers.to_json(wanted.explain)
    if outcome.sources is not None:
        data["sources"] = outcome.sources_json()
    if no_match is not None:
        data["no_match"] = no_match
    return data


def _print_tiers(response, explain: bool) -> None:
    tier = None
    for i, (this_tier, hit) in enumerate(response.results, 1):
        if this_tier != tier:
            tier = this_tier
            echo(TIER_HEADINGS.get(tier, "## Content Matches"))
        heading = printable(" > ".join(hit.heading_path), one_line=True)
        path = printable(hit.path, one_line=True)
        sure = "" if hit.confidence is None else f", confidence {hit.confidence:.2f}"
        source = f"  [{printable(hit.source, one_line=True)}]" if hit.source else ""
        line = f"{i}. {path}:{hit.start_line}-{hit.end_line}  ({hit.score:.3f}{sure})"
        echo(f"{line}  #{hit.id}{source}")
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


def _print_files(outcome) -> None:
    found, total = outcome.listed, outcome.total
    for f in found:
        title, target = plain_title(f.title), link_target(f.path)
        echo(f"- [{printable(title, one_line=True)}]({printable(target, one_line=True)})")
    if total > len(found):
        echo(
            f"Showing top {len(found)} of {total} matches. Narrow the query for more specific "
            "results."
        )


def plain_title(title: str) -> str:
    """A title fit for link text: Markdown links reduced to their text, brackets escaped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return text.replace("[", "\\[").replace("]", "\\]")


def link_target(path: str) -> str:
    """CommonMark takes a destination with spaces or parentheses only inside <...>."""
    return f"<{path}>" if any(c in path for c in " ()<>") else path
