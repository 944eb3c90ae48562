"""`mdvdb search` without typer: the argument parser of the hot path, and the printers.

Agents call search hundreds of times a session; typer's import and per-call setup cost ~100 ms
of a ~350 ms cold call. So `mdvdb.cli.main` gives `search` to `run()` first: it parses the
argument forms agents and people use (flags, `--opt value`, `--opt=value`, `-n5`, `--`) and
hands back None for anything else (`--help`, an unknown option, a bad number, a missing query,
a repeated facet...), which typer then parses and reports exactly as before. The typer command
in `core.py` declares the same options (a test checks the two agree) and calls the same
`run_search`, so both paths print the same bytes.
"""

from __future__ import annotations

import re
from typing import Any

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
from mdvdb.terminal import printable

VALUES_SHOWN = 200  # facet values listed in "No matches. Valid values: ..."
MODES = ("hybrid", "semantic", "lexical")

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _positive(raw: str) -> int | None:
    return int(raw) if _INT.fullmatch(raw) and int(raw) >= 1 else None


def _count(raw: str) -> int | None:
    return int(raw) if _INT.fullmatch(raw) and int(raw) >= 0 else None


def _int(raw: str) -> int | None:
    return int(raw) if _INT.fullmatch(raw) else None


def _float(raw: str) -> float | None:
    return float(raw) if _FLOAT.fullmatch(raw) else None


def _mode(raw: str) -> str | None:
    return raw if raw in MODES else None


def _text(raw: str) -> str | None:
    return raw


# Every option of the typer `search` command, by kind. A converter returning None means "not
# a value this parser is sure of": typer gets the call.
FLAGS = {
    "--files": "files",
    "--explain": "explain",
    "--json": "as_json",
    "--no-collapse": "no_collapse",
}
SWITCHES = {"--govern": ("govern", True), "--no-govern": ("govern", False)}
VALUED = {
    "-n": ("limit", _positive),
    "--limit": ("limit", _positive),
    "--min-score": ("min_score", _float),
    "--max-tokens": ("max_tokens", _positive),
    "--per-file": ("per_file", _count),
    "--mode": ("mode", _mode),
    "--cluster": ("cluster", _int),
    "--root": ("root", _text),
}
REPEATED = {"--filter": "filters", "--tag": "tag", "--category": "category"}


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The search arguments, or None when typer should parse (and maybe reject) them."""
    args: dict[str, Any] = {"filters": [], "tag": [], "category": []}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional += argv[i:]
            break
        if arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        if arg.startswith("--"):
            name, equals, inline = arg.partition("=")
            value = inline if equals else None
        elif arg.startswith("-n") and len(arg) > 2 and arg[2] != "=":
            name, value = "-n", arg[2:]
        else:
            name, value = arg, None
        if name in FLAGS or name in SWITCHES:
            if value is not None:
                return None
            dest, const = (FLAGS[name], True) if name in FLAGS else SWITCHES[name]
            if dest in args and args[dest] != const:
                return None  # --govern --no-govern: let typer decide
            args[dest] = const
            continue
        if name not in VALUED and name not in REPEATED:
            return None
        if value is None:
            if i >= len(argv) or (argv[i].startswith("-") and _float(argv[i]) is None):
                return None
            value = argv[i]
            i += 1
        if name in REPEATED:
            args[REPEATED[name]].append(value)
            continue
        dest, convert = VALUED[name]
        converted = convert(value)
        if converted is None or dest in args:
            return None
        args[dest] = converted
    if len(positional) > 1 or len(args["tag"]) > 1 or len(args["category"]) > 1:
        return None
    args["query"] = positional[0] if positional else None
    if not (args["query"] or args["filters"] or args["tag"] or args["category"]):
        return None
    return args


def run(argv: list[str]) -> int | None:
    """Search and print; the exit code, or None to have typer parse `argv`."""
    args = parse(argv)
    if args is None:
        return None
    with user_errors():
        config = load(args.get("root"))
        refuse_if_off(config)
        run_search(
            config,
            args.get("as_json", False),
            limit=args.get("limit"),
            query=args["query"],
            filters=args["filters"],
            tag=args["tag"][0] if args["tag"] else None,
            category=args["category"][0] if args["category"] else None,
            files=args.get("files", False),
            max_tokens=args.get("max_tokens"),
            mode=args.get("mode"),
            min_score=args.get("min_score"),
            govern=args.get("govern"),
            explain=args.get("explain", False),
            cluster=args.get("cluster"),
            per_file=args.get("per_file"),
            collapse=not args.get("no_collapse", False),
        )
    return EXIT_OK


def run_search(config, as_json: bool, limit: int | None = None, **request: Any) -> None:
    """Run one `query.request` search (the library the MCP server uses too) and print it;
    `request` holds the other `SearchRequest` fields."""
    from query import FilterError, RequestError, SearchRequest, open_index, run_request

    index = open_index(config=config)
    # No -n: MDVDB_SEARCH_DEFAULT_LIMIT (10), resolved by the request as for the library.
    wanted = SearchRequest(limit=limit, **request)
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
            "facet": missing.facet.flag,
            "valid_values": missing.values,
            "no_match": no_match,
        }
    )
