"""`mdvdb mcp` spoken to by the official MCP client SDK over stdio, on a real folder."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.conftest import run_cli


async def session_run(root: Path, steps):
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(root)]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await steps(session)


def test_mcp_tools_search_and_get_document(notes: Path):
    assert run_cli("ingest", "--root", str(notes)).returncode == 0

    async def steps(session: ClientSession):
        out = {}
        tools = await session.list_tools()
        out["tools"] = {t.name: t for t in tools.tools}
        found = await session.call_tool("search", {"query": "extract a tar archive", "limit": 3})
        out["search"] = found
        out["files"] = await session.call_tool(
            "search", {"query": "extract a tar archive", "files_only": True}
        )
        top = found.structured_content["results"][0]
        start, end = (int(x) for x in top["lines"].split("-"))
        out["part"] = await session.call_tool(
            "get_document", {"path": top["path"], "start_line": start, "end_line": end}
        )
        out["whole"] = await session.call_tool("get_document", {"path": "tar.md"})
        out["missing"] = await session.call_tool("get_document", {"path": "../etc/passwd"})
        out["status"] = await session.call_tool("status", {})
        # A newer index published while the server runs is picked up by the next call.
        (notes / "rust.md").write_text("# Borrow checker\n\nOwnership and lifetimes in Rust.\n")
        out["ingest"] = await session.call_tool("ingest", {})
        out["after"] = await session.call_tool("search", {"query": "rust ownership lifetimes"})
        return out

    out = asyncio.run(session_run(notes, steps))
    tools = out["tools"]
    assert {"search", "get_document", "status", "ingest", "clusters", "schema"} <= set(tools)
    assert "semantic" in tools["search"].description.lower()
    assert "query" in tools["search"].input_schema["required"]

    results = out["search"].structured_content["results"]
    assert not out["search"].is_error and 1 <= len(results) <= 3
    assert results[0]["path"] == "tar.md" and results[0]["heading"].startswith("tar")
    assert set(results[0]) == {"path", "heading", "lines", "score", "excerpt"}  # compact
    assert json.loads(out["search"].content[0].text) == out["search"].structured_content
    files = out["files"].structured_content["files"]
    assert files[0]["path"] == "tar.md" and len({f["path"] for f in files}) == len(files)

    part = out["part"].structured_content
    whole = out["whole"].structured_content
    assert part["path"] == "tar.md" and "tar xf" in part["content"]
    assert len(part["content"]) < len(whole["content"])
    assert whole["content"] == (notes / "tar.md").read_text()
    assert any(s["heading"].endswith("Extract") for s in whole["sections"])
    assert out["missing"].is_error

    status = out["status"].structured_content
    assert status["exists"] and status["fresh"] and status["files"] == 4
    assert out["ingest"].structured_content["added"] == 1
    assert out["after"].structured_content["results"][0]["path"] == "rust.md"
