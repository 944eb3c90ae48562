"""A run dies whole: whatever an ingest started dies with it, SIGKILL included, and nothing
it started holds the writer lock, so a killed run always leaves the folder free. Real
processes, really killed; every process a test starts carries a mark in its environment
(inherited by whatever it starts, forked or exec'd), and "left behind" is any process with
that mark alive after the kill; "locked" is a lock on `writer.lock` in /proc/locks or a
non-blocking `flock` that fails."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli, unpack_corpus

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
MARK = "MDVDB_TEST_RUN_MARK"


def _marked(mark: str) -> list[int]:
    needle = f"\0{MARK}={mark}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in b"\0" + fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _count(mark: str, n: int, seconds: float = 5) -> int:
    """How many marked processes there are, waiting up to `seconds` for `n` of them (a
    process just started may not show its environment yet)."""
    deadline = time.monotonic() + seconds
    while len(_marked(mark)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(_marked(mark))


def _gone(mark: str, seconds: float) -> list[int]:
    """The marked processes still alive after up to `seconds` (killed then, for the next
    tests)."""
    deadline = time.monotonic() + seconds
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _marked(mark)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def _locked(state: Path) -> tuple[int, bool]:
    """Locks /proc/locks lists on the folder's writer lock, and whether a non-blocking
    exclusive `flock` fails."""
    path = state / "writer.lock"
    inode = path.stat().st_ino
    listed = sum(
        1
        for line in Path("/proc/locks").read_text().splitlines()
        if any(t.endswith(f":{inode}") for t in line.split())
    )
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = False
    except BlockingIOError:
        busy = True
    finally:
        os.close(fd)
    return listed, busy


def _start(code: str, *args: str, mark: str) -> subprocess.Popen:
    """`python -c code args` (the repository's code), marked; its first line read."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env={**os.environ, MARK: mark},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


# A writer that forks a child which does not ask to die with it (the worst case for the
# lock: the child outlives the SIGKILL).
FORKS_UNDER_THE_LOCK = """
import os, sys, time
from pathlib import Path
from pipeline.lock import WriterLock
WriterLock(Path(sys.argv[1])).acquire()
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_forked_child_never_holds_the_writer_lock(tmp_path: Path):
    state = tmp_path / ".markdownvdb.state"
    mark = uuid.uuid4().hex
    proc = _start(FORKS_UNDER_THE_LOCK, str(state), mark=mark)
    assert _locked(state)[1]  # held by the writer
    _kill(proc)
    try:
        assert _count(mark, 1) == 1  # the child lives on...
        assert _locked(state) == (0, False)  # ...and holds no lock
    finally:
        _gone(mark, 0)


# The child says "ready" once it has asked: a parent killed before that would only test
# `die_with_parent`'s check of a parent already gone.
ASKS_TO_DIE_WITH_ITS_PARENT = """
import os, time
from kernel.lifeline import die_with_parent
parent = os.getpid()
if os.fork() == 0:
    die_with_parent(parent)
    print("ready", flush=True)
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def test_a_forked_child_dies_with_its_sigkilled_parent():
    """The parent-death signal (a pool worker's lifeline): the child outlives nothing."""
    mark = uuid.uuid4().hex
    proc = _start(ASKS_TO_DIE_WITH_ITS_PARENT, mark=mark)
    assert _count(mark, 2) == 2
    _kill(proc)
    assert _gone(mark, 5) == []


GUARDED = """
import subprocess, time
from kernel.lifeline import Guard
guard = Guard()
with guard.marking():
    subprocess.Popen(["sleep", "60"], start_new_session=True)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_guard_kills_what_was_started_under_its_mark():
    """What a library starts out of reach (its own session, no parent-death signal): the
    guard kills it when its owner is SIGKILLed."""
    mark = uuid.uuid4().hex
    proc = _start(GUARDED, mark=mark)
    assert _count(mark, 3) == 3  # the owner, its guard, the sleep
    _kill(proc)
    assert _gone(mark, 5) == []


def _copy_pages(corpora_dir: Path, target: Path, n: int) -> Path:
    source = unpack_corpus(corpora_dir, "tldr") / "pages"
    for path in sorted(source.rglob("*.md"))[:n]:
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    return target


@pytest.mark.slow
def test_a_killed_pool_leaves_no_process_and_no_lock(corpora_dir: Path, tmp_path: Path):
    """`ingest --full` of 1,000 pages with two workers, SIGKILLed while its pool works:
    no worker is left, the folder is free, the next `ingest --no-wait` runs, and `status`
    named the writer while it ran."""
    root = _copy_pages(corpora_dir, tmp_path / "pages", 1000)
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK: mark, "MDVDB_WORKERS": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "ingest", "--full", "--root", str(root)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(_marked(mark)) < 3 and time.monotonic() < deadline:  # the ingest + 2 workers
        time.sleep(0.05)
    assert len(_marked(mark)) >= 3, "the pool never started"
    writer = json.loads(run_cli("status", "--json", "--root", str(root)).stdout)["writer"]
    assert writer["pid"] == proc.pid and "ingest --full" in writer["command"]
    _kill(proc)
    assert _gone(mark, 5) == []
    assert _locked(root / ".markdownvdb.state") == (0, False)
    again = run_cli("ingest", "--no-wait", "--root", str(root))
    assert again.returncode == 0, again.stderr
    assert run_cli("status", "--verify", "--root", str(root)).returncode == 0
    assert run_cli("status", "--check", "--root", str(root)).returncode == 0


@pytest.mark.slow
def test_sigkills_of_every_writing_command(corpora_dir: Path):
    """`bench/crash_kills.py` with two kills of each command (the bench does 100 in all):
    `ingest`, `ingest --full` (the pool), `watch`, `serve`, `mcp`."""
    from bench.crash_kills import COMMANDS, crash_kills

    rows = crash_kills(unpack_corpus(corpora_dir, "tldr") / "pages", 10, 1000, seed=3)
    assert [row["command"] for row in rows] == list(COMMANDS)
    for row in rows:
        assert row["kills"] == 2
        bad = {k: row[k] for k in ("left_processes", "locked_folders", "failed_ingests")}
        bad |= {k: row[k] for k in ("unverifiable", "differences")}
        assert set(bad.values()) == {0}, f"{row['command']}: {bad}; {row['problems']}"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_a_killed_ray_ingest_leaves_no_ray_process(notes: Path):
    """The local Ray cluster an ingest starts (`--executor ray`): its raylet's agents and
    workers outlived a SIGKILLed driver by minutes; its guard kills them with it."""
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK: mark, "MDVDB_WORKERS": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "ingest", "--executor", "ray", "--root", str(notes)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def raylet_children() -> list[int]:
        pids = _marked(mark)
        raylets = {p for p in pids if "raylet" in _cmdline(p).split(" ", 1)[0]}
        return [p for p in pids if _parent(p) in raylets]

    deadline = time.monotonic() + 240
    while not raylet_children() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert raylet_children(), "no Ray worker or agent ever started"
    _kill(proc)
    assert _gone(mark, 5) == []
    assert _locked(notes / ".markdownvdb.state") == (0, False)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
