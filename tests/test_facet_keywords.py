"""A facet plus a keyword: the page must contain the keyword (query/facets.py), and every
empty answer gives the same suggestions, whatever left nothing (query/no_match.py)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli
from tests.json_shapes import call_tool

# mcp is imported where used: it costs ~1 CPU-s, and every xdist worker imports every
# test module, inner-loop tests or not.

PAGES = {
    "redis.md": ("caching", "Redis cache", "Keep hot keys in memory and evict them with LRU."),
    "cdn.md": ("caching", "CDN edge", "Edge servers keep copies of pages near the users."),
    "memo.md": ("caching", "Memoization", "Remember the results of pure functions by argument."),
    "http.md": ("caching", "HTTP caching headers", "Cache-Control max-age and ETag revalidate."),
    "jobs.md": ("queues", "Job queue", "Workers take jobs and zzzqqq retry with backoff."),
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("facets")
    for name, (tag, title, text) in PAGES.items():
        (root / name).write_text(f"---\ntags: [{tag}]\n---\n# {title}\n\n{text}\n")
    return build_index(root)


def search(kb: Path, *args: str) -> str:
    done = run_cli("search", *args, "--root", str(kb))
    assert done.returncode == 0, done.stderr
    return done.stdout


def search_json(kb: Path, *args: str) -> dict:
    return json.loads(search(kb, *args, "--json"))


def suggestions(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    return lines[lines.index("Suggestions:") :]


def test_with_a_category_semantic_results_hold_the_query_words(indexed_notes: Path):
    """The inner loop's case of the rule (the tests below are `slow`): the fixture notes, two
    pages in category `tools`. Semantic search in it returns only the page with the word, and
    a query that no one page holds finds nothing, with the reason."""
    found = search_json(indexed_notes, "--category", "tools", "committing", "--mode", "semantic")
    assert {r["path"] for r in found["results"]} == {"git-basics.md"}
    data = search_json(indexed_notes, "--category", "tools", "gzip branch")
    assert data["results"] == []
    assert (
        "2 files pass --category tools, but none contains every word" in data["no_match"]["reason"]
    )


@pytest.mark.slow
def test_a_facet_and_a_keyword_return_only_pages_with_the_keyword(kb: Path):
    # zzzqqq is only on a page outside the facet: nothing, in every mode
    for mode in ("hybrid", "semantic", "lexical"):
        data = search_json(kb, "--tag", "caching", "zzzqqq", "--mode", mode)
        assert data["results"] == [], mode
        assert "none contains every word of 'zzzqqq'" in data["no_match"]["reason"]
    assert search_json(kb, "--tag", "caching", "zzzqqq", "--files")["files"] == []
    # without the facet the query still finds the page that has the word
    assert [r["path"] for r in search_json(kb, "zzzqqq")["results"]][:1] == ["jobs.md"]

    # every word must be on the page: "keys" alone and "hot keys" find redis.md only,
    # although semantic neighbours exist among the caching pages
    for query in ("keys", "hot keys", "KEY"):  # any case; stemmed as keyword search reads
        found = search_json(kb, "--tag", "caching", query, "--mode", "semantic")["results"]
        assert [r["path"] for r in found] == ["redis.md"], query
    found = search_json(kb, "--tag", "caching", "hot servers")["results"]
    assert found == []

    # a query of stop-words only adds no condition
    assert search_json(kb, "--tag", "caching", "the", "-n", "10")["results"]


@pytest.mark.slow
def test_no_matches_gives_the_same_suggestions_whatever_missed(kb: Path):
    outputs = {
        "query": search(kb, "qqqzzz", "--mode", "lexical"),
        "filter": search(kb, "--filter", "tags=nope"),
        "filter and query": search(kb, "--filter", "tags=nope", "memory"),
        "facet value": search(kb, "--tag", "nope", "memory"),
        "facet and keyword": search(kb, "--tag", "caching", "zzzqqq"),
        "files": search(kb, "--tag", "caching", "zzzqqq", "--files"),
    }
    first = suggestions(outputs["query"])
    assert len(first) == 6 and "mdvdb schema" in first[3] and "mdvdb ingest" in first[5]
    for name, stdout in outputs.items():
        assert stdout.startswith("No matches."), name
        assert suggestions(stdout) == first, name
    assert outputs["facet value"].startswith("No matches. Valid values: caching, queues\n")
    assert "No file passes --filter tags=nope." in outputs["filter"]
    assert re.search(r"4 files pass --tag caching, but none contains", outputs["files"])

    as_json = [
        search_json(kb, "qqqzzz", "--mode", "lexical"),
        search_json(kb, "--filter", "tags=nope"),
        search_json(kb, "--tag", "nope", "memory"),
        search_json(kb, "--tag", "caching", "zzzqqq", "--files"),
    ]
    assert all(d["no_match"]["suggestions"] == [s[2:] for s in first[1:]] for d in as_json)


@pytest.mark.slow
def test_mcp_search_applies_the_rule_and_the_same_hint(kb: Path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(kb)]
    )
    calls = [
        {"query": "zzzqqq", "tag": "caching"},
        {"query": "hot keys", "tag": "caching", "mode": "semantic"},
        {"query": "memory", "tag": "nope"},
        {"filters": ["tags=nope"]},
        {"query": "qqqzzz", "mode": "lexical"},
    ]

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [await call_tool(session, "search", arguments) for arguments in calls]

    replies = [r.structured_content for r in asyncio.run(run())]
    keyword, hot, value, listing, query = replies
    assert keyword["results"] == [] and "none contains every word" in keyword["hint"]
    assert [r["path"] for r in hot["results"]] == ["redis.md"]
    tails = [r["hint"].split(" Try: ", 1)[1] for r in (keyword, value, listing, query)]
    assert len(set(tails)) == 1 and "mdvdb grep" in tails[0]
    assert value["hint"].startswith("No matches. Valid values: caching, queues")
