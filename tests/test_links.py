"""The link graph, document ids and `get` for agents (issue 35), as a user meets them: the
real CLI on a fixture vault (tests/fixtures/vault: wikilinks of every form, embeds,
relative and root-absolute Markdown links, a broken link, two notes of one name), an edit
that changes the graph, and the MCP tools over stdio.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, build_index, copy_markdown, run_cli
from tests.json_shapes import call_tool

HOME_LINKS = [
    "Home.md:4  [[Reading list]]  -> Reading list.md",  # a frontmatter property
    "Home.md:8  [[Alice]]  -> people/Alice.md",
    "Home.md:8  [[projects/Apollo|the Apollo project]]  -> projects/Apollo.md",
    "Home.md:9  [[Apollo#Goals]]  -> projects/Apollo.md",
    "Home.md:9  ![[Roadmap]]  -> projects/Roadmap.md",
    "Home.md:10  [[2024-05-01]]  -> daily/2024-05-01.md",
    "Home.md:10  ![[diagram.png]]  -> (not indexed)",
    "Home.md:11  [install guide](docs/guide/install.md#requirements)  -> docs/guide/install.md",
    "Home.md:11  [overview](/docs/index.md)  -> docs/index.md",
    "Home.md:12  [[Ghost note]]  -> (broken)",
]  # and nothing from the fenced block (lines 14-16)


def vault_copy(base: Path) -> Path:
    return build_index(copy_markdown(FIXTURES / "vault", base / "vault"))


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The indexed vault, read by the tests that do not edit it."""
    return vault_copy(tmp_path_factory.mktemp("links"))


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    done = run_cli(*args, "--root", str(root))
    return done.returncode, done.stdout, done.stderr


