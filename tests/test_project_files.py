"""One set of rules decides what is in a project, and ingest, status, `mdvdb grep` and the MCP
grep tool all see exactly that set (kernel/project_files.py).

The tree has every kind of rule: always-ignored folders, a .gitignore above the project root
(the root is a subfolder of a repository), the root's own and a nested one (with an anchored
pattern, an unanchored one and a re-include), a user pattern, hidden folders, a configured
source folder outside the root and one inside an always-ignored folder.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli
from tests.json_shapes import call_tool

# mcp is imported where used: it costs ~1 CPU-s, and every xdist worker imports every
# test module, inner-loop tests or not.

BODY = "# {name}\n\nThe MARKER line of {name}.\n"

# path under the project root -> indexed?
TREE = {
    "a.md": True,
    "upper.markdown": True,
    "SHOUT.MD": True,  # any case, both
    "notes.txt": False,  # not Markdown
    ".hidden/h.md": True,  # hidden folders are read, as files are
    "sub/b.md": True,
    "drafts/d.md": False,  # `notes/drafts/` in the repository's .gitignore, above the root
    "sub/x.secret.md": False,  # `*.secret.md` above the root, unanchored
    "x.log.md": False,  # the root's .gitignore: `*.log.md`
    "sub/keep.log.md": True,  # ...re-included by sub/.gitignore: deeper wins
    "sub/local.md": False,  # sub/.gitignore: `local.md` (any depth below sub)
    "sub/deeper/local.md": False,
    "sub/gen/g.md": False,  # sub/.gitignore: `/gen/` (anchored to sub)
    "sub/deeper/gen/h.md": True,
    "journal/j.md": False,  # MDVDB_IGNORE_PATTERNS
    "node_modules/pkg/readme.md": False,  # always ignored, at any depth
    "sub/node_modules/x.md": False,
    "build/out.md": False,
    "dist/x.md": False,
    "__pycache__/y.md": False,
    "sub/.git/z.md": False,
}
OUTSIDE_SECRET = "MARKER from outside the project root"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("rules")
    repo = base / "repo"
    root = repo / "notes"
    (repo / ".git").mkdir(parents=True)  # a work tree: its top's .gitignore counts
    (repo / ".gitignore").write_text("notes/drafts/\n*.secret.md\n")
    for rel in TREE:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BODY.format(name=rel))
    (root / ".gitignore").write_text("*.log.md\n")
    (root / "sub" / ".gitignore").write_text("local.md\n/gen/\n!keep.log.md\n")
    (root / ".markdownvdb").write_text("MDVDB_IGNORE_PATTERNS=journal/\n")
    outside = base / "elsewhere"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Secret\n\n{OUTSIDE_SECRET}\n")
    return root


EXPECTED = sorted(rel for rel, taken in TREE.items() if taken)


def indexed_paths(root: Path) -> list[str]:
    from query import open_index

    index = open_index(root)
    return sorted(index.snapshot.table("files").column("path").to_pylist())


def grep_paths(root: Path, *extra: str, env: dict | None = None) -> tuple[list[str], str]:
    done = run_cli("grep", "MARKER", "--json", "-n", "1000", "--root", str(root), *extra, env=env)
    assert done.returncode == 0, done.stderr
    return sorted({json.loads(line)["path"] for line in done.stdout.splitlines()}), done.stderr


def mcp_grep(root: Path, calls: list[dict], env: dict | None = None) -> list:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(root)], env=env
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [await call_tool(session, "grep", arguments) for arguments in calls]

    return asyncio.run(run())


# Not `slow` though it costs ~3.5 CPU-s: it is the one inner-loop check that every reader
# (ingest, grep, MCP, status) sees the same files.
def test_ingest_grep_mcp_and_status_see_the_same_files(tree: Path):
    done = run_cli("ingest", "--root", str(tree))
    assert done.returncode == 0, done.stderr
    assert indexed_paths(tree) == EXPECTED

    found, stderr = grep_paths(tree)
    assert found == EXPECTED, stderr
    assert stderr == ""

    [reply] = mcp_grep(tree, [{"pattern": "MARKER", "limit": 1000}])
    assert not reply.is_error
    assert sorted(f["path"] for f in reply.structured_content["files"]) == EXPECTED
    assert "warnings" not in reply.structured_content

    # status walks by the same rules: a new ignored file is not news (the index is current
    # for `status --check`), a new indexed one is
    (tree / "node_modules" / "new.md").write_text("# New\n")
    (tree / "drafts" / "new.md").write_text("# New\n")
    assert run_cli("status", "--check", "--root", str(tree)).returncode == 0
    (tree / "sub" / "new.md").write_text("# New\n")
    assert run_cli("status", "--check", "--root", str(tree)).returncode == 3
    (tree / "sub" / "new.md").unlink()


def test_ingest_of_named_paths_keeps_the_rules(tree: Path):
    """`mdvdb ingest PATH` (the watcher's way in) takes a path exactly when a walk would."""
    # The walk's index first (a no-op after the test above; this one may run alone or on
    # another xdist worker, with a tree of its own): not the subject, built in the worker.
    build_index(tree)
    done = run_cli(
        "ingest",
        "--root",
        str(tree),
        str(tree / "drafts" / "d.md"),
        str(tree / "sub" / "deeper"),
        str(tree / "sub" / "keep.log.md"),
    )
    assert done.returncode == 0, done.stderr
    assert indexed_paths(tree) == EXPECTED


@pytest.mark.slow
def test_grep_never_reads_a_source_folder_outside_the_root(tree: Path):
    """MDVDB_SOURCE_DIRS=.,/etc must not let grep (CLI or MCP) read /etc: the same rule as
    ingest, with the same one line."""
    outside = tree.parent.parent / "elsewhere"
    env = {"MDVDB_SOURCE_DIRS": f".,{outside},/etc"}
    found, stderr = grep_paths(tree, env=env)
    assert found == EXPECTED
    assert f"{outside}: source folder is outside the project root, skipped" in stderr
    assert "/etc: source folder is outside the project root, skipped" in stderr

    everything = run_cli(
        "grep", "root:x:0:0", "--type", "all", "--json", "--root", str(tree), env=env
    )
    assert everything.returncode == 0 and everything.stdout == ""

    ingest = run_cli("ingest", "--root", str(tree), env=env)
    assert f"{outside}: source folder is outside the project root, skipped" in ingest.stderr

    import os

    replies = mcp_grep(
        tree,
        [
            {"pattern": "MARKER", "limit": 1000},
            {"pattern": "root:x:0:0", "file_type": "all"},
            {"pattern": OUTSIDE_SECRET},
        ],
        env={**os.environ, **env},
    )
    assert [r.is_error for r in replies] == [False, False, False]
    first, etc, secret = (r.structured_content for r in replies)
    assert sorted(f["path"] for f in first["files"]) == EXPECTED
    assert "/etc: source folder is outside the project root, skipped" in first["warnings"]
    assert etc["files"] == [] and secret["files"] == []


@pytest.mark.slow
def test_an_always_ignored_folder_named_as_a_source_is_used_with_a_warning(tree: Path):
    env = {"MDVDB_SOURCE_DIRS": ".,build"}
    warning = "build: source folder is in the always-ignored folder build/"
    assert run_cli("ingest", "--root", str(tree)).returncode == 0
    assert indexed_paths(tree) == EXPECTED
    # a named path (the watcher's way in) is taken by its most specific source folder
    named = run_cli("ingest", "--root", str(tree), str(tree / "build" / "out.md"), env=env)
    assert named.returncode == 0, named.stderr
    assert indexed_paths(tree) == sorted([*EXPECTED, "build/out.md"])
    done = run_cli("ingest", "--root", str(tree), env=env)
    assert done.returncode == 0, done.stderr
    assert warning in done.stderr
    assert indexed_paths(tree) == sorted([*EXPECTED, "build/out.md"])
    found, stderr = grep_paths(tree, env=env)
    assert found == sorted([*EXPECTED, "build/out.md"])
    assert warning in stderr
    # a source folder a .gitignore ignores is skipped, by both
    env = {"MDVDB_SOURCE_DIRS": ".,drafts"}
    done = run_cli("ingest", "--root", str(tree), env=env)
    assert "drafts: source folder is ignored by a .gitignore" in done.stderr
    assert indexed_paths(tree) == EXPECTED
    found, stderr = grep_paths(tree, env=env)
    assert found == EXPECTED and "drafts: source folder is ignored" in stderr


FRONTMATTER_HEAVY = """---
title: Cache notes
tags: [cache, caching]
summary: cache cache
aliases:
  - cache layer
---
# Cache notes

First cache line.

Second cache line.

Third cache line.
"""


@pytest.mark.slow
def test_per_file_limit_counts_body_matches_only(tmp_path: Path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "c.md").write_text(FRONTMATTER_HEAVY)
    done = run_cli("grep", "cache", "--json", "--per-file-limit", "2", "--root", str(root))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x)["line"] for x in done.stdout.splitlines()]
    assert lines == [8, 10]  # the heading and the first body line, not frontmatter lines
    done = run_cli("grep", "cache", "--json", "--per-file-limit", "3", "--root", str(root))
    assert [json.loads(x)["line"] for x in done.stdout.splitlines()] == [8, 10, 12]

    [reply] = mcp_grep(root, [{"pattern": "cache", "per_file_limit": 2}])
    [entry] = reply.structured_content["files"]
    assert [hit["line"] for hit in entry["hits"]] == [8, 10] and entry["more"] is True


