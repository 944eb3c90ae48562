"""An honest empty answer (issue 32): a query with no real evidence of a match returns no
result and says why in one line, through the real CLI, `--json`, the MCP server and the
library; the pseudo-relevance feedback round never passes for lexical evidence."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.json_shapes import call_tool

NONSENSE = "qqqzzzxxy"
LINE = (
    f'no section matches "{NONSENSE}" '
    "(no query word is in the index, and nothing is close in meaning)"
)


def test_nonsense_query_gets_no_match_and_one_line(indexed_notes: Path):
    done = run_cli("search", NONSENSE, cwd=indexed_notes)
    assert done.returncode == 0, done.stderr
    assert LINE in done.stdout.splitlines()
    assert "Traceback" not in done.stderr
    as_json = run_cli("search", "--json", NONSENSE, cwd=indexed_notes)
    assert as_json.returncode == 0
    data = json.loads(as_json.stdout)
    assert data["results"] == [] and data["total"] == 0
    assert data["no_match"]["reason"] == LINE
    files = json.loads(run_cli("search", "--json", "--files", NONSENSE, cwd=indexed_notes).stdout)
    assert files["files"] == [] and files["no_match"]["reason"] == LINE


def test_feedback_terms_alone_are_no_evidence(indexed_notes: Path):
    """Before, the RM3 round took the words of the sections nearest by meaning and credited
    them to `lexical` (bm25 0, lexical +0.56): the query's words are in no section, so that
    is all the "lexical evidence" there was. Now the answer is empty, and the raw ranking
    (the library's `Index.search`) shows what the expansion added as `feedback`: `lexical`,
    the query's own words, is 0."""
    from query import open_index

    done = run_cli("search", "--json", "--explain", NONSENSE, cwd=indexed_notes)
    assert json.loads(done.stdout)["results"] == []
    index = open_index(indexed_notes)
    hits = index.search(NONSENSE, limit=5, explain=True).results
    assert hits and any(hit.explain.get("feedback", 0) > 0 for hit in hits)
    for hit in hits:
        assert hit.explain["bm25"] == 0 and hit.explain["lexical"] == 0


def test_explain_tells_the_query_words_from_the_feedback_terms(indexed_notes: Path):
    done = run_cli("search", "--json", "--explain", "extract a tar archive", cwd=indexed_notes)
    hits = json.loads(done.stdout)["results"]
    assert hits and hits[0]["path"] == "tar.md"
    for hit in hits:
        parts = hit["explain"]
        added = sum(v for k, v in parts.items() if k in ("lexical", "feedback", "semantic", "page"))
        assert abs(added + parts.get("stub", 0) + parts.get("name", 0) - parts["fused"]) < 1e-3
        if parts["bm25"] == 0:
            assert parts["lexical"] == 0  # a section without the query's words


def test_a_real_query_still_returns_its_result(indexed_notes: Path):
    done = run_cli("search", "extract a tar archive", cwd=indexed_notes)
    assert done.returncode == 0
    assert "tar.md" in done.stdout and "No matches." not in done.stdout
    data = json.loads(run_cli("search", "--json", "git branches", cwd=indexed_notes).stdout)
    assert data["results"][0]["path"] == "git-basics.md" and "no_match" not in data


def test_a_lexical_search_says_no_query_word_is_in_the_index(indexed_notes: Path):
    data = json.loads(
        run_cli("search", "--json", "--mode", "lexical", NONSENSE, cwd=indexed_notes).stdout
    )
    assert data["results"] == []
    reason = f'no section matches "{NONSENSE}" (no query word is in the index)'
    assert data["no_match"]["reason"] == reason


def test_the_library_request_gives_the_same_reason(indexed_notes: Path):
    from query import SearchRequest, explain_no_match, open_index, run_request

    index = open_index(indexed_notes)
    outcome = run_request(index, SearchRequest(query=NONSENSE))
    assert outcome.tiers.results == [] and outcome.no_evidence == LINE
    assert explain_no_match(index, outcome).reason == LINE
    assert run_request(index, SearchRequest(query="tar archive")).no_evidence is None


@pytest.mark.slow
def test_mcp_search_tool_returns_the_same_no_match(indexed_notes: Path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(indexed_notes)]
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [
                await call_tool(session, "search", {"query": query})
                for query in (NONSENSE, "extract a tar archive")
            ]

    nonsense, real = [r.structured_content for r in asyncio.run(run())]
    cli = json.loads(run_cli("search", "--json", NONSENSE, cwd=indexed_notes).stdout)
    assert nonsense["results"] == [] and nonsense["no_match"] == cli["no_match"]
    assert nonsense["hint"].startswith(f"No matches. {LINE} Try: ")
    assert real["results"] and "no_match" not in real


def test_a_sharded_index_gives_the_same_no_match(notes: Path):
    """A sharded index's lexical side has no term rows (its lookup returns every hash), so
    the evidence check must ask for postings: before, nonsense got results there."""
    sharded = {"MDVDB_SHARDS": "2"}
    assert run_cli("ingest", cwd=notes, env=sharded).returncode == 0
    data = json.loads(run_cli("search", "--json", NONSENSE, cwd=notes, env=sharded).stdout)
    assert data["results"] == [] and data["no_match"]["reason"] == LINE
    real = json.loads(run_cli("search", "--json", "extract tar", cwd=notes, env=sharded).stdout)
    assert real["results"] and real["results"][0]["path"] == "tar.md"
    # its shards keep no chunk table, so no headings: closeness spans the letters' spread
    foreign = json.loads(run_cli("search", "--json", FOREIGN, cwd=notes, env=sharded).stdout)
    assert foreign["results"] == [] and foreign["no_match"]["reason"] == FOREIGN_LINE


# A question of another subject that shares words with the notes ("wild", "day"): before, one
# word in some section was evidence enough and it got the nearest sections.
FOREIGN = "does eating wild fish every day cause cancer"
FOREIGN_LINE = (
    f'no section matches "{FOREIGN}" '
    "(the best sections hold 22% of the query's word weight, and nothing is close in meaning)"
)


def test_a_question_of_another_subject_gets_no_match(indexed_notes: Path):
    done = run_cli("search", FOREIGN, cwd=indexed_notes)
    assert done.returncode == 0, done.stderr
    assert FOREIGN_LINE in done.stdout.splitlines()
    data = json.loads(run_cli("search", "--json", FOREIGN, cwd=indexed_notes).stdout)
    assert data["results"] == [] and data["no_match"]["reason"] == FOREIGN_LINE
    # its words are in the index: the lexical mode, which reads words alone, still answers
    lexical = run_cli("search", "--json", "--mode", "lexical", FOREIGN, cwd=indexed_notes)
    assert json.loads(lexical.stdout)["results"]


def test_a_question_near_in_meaning_is_kept(indexed_notes: Path):
    """Few of its words are in the notes (22% of their weight: "yeast", "starters"), but it is
    close in meaning to the bread page: kept."""
    query = "do dietary starters or yeast supplements lower blood pressure"
    data = json.loads(run_cli("search", "--json", query, cwd=indexed_notes).stdout)
    assert "no_match" not in data and data["results"][0]["path"] == "guides/cooking.md"


@pytest.mark.slow
def test_mcp_search_gives_a_question_of_another_subject_no_match(indexed_notes: Path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(indexed_notes)]
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await call_tool(session, "search", {"query": FOREIGN})

    answer = asyncio.run(run()).structured_content
    assert answer["results"] == [] and answer["no_match"]["reason"] == FOREIGN_LINE


SMALL = {
    "tar.md": "# Tar archives\n\nExtract a tar archive with `tar xf file.tar`.\n\n"
    "## Create\n\nCreate one with `tar cf out.tar folder/`.\n",
    "zip.md": "# Zip files\n\nUnpack a zip file with `unzip file.zip`.\n",
    "git.md": "# Undo a commit\n\nUse `git reset HEAD~1` to undo the last commit.\n\n"
    "## Keep the changes\n\n`git reset --soft HEAD~1` keeps them staged.\n",
}


@pytest.mark.parametrize("query", ["qqqzzzxxy", "zzzkkkwwq", "asdfghjkl", "xyzzy plugh"])
def test_nonsense_gets_no_match_in_a_three_page_folder(tmp_path: Path, query: str):
    """A few headings hardly reach farther than random letters: a query with no word in the
    index must be closer than every letter probe (before, "zzzkkkwwq" got the zip page)."""
    for name, text in SMALL.items():
        (tmp_path / name).write_text(text)
    assert run_cli("ingest", cwd=tmp_path).returncode == 0
    data = json.loads(run_cli("search", "--json", query, cwd=tmp_path).stdout)
    assert data["results"] == [] and "no query word is in the index" in data["no_match"]["reason"]
    kept = json.loads(run_cli("search", "--json", "extract a tar archive", cwd=tmp_path).stdout)
    assert kept["results"][0]["path"] == "tar.md"