def cli_json(root: Path, *args: str) -> dict:
    code, out, err = cli(root, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def short_id(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()[:8]


# -- links, backlinks, orphans ----------------------------------------------------------------


def test_links_of_every_form_resolve_as_obsidian_does(vault: Path):
    code, out, err = cli(vault, "links", "Home.md")
    assert code == 0, err
    assert out.splitlines() == HOME_LINKS
    # A bare name resolves to the note in the linking file's folder (two Meeting.md), a
    # heading link to its own note, a relative Markdown link against the file's folder.
    assert cli(vault, "links", "projects/Apollo.md")[1].splitlines() == [
        "projects/Apollo.md:5  [the plan](../docs/guide/install.md)  -> docs/guide/install.md",
        "projects/Apollo.md:5  [[#Goals]]  -> projects/Apollo.md",
        "projects/Apollo.md:7  [[Meeting]]  -> projects/Meeting.md",
    ]
    data = cli_json(vault, "links", "daily/2024-05-01.md")  # a path with .md, a URL left out
    assert data["id"] == short_id("daily/2024-05-01.md")
    assert [(x["target"], x["label"], x["resolved"]) for x in data["links"]] == [
        ("people/Alice.md", "Alice", "people/Alice.md")
    ]


def test_backlinks_and_orphans(vault: Path):
    code, out, _ = cli(vault, "backlinks", "Apollo")  # a note name: one file has it
    assert code == 0
    assert out.splitlines() == [
        "Home.md:8  [[projects/Apollo|the Apollo project]]",
        "Home.md:9  [[Apollo#Goals]]",
        "people/Alice.md:3  [[Apollo]]",
    ]  # its own [[#Goals]] is no backlink
    data = cli_json(vault, "backlinks", "docs/guide/install.md")
    assert [(x["source"], x["line"], x["anchor"]) for x in data["backlinks"]] == [
        ("Home.md", 11, "requirements"),
        ("docs/index.md", 3, ""),
        ("projects/Apollo.md", 5, ""),
    ]
    assert cli(vault, "orphans")[1].splitlines() == ["Lonely.md", "people/Meeting.md"]
    assert cli_json(vault, "orphans") == {
        "schema_version": 1,
        "orphans": ["Lonely.md", "people/Meeting.md"],
        "total": 2,
    }
    code, _, err = cli(vault, "backlinks", "Meeting")  # two files have this name
    assert code == 1 and "people/Meeting.md" in err and "projects/Meeting.md" in err
    code, _, err = cli(vault, "links", "nowhere.md")
    assert code == 1 and err == "mdvdb: nowhere.md: not in the index\n"


def test_status_lists_the_broken_links(vault: Path):
    code, out, _ = cli(vault, "status")
    assert code == 0
    assert "links:      2 broken\n  Home.md:12: [[Ghost note]]\n" in out
    assert "  docs/guide/install.md:5: [missing page](../missing.md)\n" in out
    data = cli_json(vault, "status")
    assert data["broken_links_total"] == 2
    assert [(x["source"], x["line"], x["target"]) for x in data["broken_links"]] == [
        ("Home.md", 12, "Ghost note"),
        ("docs/guide/install.md", 5, "../missing.md"),
    ]  # the embedded picture and the URL are not broken


def test_an_edit_updates_links_and_backlinks_incrementally(tmp_path: Path):
    root = vault_copy(tmp_path)
    (root / "Lonely.md").write_text("# Lonely\n\nNow it points [[Home]].\n")
    (root / "Ghost note.md").write_text("# Ghost note\n\nNow it exists.\n")
    (root / "people" / "Alice.md").unlink()
    report = cli_json(root, "ingest")
    assert (report["added"], report["changed"], report["removed"]) == (1, 1, 1)
    assert (report["unchanged"], report["chunks_embedded"]) == (9, 2)  # only the edit
    assert "Lonely.md:3  [[Home]]" in cli(root, "backlinks", "Home.md")[1].splitlines()
    home = cli(root, "links", "Home.md")[1].splitlines()
    assert "Home.md:12  [[Ghost note]]  -> Ghost note.md" in home  # a new file resolves it
    assert "Home.md:8  [[Alice]]  -> (broken)" in home  # a removed file breaks it
    orphans = cli(root, "orphans")[1].splitlines()
    assert "Lonely.md" not in orphans and "people/Meeting.md" in orphans
    broken = cli_json(root, "status")["broken_links"]
    assert {(x["source"], x["target"]) for x in broken} == {
        ("Home.md", "Alice"),
        ("daily/2024-05-01.md", "people/Alice.md"),
        ("docs/guide/install.md", "../missing.md"),
    }


def test_an_edit_that_keeps_every_path_resolves_its_new_links(tmp_path: Path):
    """No file added or removed: the other files' links keep what they resolved to, the
    edited file's are resolved over every path (the nearest Meeting.md by path length)."""
    root = vault_copy(tmp_path)
    (root / "Lonely.md").write_text("# Lonely\n\nSee [[Meeting]] and [[Ghost note]].\n")
    assert cli_json(root, "ingest")["changed"] == 1
    assert cli(root, "links", "Lonely")[1].splitlines() == [
        "Lonely.md:3  [[Meeting]]  -> people/Meeting.md",
        "Lonely.md:3  [[Ghost note]]  -> (broken)",
    ]
    assert cli(root, "links", "Home.md")[1].splitlines() == HOME_LINKS
    assert cli(root, "orphans")[1] == ""
    assert cli_json(root, "status")["broken_links_total"] == 3


def test_links_in_comments_are_not_links_and_shown_text_stays_a_link(tmp_path: Path):
    """The index shows a wikilink as its text (kernel/conventions.py) but the graph reads it
    as written; a link inside a comment (`<!-- -->`, `%% %%`) is not indexed, so no link."""
    root = vault_copy(tmp_path)
    (root / "Lonely.md").write_text(
        "# Lonely\n\nSee [[Meeting|the meeting]]. <!-- [[Ghost note]] -->\n"
        "%% [Hidden](Home.md) and\n[[Another ghost]] %%\nand [Home](Home.md).\n"
    )
    assert cli_json(root, "ingest")["changed"] == 1
    assert cli(root, "links", "Lonely")[1].splitlines() == [
        "Lonely.md:3  [[Meeting|the meeting]]  -> people/Meeting.md",
        "Lonely.md:6  [Home](Home.md)  -> Home.md",
    ]
    found = cli_json(root, "search", "the meeting", "--path", "Lonely.md")["results"]
    assert found and "[[" not in found[0]["excerpt"]


def test_a_sharded_index_refuses_the_link_commands_in_one_line(tmp_path: Path):
    root = copy_markdown(FIXTURES / "vault", tmp_path / "vault")
    env = {"MDVDB_SHARDS": "2"}
    assert run_cli("ingest", "--root", str(root), env=env).returncode == 0
    for argv in (["links", "Home.md"], ["backlinks", "Home.md"], ["orphans"]):
        done = run_cli(*argv, "--root", str(root), env=env)
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert "sharded index" in done.stderr and "MDVDB_SHARDS=1" in done.stderr
    found = run_cli("get", "Home", "--json", "--root", str(root), env=env)
    assert json.loads(found.stdout)["id"] == short_id("Home.md")  # ids and get work


# -- document ids and get ---------------------------------------------------------------------


def test_search_results_carry_the_document_id(vault: Path):
    found = cli_json(vault, "search", "reach the moon", "-n", "1")
    top = found["results"][0]
    assert top["path"] == "projects/Apollo.md" and top["id"] == short_id(top["path"])
    out = cli(vault, "search", "reach the moon", "-n", "1")[1]
    assert f"#{top['id']}" in out
    assert cli_json(vault, "search", "moon", "--files")["files"][0]["id"] == top["id"]


def test_get_by_id_range_glob_several_and_name(vault: Path):
    apollo = short_id("projects/Apollo.md")
    for target in (f"#{apollo}", apollo, "Apollo", "projects/Apollo.md"):
        assert cli_json(vault, "get", target)["path"] == "projects/Apollo.md", target
    ranged = cli_json(vault, "get", "Home.md:8-9")
    assert ranged["content"].splitlines()[0].startswith("Welcome. See [[Alice]]")
    assert (ranged["start_line"], ranged["end_line"], ranged["total_lines"]) == (8, 9, 16)
    assert cli_json(vault, "get", "Home.md:8+2")["content"] == ranged["content"]
    several = cli_json(vault, "get", "projects/*.md", "Lonely", f"#{apollo}")
    assert [d["path"] for d in several["documents"]] == [
        "projects/Apollo.md",
        "projects/Meeting.md",
        "projects/Roadmap.md",
        "Lonely.md",
    ]  # each file once, in the order named
    everything = cli_json(vault, "get", "**/*.md")["documents"]
    assert len(everything) == 11
    code, out, _ = cli(vault, "get", "Home.md:8+2", "Lonely.md")
    assert code == 0 and out.count("# Home.md  (Home)  #") == 1 and "# Lonely.md" in out


def test_an_ambiguous_note_name_lists_the_candidates(vault: Path):
    code, out, err = cli(vault, "get", "Meeting")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "mdvdb: Meeting: 2 files have this name; give one of these paths:",
        "  people/Meeting.md",
        "  projects/Meeting.md",
    ]
    assert cli(vault, "get", "nothing-here")[0] == 1
    code, _, err = cli(vault, "get", "Home.md:9-3")
    assert code == 1 and "START-END" in err


def test_get_pages_a_large_document(vault: Path):
    text = (vault / "Home.md").read_text()
    pages, offset = [], 0
    while True:
        args = ["get", "Home.md", "--max-tokens", "15"] + (
            ["--offset", str(offset)] if offset else []
        )
        page = cli_json(vault, *args)
        pages.append(page["content"])
        assert len(page["content"]) <= 60 or "\n" not in page["content"][:60]
        if page["next_offset"] is None:
            break
        offset = page["next_offset"]
    assert len(pages) > 3 and "".join(pages) == text
    code, out, _ = cli(vault, "get", "Home.md", "--max-tokens", "15")
    assert code == 0 and "next page: mdvdb get Home.md --offset " in out.splitlines()[-1]
    code, _, err = cli(vault, "get", "Home.md", "Lonely.md", "--offset", "5")
    assert code == 2 and "--offset pages one document" in err


def test_get_prints_values_as_yaml_not_python(vault: Path):
    code, out, _ = cli(vault, "get", "Reading list")
    assert code == 0
    head = out.split("\n\n", 1)[0].splitlines()
    assert head[1:] == [
        "publish: true",
        "rating: 4",
        "reviewed: null",
        "aliases: [null]",
        "tags: [books, reading]",
        "created: 2024-05-01",
    ]
    for python in ("True", "None", "['", "datetime"):
        assert python not in out
    schema = cli(vault, "schema", "tags")[1]
    assert "['" not in schema and "books" in schema


# -- the library and MCP ----------------------------------------------------------------------


def test_the_library_offers_the_graph_and_its_async_forms(vault: Path):
    import mdvdb

    index = mdvdb.open_index(vault)
    assert [link.resolved for link in index.links("Alice")] == ["projects/Apollo.md", "Home.md"]
    assert {link.source for link in index.backlinks("Home.md")} == {"people/Alice.md"}
    assert index.orphans() == ["Lonely.md", "people/Meeting.md"]
    doc = index.get_document("Home.md", max_tokens=10)
    assert doc.next_offset is not None and doc.id == short_id("Home.md")
    rest = index.get_document("Home.md", offset=doc.next_offset)
    assert doc.content + rest.content == (vault / "Home.md").read_text()

    async def both():
        return await index.alinks("Home"), await index.aorphans(), await index.abacklinks("Alice")

    links, orphans, back = asyncio.run(both())
    assert len(links) == len(HOME_LINKS) and orphans == index.orphans() and len(back) == 2
    with pytest.raises(mdvdb.QueryError, match="2 files have this name"):
        index.get_document("Meeting")


@pytest.mark.slow
def test_the_mcp_tools_answer_links_backlinks_orphans_and_documents(vault: Path):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    apollo = short_id("projects/Apollo.md")

    async def steps() -> dict:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mdvdb", "mcp", "--root", str(vault)],
            env={**os.environ, "MDVDB_WATCH": "false"},
        )
        out = {}
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            ask = {
                "links": ("links", {"path": "Home.md"}),
                "backlinks": ("backlinks", {"path": f"#{apollo}"}),
                "orphans": ("orphans", {}),
                "by id": ("get_document", {"path": f"#{apollo}", "content_only": True}),
                "glob": ("get_document", {"path": "projects/*.md", "paths": ["Lonely"]}),
                "page": ("get_document", {"path": "Home.md", "max_tokens": 15}),
                "range": ("get_document", {"path": "Home.md:8+2"}),
                "old range": ("get_document", {"path": "Home.md", "start_line": 8, "end_line": 9}),
                "ambiguous": ("get_document", {"path": "Meeting"}),
                "status": ("status", {}),
                "search": ("search", {"query": "reach the moon", "limit": 1}),
            }
            for name, (tool, arguments) in ask.items():
                out[name] = await call_tool(session, tool, arguments)
            page = out["page"].structured_content
            more = {"path": "Home.md", "max_tokens": 15, "offset": page["next_offset"]}
            out["next page"] = await call_tool(session, "get_document", more)
        return out

    out = asyncio.run(steps())
    data = {name: result.structured_content for name, result in out.items()}
    links = data["links"]["links"]
    assert len(links) == len(HOME_LINKS)
    assert links[2] == {
        "source": "Home.md",
        "line": 8,
        "kind": "wikilink",
        "target": "projects/Apollo",
        "label": "the Apollo project",
        "resolved": "projects/Apollo.md",
        "broken": False,
    }
    assert [x["source"] for x in data["backlinks"]["backlinks"]] == [
        "Home.md",
        "Home.md",
        "people/Alice.md",
    ]
    assert data["orphans"]["orphans"] == ["Lonely.md", "people/Meeting.md"]
    assert data["by id"]["path"] == "projects/Apollo.md" and "moon" in data["by id"]["content"]
    assert [d["path"] for d in data["glob"]["documents"]][-1] == "Lonely.md"
    assert data["range"]["content"] == data["old range"]["content"]
    assert data["range"]["start_line"] == 8 and data["range"]["end_line"] == 9
    text = (vault / "Home.md").read_text()
    assert text.startswith(data["page"]["content"] + data["next page"]["content"])
    assert out["ambiguous"].is_error and "projects/Meeting.md" in out["ambiguous"].content[0].text
    assert data["status"]["broken_links_total"] == 2
    assert data["search"]["results"][0]["id"] == apollo


