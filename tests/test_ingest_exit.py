"""What `mdvdb ingest` leaves when it ends, or is killed: the state closed and the index
current. Real `mdvdb` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli


def assert_fresh_and_settled(root: Path) -> None:
    """The next ingest has nothing to do, `status --check` says fresh, and the state's
    database was closed (its last connection folds the WAL back and removes it)."""
    again = run_cli("ingest", "--root", str(root), "--no-wait")
    assert again.returncode == 0, again.stderr
    assert "0 added, 0 changed, 0 removed" in again.stdout, again.stdout
    assert run_cli("status", "--check", "--root", str(root)).returncode == 0


def test_ingest_ends_with_the_state_closed(notes: Path):
    first = run_cli("ingest", "--root", str(notes))
    assert first.returncode == 0, first.stderr
    assert "added" in first.stdout
    state = notes / ".markdownvdb.state"
    assert not (state / "cache.sqlite3-wal").exists()  # closed: the WAL went back in
    assert not (state / "writer.json").exists()
    assert_fresh_and_settled(notes)

    # An edit: the new words are searchable, and the run after it is a no-op again.
    edited = next(notes.rglob("*.md"))
    edited.write_text(edited.read_text() + "\nZanzibarquokka appears here once.\n")
    second = run_cli("ingest", "--root", str(notes), "--json")
    assert second.returncode == 0, second.stderr
    assert '"changed": 1' in second.stdout
    found = run_cli("search", "Zanzibarquokka", "--root", str(notes), "--json")
    assert edited.name in found.stdout
    assert_fresh_and_settled(notes)


def test_an_error_exits_with_its_code(tmp_path: Path):
    missing = run_cli("ingest", "--root", str(tmp_path / "nowhere"))
    assert missing.returncode == 2  # a usage error: --root is not a folder
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr


@pytest.mark.slow  # two more ingests after the kill: ~1.2 CPU-s; the inner loop keeps
# test_ingest_ends_with_the_state_closed and test_killed_holder_blocks_nobody
def test_a_killed_edit_ingest_leaves_a_consistent_state(notes: Path):
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    edited = next(notes.rglob("*.md"))
    edited.write_text(edited.read_text() + "\nKilledmidway words.\n")
    info = notes / ".markdownvdb.state" / "writer.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(notes)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not info.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)  # mid-run, or already done: either way the state must stay sound
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    redo = run_cli("ingest", "--root", str(notes))
    assert redo.returncode == 0, redo.stderr
    assert_fresh_and_settled(notes)
    found = run_cli("search", "Killedmidway", "--root", str(notes), "--json")
    assert edited.name in found.stdout
