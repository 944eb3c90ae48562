"""Long-lived answers follow the files: `mdvdb mcp` and `mdvdb serve` watch the source folders
by default (MDVDB_WATCH), so a new file is found without anyone calling ingest."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import run_cli
from tests.json_shapes import call_tool

if TYPE_CHECKING:  # imported where used: mcp costs ~1 CPU-s to import, and every xdist
    # worker imports every test module, inner-loop tests or not
    from mcp import ClientSession

NEW_NOTE = "# Zebracorn husbandry\n\nFeeding the zebracorn at dawn keeps its stripes bright.\n"
# A new file must be found within this long once the watch is live (the promise).
LIVE_SECONDS = 5.0
START_SECONDS = 120.0  # loading the model and the first walk, on a loaded 2-core machine


def wait_for_line(path: Path, needle: str, seconds: float = START_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    raise AssertionError(f"{needle!r} never appeared in {path}:\n{text}")


async def mcp_session(root: Path, log: Path, env: dict[str, str], steps):
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mdvdb", "mcp", "--root", str(root)],
        env={**os.environ, **env},
    )
    with open(log, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await steps(session)


def found_paths(result) -> list[str]:
    assert not result.is_error, result.content
    return [r["path"] for r in result.structured_content["results"]]


@pytest.mark.slow
def test_mcp_search_finds_a_new_file_without_ingest(indexed_notes: Path, tmp_path: Path):
    log = tmp_path / "mcp.log"

    async def steps(session: ClientSession):
        # The watch is live once its first walk (catching up with the folder) has run.
        await asyncio.to_thread(wait_for_line, log, "watch: full walk")
        before = await call_tool(session, "search", {"query": "zebracorn", "mode": "lexical"})
        assert "zebracorn.md" not in found_paths(before)
        (indexed_notes / "zebracorn.md").write_text(NEW_NOTE)
        written = time.monotonic()
        while True:
            result = await call_tool(session, "search", {"query": "zebracorn stripes"})
            elapsed = time.monotonic() - written
            if "zebracorn.md" in found_paths(result) or elapsed > LIVE_SECONDS:
                return found_paths(result), elapsed
            await asyncio.sleep(0.1)

    paths, elapsed = asyncio.run(mcp_session(indexed_notes, log, {}, steps))
    print(f"\nMCP: a new file found {elapsed:.2f} s after it was written")
    assert paths and paths[0] == "zebracorn.md", (paths, log.read_text())
    assert elapsed <= LIVE_SECONDS


@pytest.mark.slow
def test_mcp_watch_false_leaves_the_index_alone(indexed_notes: Path, tmp_path: Path):
    log = tmp_path / "mcp.log"
    env = {"MDVDB_WATCH": "false", "MDVDB_WATCH_DEBOUNCE_MS": "50"}

    async def steps(session: ClientSession):
        (indexed_notes / "zebracorn.md").write_text(NEW_NOTE)
        await asyncio.sleep(2.0)  # ten times what a watched folder needs here
        unseen = await call_tool(session, "search", {"query": "zebracorn", "mode": "lexical"})
        await call_tool(session, "ingest", {})
        seen = await call_tool(session, "search", {"query": "zebracorn", "mode": "lexical"})
        return found_paths(unseen), found_paths(seen)

    unseen, seen = asyncio.run(mcp_session(indexed_notes, log, env, steps))
    assert "zebracorn.md" not in unseen
    assert seen[0] == "zebracorn.md"
    assert "watch:" not in log.read_text()


@pytest.mark.slow
def test_serve_answers_a_new_file_without_ingest(indexed_notes: Path):
    started = run_cli("serve", "--background", "--root", str(indexed_notes))
    assert started.returncode == 0, started.stderr
    try:
        wait_for_line(indexed_notes / ".markdownvdb.state" / "serve.log", "watch: full walk")
        (indexed_notes / "zebracorn.md").write_text(NEW_NOTE)
        written = time.monotonic()
        while True:
            done = run_cli("search", "zebracorn stripes", "--files", "--root", str(indexed_notes))
            elapsed = time.monotonic() - written
            assert done.returncode == 0, done.stderr
            if "zebracorn.md" in done.stdout or elapsed > LIVE_SECONDS:
                break
            time.sleep(0.1)
        print(f"\nserve: a new file found {elapsed:.2f} s after it was written")
        assert done.stdout.splitlines()[0].endswith("zebracorn.md"), done.stdout
        assert elapsed <= LIVE_SECONDS
        status = run_cli("serve", "--status", "--root", str(indexed_notes))
        assert status.returncode == 0 and "watching on" in status.stdout
        assert "calls" in status.stdout
    finally:
        assert run_cli("serve", "--stop", "--root", str(indexed_notes)).returncode == 0


@pytest.mark.slow
def test_mcp_watch_pauses_while_switched_off(notes: Path, tmp_path: Path):
    """A watching MCP server indexes nothing while `.mdvdb-off` is there (its log says so
    once) and picks up what changed meanwhile once it is removed."""
    from query import open_index

    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    log = tmp_path / "mcp.log"
    off = notes / ".mdvdb-off"

    async def steps(session: ClientSession):
        await asyncio.to_thread(wait_for_line, log, "watch: full walk")
        off.write_text("")
        await asyncio.to_thread(wait_for_line, log, "watch: paused:", LIVE_SECONDS)
        (notes / "zebracorn.md").write_text(NEW_NOTE)
        await asyncio.sleep(2.0)
        switched = await call_tool(session, "search", {"query": "zebracorn", "mode": "lexical"})
        indexed_while_off = "zebracorn.md" in open_index(notes).snapshot.paths
        off.unlink()
        removed = time.monotonic()
        while True:
            result = await call_tool(session, "search", {"query": "zebracorn stripes"})
            elapsed = time.monotonic() - removed
            if "zebracorn.md" in found_paths(result) or elapsed > LIVE_SECONDS:
                return switched, indexed_while_off, found_paths(result), elapsed

    switched, indexed_while_off, paths, elapsed = asyncio.run(mcp_session(notes, log, {}, steps))
    text = log.read_text()
    assert switched.is_error and ".mdvdb-off" in str(switched.content)
    assert not indexed_while_off, text
    assert paths and paths[0] == "zebracorn.md" and elapsed <= LIVE_SECONDS, (paths, text)
    assert text.count("watch: paused:") == 1 and "watch: resumed:" in text, text
