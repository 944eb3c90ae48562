"""One project wherever you stand: every command run in a subfolder of an indexed folder
finds its root (the nearest folder upward with `.markdownvdb` or the index itself,
`kernel.dotenv.find_root`), and a path typed there is read from there. The climb never
reaches the user's home from below it. Everything through the real CLI, cwd in a subfolder.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from kernel import dotenv
from tests.conftest import build_index, run_cli
from tests.json_shapes import call_tool

SUB = "05 - Concepts"
ZETTEL = "# Zettelkasten\n\nA slip-box of atomic notes, each linked to the others.\n"


def _vault(root: Path) -> Path:
    (root / SUB).mkdir(parents=True)
    (root / SUB / "Zettelkasten.md").write_text(ZETTEL, encoding="utf-8")
    (root / "inbox.md").write_text("# Inbox\n\nUnsorted thoughts about gardening.\n")
    return root


def test_search_and_get_from_a_subfolder(tmp_path: Path):
    root = build_index(_vault(tmp_path / "vault"))
    sub = root / SUB
    found = run_cli("search", "zettelkasten", "--json", cwd=sub)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == f"{SUB}/Zettelkasten.md"
    here = run_cli("get", "Zettelkasten.md", cwd=sub)  # relative to the subfolder
    assert here.returncode == 0 and "slip-box" in here.stdout, here.stderr
    # A path as search prints it (from the root) is read there too; a name in neither
    # place is an error naming it.
    at_root = run_cli("get", "inbox.md", cwd=sub)
    assert at_root.returncode == 0 and "gardening" in at_root.stdout
    nowhere = run_cli("get", "nowhere.md", cwd=sub)
    assert nowhere.returncode == 1 and "nowhere.md: not in the index" in nowhere.stderr


@pytest.mark.slow
def test_status_grep_and_every_get_form_from_a_subfolder(tmp_path: Path):
    root = build_index(_vault(tmp_path / "vault"))
    sub = root / SUB
    full = run_cli("get", f"{SUB}/Zettelkasten.md", "--json", cwd=sub)
    assert json.loads(full.stdout)["path"] == f"{SUB}/Zettelkasten.md"
    assert json.loads(run_cli("get", "../inbox.md", "--json", cwd=sub).stdout)["path"] == (
        "inbox.md"
    )
    status = run_cli("status", "--json", cwd=sub)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["root"] == str(root) and json.loads(status.stdout)["fresh"]
    assert f"root:       {root}\n" in run_cli("status", cwd=sub).stdout
    assert run_cli("status", "--check", cwd=sub).returncode == 0

    grep = run_cli("grep", "slip-box", "--json", cwd=sub)
    assert grep.returncode == 0, grep.stderr
    assert [json.loads(line)["path"] for line in grep.stdout.splitlines()] == [
        f"{SUB}/Zettelkasten.md"
    ]
    assert not (sub / ".markdownvdb.index").exists()
    assert not (sub / ".markdownvdb.state").exists()


@pytest.mark.slow
def test_ingest_forms_from_a_subfolder_update_the_one_index(tmp_path: Path):
    root = _vault(tmp_path / "vault")
    assert run_cli("ingest", cwd=root).returncode == 0  # writes only the index and its state
    assert not (root / dotenv.CONFIG_FILE).exists()
    sub = root / SUB
    note = sub / "Zettelkasten.md"

    note.write_text(ZETTEL + "\nFolgezettel: a branching numbering.\n", encoding="utf-8")
    plain = run_cli("ingest", cwd=sub)
    assert plain.returncode == 0, plain.stderr
    assert f"project root: {root}\n" in plain.stdout and "1 changed" in plain.stdout

    note.write_text(ZETTEL + "\nLuhmann kept ninety thousand cards.\n", encoding="utf-8")
    hook = run_cli("ingest", "--if-present", "--json", cwd=sub)  # the hook form
    assert hook.returncode == 0, hook.stderr
    report = json.loads(hook.stdout)
    assert (report["root"], report["changed"], report["files"]) == (str(root), 1, 2)

    note.write_text(ZETTEL + "\nCards carry an address.\n", encoding="utf-8")
    named = run_cli("ingest", "Zettelkasten.md", "--json", cwd=sub)  # a path from here
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["changed"] == 1
    assert run_cli("status", "--check", cwd=sub).returncode == 0
    found = run_cli("search", "address cards", "--mode", "lexical", "--json", cwd=sub)
    assert json.loads(found.stdout)["results"][0]["path"] == f"{SUB}/Zettelkasten.md"
    assert sorted(p.name for p in root.rglob(".markdownvdb*")) == [
        ".markdownvdb.index",
        ".markdownvdb.state",
    ]


def test_the_climb_stops_below_home(tmp_path: Path):
    """An index in the user's home (built there once by mistake) is not the project of a
    folder in it: a search there says there is no index instead of searching the home."""
    home = _vault(tmp_path / "home")
    build_index(home)
    notes = home / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nslip-box\n")
    env = {"HOME": str(home)}
    status = run_cli("status", "--json", cwd=notes, env=env)
    assert json.loads(status.stdout)["root"] == str(notes)
    assert json.loads(status.stdout)["exists"] is False
    search = run_cli("search", "zettelkasten", cwd=notes, env=env)
    assert search.returncode == 1
    assert f"no index at {notes / '.markdownvdb.index'}: run `mdvdb ingest`" in search.stderr
    # Home itself is still a project when you stand in it.
    assert json.loads(run_cli("status", "--json", cwd=home, env=env).stdout)["exists"]
    # Without that HOME, the same folder finds the index above it.
    assert dotenv.find_root(str(notes)) == str(home)


def test_the_climb_stops_at_a_file_system_boundary(tmp_path: Path, monkeypatch):
    """A folder on another device than the one you stand on is not climbed into (a disk's
    root indexed once is not the project of a mount below it). The devices are the one
    thing faked here: a test cannot mount a file system."""
    outer = build_index(_vault(tmp_path / "outer"))
    mount = outer / "mnt" / "disk"
    mount.mkdir(parents=True)
    assert dotenv.find_root(str(mount)) == str(outer)
    real = dotenv._device
    monkeypatch.setattr(dotenv, "_device", lambda f: 1 if f.startswith(str(mount)) else real(f) + 2)
    assert dotenv.find_root(str(mount)) == str(mount)


@pytest.mark.slow
def test_serve_and_mcp_started_in_a_subfolder_serve_the_project(tmp_path: Path):
    from tests.test_agents_warm import alive, broken_numpy, pid_in, wait_for

    root = build_index(_vault(tmp_path / "vault"))
    sub = root / SUB
    started = run_cli("serve", "--background", cwd=sub)
    assert started.returncode == 0, started.stderr
    pid = pid_in(started.stdout)
    try:
        assert (root / ".markdownvdb.state" / "serve.sock").exists()
        status = json.loads(run_cli("serve", "--status", "--json", cwd=sub).stdout)
        assert status["running"] and status["root"] == str(root)
        warm = run_cli("get", "Zettelkasten.md", cwd=sub, env=broken_numpy(tmp_path))
        assert warm.returncode == 0 and "slip-box" in warm.stdout, warm.stderr
    finally:
        assert run_cli("serve", "--stop", cwd=sub).returncode == 0
    assert wait_for(lambda: not alive(pid), 10)

    from mcp import ClientSession, StdioServerParameters, stdio_client

    async def ask() -> dict:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mdvdb", "mcp"],  # no --root: the client started it in the subfolder
            env={**os.environ, "MDVDB_WATCH": "false"},
            cwd=str(sub),
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await call_tool(session, "search", {"query": "zettelkasten", "limit": 1})
            return result.structured_content

    answer = asyncio.run(ask())
    assert answer["results"][0]["path"] == f"{SUB}/Zettelkasten.md"
