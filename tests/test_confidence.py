"""Each result's confidence (issue 32): in [0, 1], never rising down an answer, the same in
the CLI, the MCP server and the library; `--min-confidence` leaves out the unlikely ones."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.conftest import run_cli
from tests.json_shapes import call_tool

QUERY = "extract a tar archive"


def _search(root: Path, *args: str, env: dict | None = None) -> dict:
    done = run_cli("search", "--json", *args, cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _never_rising(values: list[float]) -> bool:
    return all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_every_result_has_a_confidence_that_never_rises(indexed_notes: Path):
    for query in (QUERY, "git branches", "how to bake bread", "networking"):
        values = [r["confidence"] for r in _search(indexed_notes, "-n", "20", query)["results"]]
        assert values and all(0.0 <= v <= 1.0 for v in values), (query, values)
        assert _never_rising(values), (query, values)
    files = _search(indexed_notes, "--files", QUERY)["files"]
    assert files[0]["path"] == "tar.md" and 0.0 <= files[0]["confidence"] <= 1.0


def test_a_clear_answer_is_surer_than_a_stray_one(indexed_notes: Path):
    """The page that answers is the surest result, and its confidence means more than a
    rank: it stands above the results of other files."""
    results = _search(indexed_notes, "-n", "10", QUERY)["results"]
    assert results[0]["path"] == "tar.md"
    others = [r["confidence"] for r in results if r["path"] != "tar.md"]
    assert others and results[0]["confidence"] > 2 * max(others)


def test_min_confidence_leaves_out_the_unlikely_results(indexed_notes: Path):
    everything = _search(indexed_notes, "-n", "20", QUERY)["results"]
    least = (everything[0]["confidence"] + everything[-1]["confidence"]) / 2
    kept = _search(indexed_notes, "-n", "20", "--min-confidence", str(least), QUERY)["results"]
    assert 0 < len(kept) < len(everything)
    assert all(r["confidence"] >= least for r in kept)
    by_setting = _search(
        indexed_notes, "-n", "20", QUERY, env={"MDVDB_SEARCH_MIN_CONFIDENCE": str(least)}
    )["results"]
    assert by_setting == kept
    human = run_cli("search", QUERY, cwd=indexed_notes)
    assert f"(1.300, confidence {everything[0]['confidence']:.2f})" in human.stdout
    wrong = run_cli("search", "--min-confidence", "2", QUERY, cwd=indexed_notes)
    assert wrong.returncode == 2 and "--min-confidence must be at most 1" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_the_library_and_mcp_give_the_same_confidences(indexed_notes: Path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    import mdvdb
    from query import SearchRequest, run_request

    cli = [r["confidence"] for r in _search(indexed_notes, "-n", "5", QUERY)["results"]]
    index = mdvdb.open_index(root=indexed_notes)
    outcome = run_request(index, SearchRequest(query=QUERY, limit=5))
    assert [hit.confidence for _, hit in outcome.tiers.results] == cli
    plain = index.search(QUERY, limit=5).results
    assert all(0.0 <= hit.confidence <= 1.0 for hit in plain)
    least = cli[1]
    fewer = run_request(index, SearchRequest(query=QUERY, limit=5, min_confidence=least))
    assert [hit.confidence for _, hit in fewer.tiers.results] == [c for c in cli if c >= least]

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(indexed_notes)]
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            found = await call_tool(session, "search", {"query": QUERY, "limit": 5})
            cut = await call_tool(
                session, "search", {"query": QUERY, "limit": 5, "min_confidence": least}
            )
            return tools["search"].input_schema, found.structured_content, cut.structured_content

    schema, found, cut = asyncio.run(run())
    assert "min_confidence" in schema["properties"]
    assert [r["confidence"] for r in found["results"]] == cli
    assert all(r["confidence"] >= least for r in cut["results"]) and cut["results"]
