"""MDVDB_SEARCH_THREADS: how many threads a search's split passes run on (query.second_core).
Measured slower on this project's 2-core machine with the helpers, so 1 by default
(docs/benchmarks.md); the answers are the same bits either way (test_hybrid_candidates)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli


def _taken_by(second_core) -> set[str]:
    """The threads that ran the pieces of one split pass of 16 pieces."""
    seen: set[str] = set()

    def piece(_):
        seen.add(threading.current_thread().name)
        threading.Event().wait(0.002)  # long enough for a free helper to join in

    second_core.in_parallel(piece, list(range(16)))
    return seen


def test_one_thread_keeps_every_piece_on_the_caller(monkeypatch):
    from query import second_core

    monkeypatch.setattr(second_core, "_THREADS", None)
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    second_core._helpers.cache_clear()
    try:
        second_core.set_threads(1)
        assert second_core.threads() == 1
        assert _taken_by(second_core) == {threading.main_thread().name}
        second_core.set_threads(None)  # one per core: the helper takes pieces too
        assert second_core.threads() == 2
        assert len(_taken_by(second_core)) == 2
    finally:
        second_core._helpers.cache_clear()


def test_each_search_applies_its_setting(tmp_path: Path, monkeypatch):
    from kernel.config import load_config
    from query import open_index, second_core

    monkeypatch.setattr(second_core, "_THREADS", None)
    monkeypatch.setattr(second_core, "cores", lambda: 4)
    (tmp_path / "a.md").write_text("# Tar\n\nExtract a tar archive.\n", encoding="utf-8")
    build_index(tmp_path)
    default = open_index(config=load_config(tmp_path, environ={}))
    every = open_index(config=load_config(tmp_path, environ={"MDVDB_SEARCH_THREADS": "0"}))
    two = open_index(config=load_config(tmp_path, environ={"MDVDB_SEARCH_THREADS": "2"}))
    for index, want in ((every, 4), (default, 1), (two, 2), (every, 4)):
        hits = index.search("tar archive").results
        assert second_core.threads() == want and hits[0].path == "a.md"


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_value_is_a_one_line_usage_error(tmp_path: Path, value: str):
    (tmp_path / "a.md").write_text("# A\n\nText.\n", encoding="utf-8")
    done = run_cli("search", "text", "--root", str(tmp_path), env={"MDVDB_SEARCH_THREADS": value})
    assert done.returncode == 2, done.stderr
    assert "MDVDB_SEARCH_THREADS" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
