"""Scoped and dated search through the real `mdvdb search`: `--path` globs, named sources
with descriptions (`--source`), `--since`/`--before` on the modified time and on a date field,
and the opt-in recency decay (`--decay`, MDVDB_SEARCH_DECAY); the MCP tool over stdio."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import build_index, read_only_folder, run_cli

DAY = 86_400
NOW = time.time()
OLD = NOW - 400 * DAY  # the old note's modified time
RECENT = dt.date.fromtimestamp(NOW - 10 * DAY).isoformat()

# Titles share no word with the query, so no page is lifted by the title tier.
PAGES = {
    # the best match for the query, last modified 400 days ago
    "notes/old.md": (
        "# Alpha\n\nHow I install the widget at home. First I install the widget's base, "
        "then I install the widget itself with its cables, and I check that the widget "
        "starts. To install the widget again later, I keep these notes about the widget.\n"
    ),
    "notes/fresh.md": f"---\nupdated: {RECENT}\n---\n# Beta\n\nI tried to install the widget.\n",
    "notes/bread.md": "# Gamma\n\nKnead the dough and let it rise overnight.\n",
    "docs/setup.md": "---\nupdated: 2020-01-01\n---\n# Delta\n\nTo install the widget run pip.\n",
    "docs/api/calls.md": "# Epsilon\n\nThe widget API: install hooks.\n",
}
CONFIG = (
    "MDVDB_SOURCES=docs:docs:Product documentation\\, kept by the docs team,"
    "notes:notes:My own notes\n"
)
QUERY = "install the widget"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("scope") / "project"
    for rel, text in PAGES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    os.utime(root / "notes/old.md", (OLD, OLD))
    (root / ".markdownvdb").write_text(CONFIG)
    build_index(root)
    with read_only_folder(root):
        yield root


def search(root: Path, *args: str, env: dict | None = None) -> dict:
    done = run_cli("search", *args, "--root", str(root), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def paths(data: dict) -> list[str]:
    return [hit["path"] for hit in data["results"]]


@pytest.mark.slow
def test_path_globs_fill_the_top_n_from_the_scope(project: Path):
    assert paths(search(project, QUERY, "-n", "2")) == ["notes/old.md", "notes/fresh.md"]
    scoped = search(project, QUERY, "-n", "2", "--path", "docs/")  # two docs, not none
    assert sorted(paths(scoped)) == ["docs/api/calls.md", "docs/setup.md"]
    # repeatable (any of them), gitignore syntax: `**` across folders, a name anywhere
    either = paths(search(project, QUERY, "--path", "docs/**/calls.md", "--path", "fresh.md"))
    assert sorted(either) == ["docs/api/calls.md", "notes/fresh.md"]
    # no query: the files in scope are listed
    assert sorted(paths(search(project, "--path", "docs/"))) == [
        "docs/api/calls.md",
        "docs/setup.md",
    ]


@pytest.mark.slow
def test_each_result_carries_its_source_and_the_answer_describes_it(project: Path):
    data = search(project, QUERY)
    by_path = {hit["path"]: hit["source"] for hit in data["results"]}
    assert by_path["docs/setup.md"] == "docs" and by_path["notes/old.md"] == "notes"
    assert data["sources"] == {
        "docs": {"path": "docs", "description": "Product documentation, kept by the docs team"},
        "notes": {"path": "notes", "description": "My own notes"},
    }
    files = search(project, QUERY, "--files")
    assert {hit["path"]: hit["source"] for hit in files["files"]} == by_path
    assert files["sources"] == data["sources"]
    only = search(project, QUERY, "--source", "docs")
    assert {hit["source"] for hit in only["results"]} == {"docs"}
    assert set(only["sources"]) == {"docs"}
    human = run_cli("search", QUERY, "--root", str(project), "--source", "notes")
    assert "[notes]" in human.stdout and "docs/" not in human.stdout


def test_an_empty_scope_says_so(project: Path):
    done = run_cli("search", QUERY, "--root", str(project), "--path", "nothing/", "--since", "1d")
    assert done.returncode == 0
    assert done.stdout.splitlines()[:2] == [
        "No matches.",
        "No file is in --path nothing/ --since 1d.",
    ]


def test_an_unknown_source_is_one_line_and_exit_2(project: Path):
    done = run_cli("search", QUERY, "--root", str(project), "--source", "wiki")
    assert done.returncode == 2
    assert done.stderr.strip() == "mdvdb: --source 'wiki': no such source; sources: docs, notes"


def test_grep_names_the_same_sources(project: Path):
    done = run_cli("grep", "widget", "--root", str(project), "--source", "dir:notes", "--json")
    assert done.returncode == 0, done.stderr
    found = {json.loads(line)["path"] for line in done.stdout.splitlines()}
    assert found and all("notes/" in p for p in found)


@pytest.mark.slow
def test_since_and_before_on_the_modified_time(project: Path):
    assert "notes/old.md" in paths(search(project, QUERY))
    for since in ("30d", dt.date.fromtimestamp(NOW - 100 * DAY).isoformat()):
        recent = paths(search(project, QUERY, "--since", since))
        assert recent and "notes/old.md" not in recent, since
    assert paths(search(project, QUERY, "--before", "30d")) == ["notes/old.md"]
    listed = paths(search(project, "--before", dt.date.fromtimestamp(NOW - 200 * DAY).isoformat()))
    assert listed == ["notes/old.md"]


@pytest.mark.slow
def test_since_on_a_frontmatter_date_field(project: Path):
    since = dt.date.fromtimestamp(NOW - 30 * DAY).isoformat()
    assert paths(search(project, QUERY, "--since", since, "--date-field", "updated")) == [
        "notes/fresh.md"
    ]
    before = paths(search(project, QUERY, "--before", "1y", "--date-field", "updated"))
    assert before == ["docs/setup.md"]


def test_unreadable_dates_are_usage_errors(project: Path):
    for flag, value in (("--since", "last tuesday"), ("--decay", "soon")):
        done = run_cli("search", QUERY, "--root", str(project), flag, value)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert value in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_recency_decay_lowers_old_pages(project: Path):
    plain = search(project, QUERY, "--path", "notes/")
    assert paths(plain)[0] == "notes/old.md"
    decayed = search(project, QUERY, "--path", "notes/", "--decay", "30d", "--explain")
    assert paths(decayed)[0] == "notes/fresh.md"
    old = next(h for h in decayed["results"] if h["path"] == "notes/old.md")
    # 400 days at a 30-day half-life: 2 ** -13.3
    assert old["explain"]["decay_factor"] == pytest.approx(2 ** (-400 / 30), rel=0.01)
    assert old["score"] < 0.001
    by_setting = search(project, QUERY, "--path", "notes/", env={"MDVDB_SEARCH_DECAY": "30d"})
    assert paths(by_setting) == paths(decayed)
    off = search(
        project, QUERY, "--path", "notes/", "--decay", "off", env={"MDVDB_SEARCH_DECAY": "30d"}
    )
    assert paths(off) == paths(plain)


def test_no_source_field_where_sources_are_not_named(indexed_notes: Path):
    data = search(indexed_notes, "archive")
    assert data["results"] and "sources" not in data
    assert all("source" not in hit for hit in data["results"])


@pytest.mark.slow
def test_the_mcp_search_tool_takes_scope_dates_and_decay(project: Path, tmp_path: Path):
    """A real MCP client over stdio: the tool's schema lists the new options and a call
    with them answers as the CLI does."""
    from tests.json_shapes import call_tool
    from tests.test_agents_mcp import session_run

    arguments = {"query": QUERY, "paths": ["notes/"], "sources": ["notes"], "since": "1y"}

    async def steps(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        schema = tools["search"].input_schema["properties"]
        scoped = await call_tool(session, "search", arguments)
        decayed = await call_tool(session, "search", {"query": QUERY, "decay": "30d"})
        capped = await call_tool(session, "search", {"query": QUERY, "paths": ["a/"] * 51})
        bad = await call_tool(session, "search", {"query": QUERY, "since": "soon"})
        return schema, scoped.structured_content, decayed.structured_content, capped, bad

    ran = asyncio.run(session_run(project, steps, tmp_path / "mcp.log"))
    schema, scoped, decayed, capped, bad = ran
    assert capped.is_error and capped.content[0].text.endswith("51 paths; the cap is 50")
    assert bad.is_error and "'soon' is neither a date" in bad.content[0].text
    assert {"paths", "sources", "since", "before", "date_field", "decay"} <= set(schema)
    cli = search(project, QUERY, "--path", "notes/", "--source", "notes", "--since", "1y")
    assert [h["path"] for h in scoped["results"]] == paths(cli) == ["notes/fresh.md"]
    assert scoped["results"][0]["source"] == "notes"
    assert scoped["sources"] == {"notes": {"path": "notes", "description": "My own notes"}}
    assert [h["path"] for h in decayed["results"]][-1] == "notes/old.md"


def test_the_library_takes_the_same_request(project: Path):
    import mdvdb
    from query import SearchRequest, run_request

    index = mdvdb.open_index(project)
    request = SearchRequest(QUERY, paths=["notes/"], since="1y", decay="30d")
    with index.pinned():
        outcome = run_request(index, request)
    hits = [hit for _, hit in outcome.tiers.results]
    cli = search(project, QUERY, "--path", "notes/", "--since", "1y", "--decay", "30d")
    assert [hit.path for hit in hits] == paths(cli) == ["notes/fresh.md"]
    assert hits[0].source == "notes" and outcome.sources_json() == cli["sources"]
    # the ranking function itself takes the decay too (`Index.search`)
    decayed = index.search(QUERY, decay=30 * DAY).results
    assert decayed[-1].path == "notes/old.md"


def test_sources_settings_that_cannot_be_used_are_one_line(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    cases = {
        "MDVDB_SOURCES=docs\n": "MDVDB_SOURCES (from ",
        "MDVDB_SOURCES=docs:docs,Docs:docs\n": "the source name 'Docs' is given twice",
        "MDVDB_SOURCES=docs:docs\nMDVDB_SOURCE_DIRS=docs\n": "are both set",
    }
    for text, said in cases.items():
        (tmp_path / ".markdownvdb").write_text(text)
        done = run_cli("search", "x", "--root", str(tmp_path))
        assert done.returncode == 2, text
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    # the environment's MDVDB_SOURCE_DIRS wins over the file's MDVDB_SOURCES (closer to you)
    (tmp_path / ".markdownvdb").write_text("MDVDB_SOURCES=docs:docs:Docs\n")
    done = run_cli("doctor", "--root", str(tmp_path), env={"MDVDB_SOURCE_DIRS": "."})
    assert "note     config: MDVDB_SOURCES (from " in done.stdout
    assert "is not used: MDVDB_SOURCE_DIRS from the environment wins" in done.stdout


def test_nested_sources_name_the_most_specific_folder(tmp_path: Path):
    """The rule for every file at once (the --source mask) and for one path (a result's
    name) agree: the longest configured folder holding the file."""
    from query import open_index
    from query.scope import file_sources, source_of

    for rel in ("top.md", "docs/guide.md", "docs/api/calls.md", "docsx/other.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n\nText about {rel}.\n")
    (tmp_path / ".markdownvdb").write_text("MDVDB_SOURCES=all:.,docs:docs/,api:./docs/api\n")
    build_index(tmp_path)
    index = open_index(tmp_path)
    table, owners = file_sources(index)
    by_mask = {p: table[o].name for p, o in zip(index.snapshot.paths, owners.tolist(), strict=True)}
    by_path = {p: source_of(table, p).name for p in index.snapshot.paths}
    assert (
        by_mask
        == by_path
        == {
            "top.md": "all",
            "docs/guide.md": "docs",
            "docs/api/calls.md": "api",
            "docsx/other.md": "all",
        }
    )
