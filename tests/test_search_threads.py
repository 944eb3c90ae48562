"""MDVDB_SEARCH_THREADS: how many threads a search's split passes run on
(query.score.second_core). By default (0) one per core this process may run on; the answers
are the same bits either way (test_hybrid_candidates)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli


def _taken_by(second_core) -> set[str]:
    """The threads that ran the pieces of one split pass of 16 pieces (the first two meet,
    so two threads, when the pass has them, both take one)."""
    seen: set[str] = set()
    meet = threading.Barrier(2)

    def piece(i):
        seen.add(threading.current_thread().name)
        if i < 2 and second_core.threads() > 1:
            meet.wait(timeout=30)

    second_core.in_parallel(piece, list(range(16)))
    return seen


def test_one_thread_keeps_every_piece_on_the_caller(monkeypatch):
    from query.score import second_core

    monkeypatch.setattr(second_core, "_THREADS", None)
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    second_core.set_threads(1)
    assert second_core.threads() == 1
    assert _taken_by(second_core) == {threading.main_thread().name}
    second_core.set_threads(None)  # one per core: the caller and a thread of the pool
    assert second_core.threads() == 2
    taken = _taken_by(second_core) - {threading.main_thread().name}
    assert len(taken) == 1 and taken.pop().startswith("mdvdb-search")


def test_a_call_no_thread_started_is_run_by_the_caller(monkeypatch):
    """With the pool's one thread busy, `result()` runs the call itself instead of waiting
    for that thread (a busy machine's scheduler slice)."""
    from query.score import second_core

    monkeypatch.setattr(second_core, "_THREADS", None)
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    release = threading.Event()
    busy = second_core.in_background(release.wait, 30)
    try:
        queued = second_core.in_background(threading.current_thread)
        assert queued.result() is threading.main_thread()
    finally:
        release.set()
    assert busy.result() is True


def test_each_search_applies_its_setting(tmp_path: Path, monkeypatch):
    from kernel.config import load_config
    from query import open_index
    from query.score import second_core

    monkeypatch.setattr(second_core, "_THREADS", None)
    monkeypatch.setattr(second_core, "cores", lambda: 4)
    (tmp_path / "a.md").write_text("# Tar\n\nExtract a tar archive.\n", encoding="utf-8")
    build_index(tmp_path)
    default = open_index(config=load_config(tmp_path, environ={}))
    every = open_index(config=load_config(tmp_path, environ={"MDVDB_SEARCH_THREADS": "0"}))
    two = open_index(config=load_config(tmp_path, environ={"MDVDB_SEARCH_THREADS": "2"}))
    one = open_index(config=load_config(tmp_path, environ={"MDVDB_SEARCH_THREADS": "1"}))
    for index, want in ((one, 1), (every, 4), (one, 1), (default, 4), (two, 2), (every, 4)):
        hits = index.search("tar archive").results
        assert second_core.threads() == want and hits[0].path == "a.md"


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_value_is_a_one_line_usage_error(tmp_path: Path, value: str):
    (tmp_path / "a.md").write_text("# A\n\nText.\n", encoding="utf-8")
    done = run_cli("search", "text", "--root", str(tmp_path), env={"MDVDB_SEARCH_THREADS": value})
    assert done.returncode == 2, done.stderr
    assert "MDVDB_SEARCH_THREADS" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_fresh_process_starts_at_the_settings_default(tmp_path: Path):
    """Before any search set it (a one-shot lexical search never loads the helper
    threads' module), a split pass runs on MDVDB_SEARCH_THREADS' default: its declared
    default, parsed, is what the module starts with; a search under another value sets it."""
    import subprocess
    import sys

    (tmp_path / "a.md").write_text("# Tar\n\nExtract a tar archive.\n", encoding="utf-8")
    build_index(tmp_path)
    code = (
        "import sys\n"
        "from kernel.config import SETTINGS, load_config\n"
        "from query import open_index\n"
        "default = next(s for s in SETTINGS if s.env == 'MDVDB_SEARCH_THREADS')\n"
        "want = default.parse(default.default) or None\n"
        f"index = open_index(config=load_config({str(tmp_path)!r}, environ={{}}))\n"
        "index.search('tar', mode='lexical')\n"
        "assert 'query.score.second_core' not in sys.modules\n"
        "from query.score import second_core\n"
        "assert second_core._THREADS is want is None, second_core._THREADS\n"
        f"other = open_index(config=load_config({str(tmp_path)!r}, "
        "environ={'MDVDB_SEARCH_THREADS': '3'}))\n"
        "other.search('tar', mode='lexical')\n"
        "assert second_core._THREADS == 3\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_pass_is_cut_into_pieces_for_every_thread(monkeypatch):
    """Pieces of at least the minimum, PIECES_PER_THREAD per thread; one range for one
    thread or a pass under twice the minimum."""
    from query.score import second_core

    monkeypatch.setattr(second_core, "_THREADS", second_core._THREADS)  # restored after
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    n, minimum = 1_000_000, 32_768
    for count, want in ((1, 1), (2, 2 * second_core.PIECES_PER_THREAD), (None, 8)):
        second_core.set_threads(count)
        ranges = second_core.row_ranges(n, minimum)
        assert len(ranges) == want
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(b - a >= minimum for a, b in ranges)
    assert second_core.row_ranges(2 * minimum - 1, minimum) == [(0, 2 * minimum - 1)]


def test_one_thread_runs_a_background_call_at_once(monkeypatch):
    """On one thread (a one-shot CLI search's default) `in_background` runs the call in the
    caller, starting no pool; on two it runs on a pool thread."""
    from query.score import second_core

    monkeypatch.setattr(second_core, "cores", lambda: 2)
    monkeypatch.setattr(second_core, "_POOLS", {})
    second_core.set_threads(1)
    try:
        assert second_core.in_background(threading.current_thread).result() is (
            threading.current_thread()
        )
        assert second_core._POOLS == {}
        second_core.set_threads(2)
        assert second_core.in_background(threading.current_thread).result() is not (
            threading.current_thread()
        )
    finally:
        second_core.set_threads(None)
        for pool in second_core._POOLS.values():
            pool.shutdown()