@pytest.mark.slow
def test_watch_applies_the_same_rules(tmp_path: Path):
    """`mdvdb watch`: a new file is indexed exactly when a walk would take it (above-root
    .gitignore, always-ignored folders, a named always-ignored source folder)."""
    import subprocess
    import time

    from tests.conftest import REPO

    repo = tmp_path / "repo"
    root = repo / "notes"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("notes/drafts/\n")
    for rel in ("a.md", "drafts/old.md", "build/b.md", "node_modules/n.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(BODY.format(name=rel))
    (root / ".markdownvdb").write_text("MDVDB_SOURCE_DIRS=.,build\nMDVDB_WATCH_DEBOUNCE_MS=200\n")
    log = open(tmp_path / "watch.log", "w")  # noqa: SIM115 - a file, not a pipe nobody drains
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "watch", "--root", str(root)], cwd=REPO, stderr=log
    )

    def wait_for(expected: list[str]) -> None:
        started = time.monotonic()
        while time.monotonic() - started < 60:
            try:
                if indexed_paths(root) == expected:
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{indexed_paths(root)} != {expected}")

    try:
        wait_for(["a.md", "build/b.md"])
        time.sleep(1.0)  # the watch is live once its first walk has run
        for rel in ("drafts/new.md", "node_modules/new.md", "build/node_modules/x.md"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(BODY.format(name=rel))
        (root / "build" / "new.md").write_text(BODY.format(name="build/new.md"))
        (root / "c.md").write_text(BODY.format(name="c.md"))
        wait_for(["a.md", "build/b.md", "build/new.md", "c.md"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_gitignore_lines_translate_to_the_root():
    """The rg form of .gitignore files above a folder: lines relative to the project root."""
    from kernel.project_files import translate_above, translate_inside

    above = ["# comment", "", "*.tmp", "/notes/drafts/", "notes/a/b.md", "**/cache/", "*/x.md"]
    above += ["!notes/keep.md", "other/y.md", "/notes/", "notes"]
    assert translate_above(above, "notes") == [
        "*.tmp",  # unanchored: anywhere below
        "/drafts/",
        "/a/b.md",
        "/**/cache/",  # `**` may have matched `notes` and more
        "/x.md",  # `*` matched `notes`
        "!/keep.md",
        # other/y.md: another folder; /notes/: the root itself, never hidden
        "notes",  # unanchored: folders named notes below the root (not the root itself)
    ]
    assert translate_above(["**/notes/drafts"], "repo/notes") == [
        "/**/notes/drafts",
        "/drafts",
    ]
    assert translate_inside(["local.md", "/gen/", "!keep.md"], "sub/a[1]") == [
        "/sub/a\\[1\\]/**/local.md",
        "/sub/a\\[1\\]/gen/",
        "!/sub/a\\[1\\]/**/keep.md",
    ]
