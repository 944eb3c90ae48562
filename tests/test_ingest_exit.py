"""`mdvdb ingest` ends with `os._exit` once the state and the index are closed and durable:
what it leaves must be exactly what an ordinary exit leaves. Real `mdvdb` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

# `mdvdb` as `python -m mdvdb` runs it, with an exit handler that writes a file: an ordinary
# exit runs it, `os._exit` does not.
PROBED = """
import atexit, sys
probe = sys.argv.pop(1)
atexit.register(lambda: open(probe, "w").close())
sys.argv[0] = "mdvdb"
from mdvdb.cli import main
main()
"""


def probed_ingest(root: Path, probe: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBED, str(probe), "ingest", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_fresh_and_settled(root: Path) -> None:
    """The next ingest has nothing to do, `status --check` says fresh, and the state's
    database was closed (its last connection folds the WAL back and removes it)."""
    again = run_cli("ingest", "--root", str(root), "--no-wait")
    assert again.returncode == 0, again.stderr
    assert "0 added, 0 changed, 0 removed" in again.stdout, again.stdout
    assert run_cli("status", "--check", "--root", str(root)).returncode == 0


def test_ingest_ends_without_teardown_and_leaves_the_state_closed(notes: Path, tmp_path: Path):
    probe = tmp_path / "ordinary-exit"
    first = probed_ingest(notes, probe)
    assert first.returncode == 0, first.stderr
    assert "added" in first.stdout  # the report was flushed before the process ended
    assert not probe.exists()  # it ended by `os._exit`: no interpreter teardown
    state = notes / ".markdownvdb.state"
    assert not (state / "cache.sqlite3-wal").exists()  # closed: the WAL went back in
    assert not (state / "writer.json").exists()
    assert_fresh_and_settled(notes)

    # An edit: the new words are searchable, and the run after it is a no-op again.
    edited = next(notes.rglob("*.md"))
    edited.write_text(edited.read_text() + "\nZanzibarquokka appears here once.\n")
    second = probed_ingest(notes, probe, "--json")
    assert second.returncode == 0, second.stderr
    assert '"changed": 1' in second.stdout
    assert not probe.exists()
    found = run_cli("search", "Zanzibarquokka", "--root", str(notes), "--json")
    assert edited.name in found.stdout
    assert_fresh_and_settled(notes)


def test_an_error_still_exits_with_its_code(tmp_path: Path):
    probe = tmp_path / "ordinary-exit"
    missing = probed_ingest(tmp_path / "nowhere", probe)
    assert missing.returncode == 2  # a usage error: --root is not a folder
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr


@pytest.mark.slow  # two more ingests after the kill: ~1.2 CPU-s; the inner loop keeps
# test_ingest_ends_without_teardown_and_leaves_the_state_closed and test_killed_holder_blocks_nobody
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


# A process that replaces a file it holds open, as an ingest replaces the index it maps.
REPLACER = """
import os, sys
from mdvdb.cli.ingest import release_elsewhere
path = sys.argv[1]
with open(path, "wb") as fh:
    fh.write(b"x" * 1_000_000)
fd = os.open(path, os.O_RDONLY)
os.replace(path + ".new", path)  # the publish: the old file is unlinked, still open here
print(release_elsewhere(fd), flush=True)
linked = os.open(path, os.O_RDONLY)
print(release_elsewhere(linked), flush=True)
sys.stdin.readline()
"""


def test_the_replaced_index_is_released_by_a_helper_that_ends_with_the_ingest(tmp_path: Path):
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc")
    path = tmp_path / "index"
    (tmp_path / "index.new").write_bytes(b"new")
    proc = subprocess.Popen(
        [sys.executable, "-c", REPLACER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    helper = int(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "None"  # a linked file: no helper
    held = {int(fd.name): os.readlink(fd) for fd in Path(f"/proc/{helper}/fd").iterdir()}
    # It holds the replaced file and nothing a hook waits on (stdout, stderr).
    assert any(target == f"{path} (deleted)" for target in held.values()), held
    assert held[1] == held[2] == "/dev/null", held
    assert os.readlink(f"/proc/{proc.pid}/fd/1") not in held.values()
    time.sleep(0.3)
    assert _alive(helper)  # it waits for the replacing process
    proc.communicate("\n", timeout=30)
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(helper)


def _alive(pid: int) -> bool:
    """Running (a zombie that nobody reaped has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
