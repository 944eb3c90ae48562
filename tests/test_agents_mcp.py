"""`mdvdb mcp` spoken to by the official MCP client SDK over stdio, on a real folder.

One server session answers every call (spawning it and loading the model is most of the cost);
the tests below assert on its recorded answers. The CLI answers the parity tests compare with
are taken before the session, whose last steps edit the folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kernel.config import OFF_FILE, load_config
from tests.conftest import FIXTURES, build_index, copy_markdown, run_cli
from tests.json_shapes import call_tool

if TYPE_CHECKING:  # imported where used: mcp costs ~1 CPU-s to import, and every xdist
    # worker imports every test module, inner-loop tests or not
    from mcp import ClientSession

CACHE_MD = """---
title: Cache layer
status: draft
rating: 4
tags: [python, performance]
---
# Cache layer

Keeps hot rows in memory so repeated reads skip the database.

## Errors

Under load the client logs `ConnectionResetError: [Errno 104]` and retries.

## API

```python
def lru_cache_get(key):
    return CACHE[key]
```
"""

QUEUE_MD = """---
title: Job queue
status: done
rating: 2
tags: [python]
---
# Job queue

Workers take jobs from a queue in the database and retry failed ones with backoff.
"""

TOOLS = {
    "search",
    "grep",
    "get_document",
    "links",
    "backlinks",
    "orphans",
    "schema",
    "clusters",
    "status",
    "ingest",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp") / "notes"
    copy_markdown(FIXTURES / "notes", root)
    (root / "projects").mkdir()
    (root / "projects" / "cache.md").write_text(CACHE_MD)
    (root / "projects" / "queue.md").write_text(QUEUE_MD)
    return build_index(root)


def cli_json(root: Path, *args: str) -> dict:
    done = run_cli(*args, "--json", "--root", str(root))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def session_run(root: Path, steps, log: Path):
    """Run `steps` in one session of `mdvdb mcp --root root` started as clients start it; the
    server's stderr, with the log of what it imported, goes to `log`."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    # No watcher: these steps call ingest themselves and assert what it reports
    # (tests/test_agents_live.py covers the watching server).
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mdvdb", "mcp", "--root", str(root)],
        env={**os.environ, "MDVDB_WATCH": "false", "PYTHONPROFILEIMPORTTIME": "1"},
    )
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await steps(session)


PARITY = {  # name: (MCP search arguments, the same search on the command line)
    "filter": (
        {"query": "retry database", "filters": ["status=draft,done"], "limit": 5},
        ["search", "retry database", "--filter", "status=draft,done", "-n", "5"],
    ),
    "facet": (
        {"query": "archive", "tag": "CLI", "limit": 5},
        ["search", "archive", "--tag", "CLI", "-n", "5"],
    ),
    "title tier": (
        {"query": "tar", "limit": 4},
        ["search", "tar", "-n", "4"],
    ),
    "every copy": (
        {"query": "retry", "collapse": False, "per_file": 0, "mode": "lexical"},
        ["search", "retry", "--no-collapse", "--per-file", "0", "--mode", "lexical"],
    ),
}


