"""`mdvdb watch` as a real process: every kind of change becomes searchable within debounce
+ ingest time, and SIGTERM leaves no lock and no temp file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel.config import load_config
from query import open_index
from tests.conftest import REPO

DEBOUNCE_MS = 200
DEADLINE = 60.0  # seconds a change may take to show up on a loaded, shared 2-core machine


def _paths(root: Path) -> set[str]:
    index = open_index(root)
    try:
        return set(index.snapshot.paths)
    except Exception:
        return set()


def _wait_for(root: Path, condition, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < DEADLINE:
        if condition(_paths(root)):
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"watch: {what} not indexed within {DEADLINE} s")


def _text(root: Path, rel: str) -> str:
    index = open_index(root)
    return "\n".join(s.heading for s in index.get_document(rel).sections)


@pytest.mark.slow
def test_watch_follows_every_kind_of_change(tmp_path: Path):
    root = tmp_path / "project"
    docs = root / "docs"
    docs.mkdir(parents=True)
    (root / ".markdownvdb").write_text(
        f"MDVDB_SOURCE_DIRS=docs\nMDVDB_WATCH_DEBOUNCE_MS={DEBOUNCE_MS}\n"
    )
    (docs / "first.md").write_text("# First\n\nThe first note.\n")
    log = open(tmp_path / "watch.log", "w")  # a file, not a pipe nobody drains  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "watch", "--root", str(root)],
        cwd=REPO,
        stderr=log,
        text=True,
    )
    latencies: dict[str, float] = {}
    try:
        latencies["initial walk"] = _wait_for(root, lambda p: "docs/first.md" in p, "startup")
        time.sleep(1.0)  # the watch is live once the first walk has run

        (docs / "nested" / "deeper").mkdir(parents=True)
        (docs / "nested" / "deeper" / "new.md").write_text("# New\n\nCreated.\n")
        latencies["create (nested)"] = _wait_for(
            root, lambda p: "docs/nested/deeper/new.md" in p, "create"
        )

        (docs / "first.md").write_text("# First\n\n## Edited heading\n\nEdited.\n")
        started = time.monotonic()
        while "Edited heading" not in _text(root, "docs/first.md"):
            assert time.monotonic() - started < DEADLINE, "edit not indexed"
            time.sleep(0.05)
        latencies["edit"] = time.monotonic() - started

        os.rename(docs / "nested" / "deeper" / "new.md", docs / "renamed.md")
        latencies["rename"] = _wait_for(
            root,
            lambda p: "docs/renamed.md" in p and "docs/nested/deeper/new.md" not in p,
            "rename",
        )

        (docs / "renamed.md").unlink()
        latencies["delete"] = _wait_for(root, lambda p: "docs/renamed.md" not in p, "delete")

        # An editor's save: write a temp file beside the note, then rename it over the note.
        tmp = docs / ".first.md.swp~"
        tmp.write_text("# First\n\n## Saved by rename\n\nAtomic save.\n")
        os.replace(tmp, docs / "first.md")
        started = time.monotonic()
        while "Saved by rename" not in _text(root, "docs/first.md"):
            assert time.monotonic() - started < DEADLINE, "temp-then-rename save not indexed"
            time.sleep(0.05)
        latencies["temp-then-rename save"] = time.monotonic() - started

        burst = docs / "burst"
        burst.mkdir()
        for i in range(1000):
            (burst / f"b{i:04d}.md").write_text(f"# Burst {i}\n\nBurst file number {i}.\n")
        latencies["burst of 1000"] = _wait_for(
            root, lambda p: sum(x.startswith("docs/burst/") for x in p) == 1000, "burst"
        )

        # The source folder deleted and recreated: its watch dies with it.
        import shutil

        shutil.rmtree(docs)
        _wait_for(root, lambda p: not p, "source folder deletion")
        docs.mkdir()
        (docs / "reborn.md").write_text("# Reborn\n\nBack again.\n")
        latencies["recreated folder"] = _wait_for(
            root, lambda p: p == {"docs/reborn.md"}, "recreated folder"
        )
        (docs / "after.md").write_text("# After\n\nWatched again.\n")
        latencies["create after recreate"] = _wait_for(
            root, lambda p: "docs/after.md" in p, "create in recreated folder"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        err = (tmp_path / "watch.log").read_text()
        print(err)
    print("\nwatch latencies (s):", {k: round(v, 2) for k, v in latencies.items()})
    assert proc.returncode == 0, err
    assert "watch: stopped" in err
    batch_lines = [line for line in err.splitlines() if " watch: " in line and " ms" in line]
    assert batch_lines and all("chunks indexed" in line for line in batch_lines), err
    state = root / ".markdownvdb.state"
    assert not (state / "writer.json").exists()
    assert not list(root.glob("..markdownvdb.index.*.tmp"))
    from pipeline.lock import WriterLock

    lock = WriterLock(state)
    lock.acquire(wait=False)  # raises LockBusy if the watcher still held it
    lock.release()


def test_watch_setting_controls_implicit_watchers(tmp_path: Path):
    from pipeline.watch import start_background

    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    off = load_config(tmp_path, environ={"MDVDB_WATCH": "false"})
    assert start_background(off) is None
    assert not (tmp_path / ".markdownvdb.index").exists()

    on = load_config(tmp_path, environ={"MDVDB_WATCH_DEBOUNCE_MS": "50"})
    lines: list[str] = []
    background = start_background(on, log=lines.append)
    try:
        # The first walk runs at the watch's first yield, when it is already live: a
        # change from here on is seen (no wait for the watch to settle).
        _wait_for(tmp_path, lambda p: p == {"a.md"}, "initial walk")
        (tmp_path / "node_modules").mkdir()
        (tmp_path / "node_modules" / "ignored.md").write_text("# Ignored\n")
        (tmp_path / "b.md").write_text("# B\n\nbeta\n")
        _wait_for(tmp_path, lambda p: p == {"a.md", "b.md"}, "a new file")
    finally:
        background.stop()
    assert not background.thread.is_alive()
    assert threading.active_count() >= 1
    assert any("paths: " in line for line in lines), lines


def _wait_for_log(log: Path, needle: str) -> None:
    started = time.monotonic()
    while needle not in log.read_text():
        assert time.monotonic() - started < DEADLINE, f"{needle!r} not logged:\n{log.read_text()}"
        time.sleep(0.05)


@pytest.mark.slow
def test_watch_stops_indexing_while_switched_off_and_resumes_after(tmp_path: Path):
    """`.mdvdb-off` is the user's off-switch: a running `mdvdb watch` indexes nothing while
    it is there (one line says so), and catches up once it is removed."""
    root = tmp_path / "project"
    root.mkdir()
    (root / ".markdownvdb").write_text(f"MDVDB_WATCH_DEBOUNCE_MS={DEBOUNCE_MS}\n")
    (root / "first.md").write_text("# First\n\nThe first note.\n")
    log_path = tmp_path / "watch.log"
    log = open(log_path, "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "watch", "--root", str(root)], cwd=REPO, stderr=log
    )
    try:
        _wait_for_log(log_path, "watch: full walk")
        assert _paths(root) == {"first.md"}
        (root / ".mdvdb-off").write_text("")
        _wait_for_log(log_path, "watch: paused:")
        (root / "second.md").write_text("# Second\n\nWritten while switched off.\n")
        (root / "first.md").unlink()
        time.sleep(10 * DEBOUNCE_MS / 1000 + 1.0)  # ten debounces and two idle wake-ups
        assert _paths(root) == {"first.md"}, log_path.read_text()
        (root / ".mdvdb-off").unlink()
        _wait_for(root, lambda p: p == {"second.md"}, "what changed while switched off")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    err = log_path.read_text()
    assert proc.returncode == 0, err
    assert err.count("watch: paused:") == 1 and err.count("watch: resumed:") == 1, err
    assert f"{root / '.mdvdb-off'} exists; indexing resumes when it is removed" in err
    # Nothing was indexed between the two lines.
    paused = err[err.index("watch: paused:") : err.index("watch: resumed:")]
    assert "chunks indexed" not in paused, err