def test_links_in_code_are_not_links():
    """Fenced blocks (backticks or tildes, closed by a run as long; an unclosed one runs to
    the end) and code spans hold no links; a URL is no link to a file."""
    from pipeline.links import extract_links
    from pipeline.parse import parse_document

    text = (
        "# A\n"
        "[[one]] `[[span]]` [web](https://x.org) [mail](mailto:a@b.c)\n"
        "   ```python\n[[fenced]]\n   ```\n"
        "text ``` is no fence [[two]]\n"
        "~~~~\n[[tilde]]\n~~~\nstill [[code]]\n~~~~\n"
        "[def]: <a b.md#x>\n"
        "````\n[[unclosed]]\n"
    )
    found = extract_links(parse_document(text.encode(), "a.md"))
    assert [(line, kind, target, anchor) for line, kind, target, anchor, _ in found] == [
        (2, "wikilink", "one", ""),
        (6, "wikilink", "two", ""),
        (12, "markdown", "a b.md", "x"),
    ]


def test_colliding_ids_are_lengthened_until_they_differ(tmp_path: Path):
    """n50785.md and n132544.md share the first 8 hex digits of their SHA-256 (2b1d75dc):
    both get longer ids, and the short one names neither alone."""
    from kernel.doc_ids import lengthened

    ids = lengthened(["n50785.md", "n132544.md", "other.md"])
    assert set(ids) == {"n50785.md", "n132544.md"}
    assert all(len(i) > 8 and i.startswith("2b1d75dc") for i in ids.values())
    assert ids["n50785.md"] != ids["n132544.md"]
    root = tmp_path / "ids"
    root.mkdir()
    for name in ("n50785.md", "n132544.md", "other.md"):
        (root / name).write_text(f"# {name}\n\nText of {name}.\n")
    build_index(root)
    for name in ("n50785.md", "n132544.md"):
        shown = cli_json(root, "get", f"#{ids[name]}")
        assert (shown["path"], shown["id"]) == (name, ids[name])
    assert cli_json(root, "get", "other.md")["id"] == short_id("other.md")
    code, _, err = cli(root, "get", "#2b1d75dc")
    assert code == 1 and ids["n50785.md"] in err and ids["n132544.md"] in err