@pytest.fixture(scope="module")
def answers(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    cli = {name: cli_json(folder, *argv) for name, (_, argv) in PARITY.items()}
    cli["clusters"] = cli_json(folder, "clusters")
    cli["schema"] = cli_json(folder, "schema")

    async def steps(session: ClientSession):
        out = {"cli": cli}

        async def call(name: str, tool: str, arguments: dict) -> None:
            out[name] = await call_tool(session, tool, arguments)

        out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        for name, (arguments, _) in PARITY.items():
            await call(f"parity {name}", "search", arguments)
        await call("search", "search", {"query": "extract a tar archive", "limit": 3})
        await call("files", "search", {"query": "extract a tar archive", "files_only": True})
        await call("range", "search", {"query": "retry", "filters": ["rating>=3"]})
        await call("listing", "search", {"filters": ["tags=python", "!category"]})
        await call("no value", "search", {"query": "retry", "tag": "golang"})
        await call("bad filter", "search", {"query": "retry", "filters": ["rating>=high"]})
        await call("unknown field", "search", {"query": "retry", "filters": ["colour=red"]})
        await call("grep", "grep", {"pattern": "ConnectionResetError: [Errno 104]"})
        await call("grep regex", "grep", {"pattern": r"def \w+_cache_get\(", "regex": True})
        await call("grep context", "grep", {"pattern": "lru_cache_get", "context": 1})
        await call("grep limit", "grep", {"pattern": "e", "limit": 3, "per_file_limit": 2})
        await call("grep per file", "grep", {"pattern": "cache", "per_file_limit": 1})
        await call("grep bad regex", "grep", {"pattern": "retry(", "regex": True})
        await call("grep literal", "grep", {"pattern": "retry("})
        await call("schema", "schema", {})
        await call("schema field", "schema", {"field": "tags"})
        await call("schema unknown", "schema", {"field": "colour"})
        await call("clusters", "clusters", {})
        await call("cluster 0", "clusters", {"cluster_id": 0})
        await call("cluster missing", "clusters", {"cluster_id": 99})
        top = out["search"].structured_content["results"][0]
        part = {k: top[k] for k in ("path", "start_line", "end_line")}
        await call("part", "get_document", part)
        await call("whole", "get_document", {"path": "tar.md"})
        await call("missing", "get_document", {"path": "../etc/passwd"})
        await call("status", "status", {})
        # A newer index published while the server runs is picked up by the next call.
        (folder / "rust.md").write_text("# Borrow checker\n\nOwnership and lifetimes in Rust.\n")
        await call("ingest", "ingest", {})
        await call("after", "search", {"query": "rust ownership lifetimes"})
        (folder / OFF_FILE).touch()
        await call("off", "search", {"query": "rust"})
        (folder / OFF_FILE).unlink()
        return out

    log = tmp_path_factory.mktemp("mcp-log") / "stderr.txt"
    out = asyncio.run(session_run(folder, steps, log))
    out["loaded"] = {line.rsplit("|", 1)[-1].strip() for line in log.read_text().splitlines()}
    return out


def test_the_stdio_server_starts_without_typer(answers: dict):
    """`mdvdb mcp --root DIR` (how clients start it) serves stdio without importing typer."""
    assert "mdvdb.mcp_server" in answers["loaded"]
    assert not {m for m in answers["loaded"] if m.split(".")[0] == "typer"}  # the SDK: click


@pytest.mark.slow
def test_lists_the_ten_tools_described_for_a_model(answers: dict):
    tools = answers["tools"]
    assert set(tools) == TOOLS
    search, grep = tools["search"].description, tools["grep"].description
    assert "meaning" in search and "grep" in search  # says when to use the other one
    assert "exact" in grep.lower() and "regex" in grep and "search" in grep
    assert "query" not in tools["search"].input_schema.get("required", [])  # filters alone do
    assert tools["grep"].input_schema["required"] == ["pattern"]
    assert set(tools["search"].input_schema["properties"]["mode"]["anyOf"][0]["enum"]) == {
        "hybrid",
        "semantic",
        "lexical",
    }


def test_search_tool_and_cli_take_the_same_options_with_the_same_defaults(answers: dict):
    """Both are built from one declaration (query.search_options): the tool's input schema,
    as a real client lists it, and the parser of `mdvdb search` name every option, and an
    option left out means the same request on both."""
    import dataclasses

    from mdvdb.cli import command
    from mdvdb.cli.parser import parse
    from mdvdb.mcp_server import request_fields
    from query.search_options import MODES, OPTIONS, SearchRequest

    schema = answers["tools"]["search"].input_schema["properties"]
    assert set(schema) == {option.mcp_name for option in OPTIONS} | {"full_text"}
    search = command("search")
    assert tuple(search.options) == OPTIONS
    json_type = {str: "string", int: "integer", float: "number", bool: "boolean"}
    for option in OPTIONS:
        entry = schema[option.mcp_name]
        default = option.default
        assert entry["default"] == (list(default) if isinstance(default, tuple) else default)
        kinds = {k.get("type") for k in entry.get("anyOf", [entry])} - {"null"}
        if option.spec.repeat == "many":
            assert kinds == {"array"} and entry["anyOf"][0]["items"]["type"] == "string"
        elif option.spec.choices:
            assert entry["anyOf"][0]["enum"] == list(MODES) == list(option.spec.choices)
        else:
            assert kinds == {json_type[option.spec.value]}, option.name
        if option.spec.minimum is not None:
            assert f"{option.name} must be" in option.bound_problem(option.spec.minimum - 1)

    # Nothing but a query: the same request from the CLI's parser and the tool.
    def request(fields: dict) -> dict:
        made = dataclasses.asdict(SearchRequest(**fields))
        many = [option.name for option in OPTIONS if option.spec.repeat == "many"]
        return {**made, **{name: list(made[name]) for name in many}}

    by_cli = parse(search, ["q"])
    by_cli.pop("root"), by_cli.pop("as_json")
    by_tool = request_fields({"query": "q"})
    assert request(by_cli) == request(by_tool) == request({"query": "q"})
    assert set(by_cli) == set(by_tool) == {option.name for option in OPTIONS}


def test_search_is_compact_and_says_its_tier(answers: dict):
    found = answers["search"]
    results = found.structured_content["results"]
    assert not found.is_error and 1 <= len(results) <= 3
    assert results[0]["path"] == "tar.md" and results[0]["heading_path"][0] == "tar"
    shape = {"path", "id", "heading_path", "start_line", "end_line", "score", "confidence"}
    shape |= {"excerpt", "tier"}
    assert set(results[0]) == shape  # the CLI's names, fewer of them
    assert {r["tier"] for r in results} == {"content"}  # no title holds all three words
    titled = answers["parity title tier"].structured_content["results"]
    assert titled[0]["path"] == "tar.md" and titled[0]["tier"] == "title"
    assert json.loads(found.content[0].text) == found.structured_content
    files = answers["files"].structured_content["files"]
    assert files[0]["path"] == "tar.md" and len({f["path"] for f in files}) == len(files)
    assert set(files[0]) == {"path", "id", "score", "confidence"}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_search_matches_the_cli(answers: dict, name: str):
    """Same paths, sections and tiers in the same order as `mdvdb search --json`."""
    mcp = answers[f"parity {name}"]
    assert not mcp.is_error, mcp.content
    same = ("path", "heading_path", "start_line", "end_line", "tier")
    ours = [tuple(r[k] for k in same) for r in mcp.structured_content["results"]]
    theirs = [tuple(r[k] for k in same) for r in answers["cli"][name]["results"]]
    assert ours == theirs and ours
    assert mcp.structured_content["total"] == answers["cli"][name]["total"]


def test_search_filters_and_facets(answers: dict):
    ranged = answers["range"].structured_content["results"]
    assert ranged and {r["path"] for r in ranged} == {"projects/cache.md"}
    listing = answers["listing"].structured_content
    assert listing["query"] is None and listing["total"] == 2
    assert [r["path"] for r in listing["results"]] == ["projects/cache.md", "projects/queue.md"]
    no_value = answers["no value"]
    assert not no_value.is_error
    assert no_value.structured_content["results"] == []
    assert no_value.structured_content["message"] == (
        "No matches. Valid values: archive, cli, git, performance, python, vcs"
    )
    assert answers["parity facet"].structured_content["results"][0]["path"] == "tar.md"


def test_bad_filters_are_tool_errors_with_one_line(answers: dict):
    for name, words in (("bad filter", "is a number field"), ("unknown field", "known: ")):
        result = answers[name]
        assert result.is_error
        text = result.content[0].text
        assert words in text and "\n" not in text, text
    known = answers["unknown field"].content[0].text.split("known: ")[1]
    assert sorted(known.split(", ")) == ["category", "rating", "status", "tags", "title"]


def line_of(text: str, needle: str) -> int:
    """The 1-based number of the one line holding `needle`."""
    [number] = [i for i, line in enumerate(text.split("\n"), 1) if needle in line]
    return number


def test_grep_finds_exact_text_with_line_numbers(answers: dict):
    lines = CACHE_MD.split("\n")
    error_line = line_of(CACHE_MD, "ConnectionResetError")
    literal = answers["grep"].structured_content
    assert literal["matches"] == 1 and literal["more"] is False
    [hit_file] = literal["files"]
    assert hit_file["path"] == "projects/cache.md" and hit_file["title"] == "Cache layer"
    [hit] = hit_file["hits"]
    assert hit == {"line": error_line, "snippet": lines[error_line - 1]}
    regex = answers["grep regex"].structured_content["files"][0]["hits"]
    assert regex == [{"line": line_of(CACHE_MD, "def "), "snippet": "def lru_cache_get(key):"}]
    context = answers["grep context"].structured_content["files"][0]["hits"][0]
    assert context["before"] == ["```python"] and context["after"] == ["    return CACHE[key]"]
    limited = answers["grep limit"].structured_content
    assert limited["matches"] == 3 and limited["more"] is True
    assert all(len(f["hits"]) <= 2 for f in limited["files"])
    assert answers["grep literal"].structured_content["matches"] == 0  # `(` is just text
    per_file = answers["grep per file"].structured_content
    assert per_file["matches"] == 1 and per_file["more"] is True
    assert per_file["files"] == [
        {
            "path": "projects/cache.md",
            "title": "Cache layer",
            "hits": [{"line": line_of(CACHE_MD, "# Cache layer"), "snippet": "# Cache layer"}],
            "more": True,
        }
    ]


def test_grep_bad_regex_is_a_tool_error(answers: dict):
    bad = answers["grep bad regex"]
    assert bad.is_error
    assert "bad regex 'retry(': unclosed group" in bad.content[0].text


def test_grep_without_ripgrep_says_how_to_install(folder: Path, monkeypatch):
    from mdvdb import mcp_tools
    from query.grep.ripgrep import GrepError

    monkeypatch.setattr(sys, "executable", str(folder / "no-python-here"))
    monkeypatch.setenv("PATH", str(folder))
    with pytest.raises(GrepError, match=r"ripgrep \(rg\) not found: install it"):
        mcp_tools.grep(load_config(folder), "cache")


def test_schema_merged_and_one_field(answers: dict):
    schema = answers["schema"].structured_content
    cli = answers["cli"]["schema"]
    assert [f["name"] for f in schema["fields"]] == [f["name"] for f in cli["fields"]]
    by_name = {f["name"]: f for f in schema["fields"]}
    assert by_name["rating"]["type"] == "number" and by_name["status"]["files"] == 2
    assert "column" not in by_name["rating"]  # internal detail left out
    one = answers["schema field"].structured_content
    assert one["name"] == "tags" and one["type"] == "list"
    assert one["values"][0] == ["python", 2] and ["vcs", 1] in one["values"]
    unknown = answers["schema unknown"]
    assert unknown.is_error and "unknown field 'colour'; known: " in unknown.content[0].text


def test_clusters_as_the_cli_and_one_cluster(answers: dict):
    listing = answers["clusters"].structured_content
    assert listing["clusters"] == answers["cli"]["clusters"]["clusters"]
    first = listing["clusters"][0]
    members = answers["cluster 0"].structured_content
    assert members["cluster_id"] == 0 and members["label"] == first["label"]
    assert members["size"] == first["size"] == len(members["files"])
    paths = [f["path"] for f in members["files"]]
    assert {r["path"] for r in first["representatives"]} <= set(paths)
    assert paths == sorted(paths)
    assert answers["cluster missing"].is_error
    assert "no cluster 99" in answers["cluster missing"].content[0].text


def test_get_document_status_and_a_newer_index(answers: dict, folder: Path):
    part = answers["part"].structured_content
    whole = answers["whole"].structured_content
    assert part["path"] == "tar.md" and "tar xf" in part["content"]
    assert len(part["content"]) < len(whole["content"])
    assert whole["content"] == (folder / "tar.md").read_text()
    assert any(s["heading_path"][-1] == "Extract" for s in whole["sections"])
    assert answers["missing"].is_error and "outside the project root" in (
        answers["missing"].content[0].text
    )
    status = answers["status"].structured_content
    assert status["exists"] and status["fresh"] and status["files"] == 6
    assert status["root"] == str(folder) and status["errors"] == [] and status["stale_total"] == 0
    assert answers["ingest"].structured_content["added"] == 1
    assert answers["after"].structured_content["results"][0]["path"] == "rust.md"
    off = answers["off"]
    assert off.is_error and "switched off" in off.content[0].text


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_http_transport_on_loopback_only(tmp_path: Path):
    """`mdvdb mcp --http PORT`: the same tools over streamable HTTP, bound to 127.0.0.1."""
    import socket
    import subprocess
    import time

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    root = tmp_path / "notes"
    copy_markdown(FIXTURES / "notes", root)
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "mcp", "--http", str(port), "--root", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "mdvdb mcp --http never listened"
                time.sleep(0.2)
        with open("/proc/net/tcp") as table:  # the listening socket's local address
            listening = [
                line.split()[1] for line in table.read().splitlines()[1:] if line.split()[3] == "0A"
            ]
        assert f"0100007F:{port:04X}" in listening  # 127.0.0.1, not 0.0.0.0
        assert f"00000000:{port:04X}" not in listening

        token = (root / ".markdownvdb.state" / "mcp-http.token").read_text().strip()

        async def call():
            import httpx2

            url = f"http://127.0.0.1:{port}/mcp"
            auth = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with (
                auth,
                streamable_http_client(url, http_client=auth) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                found = await call_tool(session, "search", {"query": "extract a tar archive"})
                return tools, found

        tools, found = asyncio.run(call())
        assert tools == TOOLS
        assert not found.is_error
        assert found.structured_content["results"][0]["path"] == "tar.md"
    finally:
        server.terminate()
        server.wait(timeout=30)
