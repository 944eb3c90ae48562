"""A big first build keeps its chunk records and vectors in memory until the hand-over
(`pipeline.state.State.hold`, up to `HOLD_BYTES`) instead of writing them to the state and
deleting them after the publish. Real `mdvdb ingest` processes: the held build, a build that
writes everything through (a budget of 0) and one that spills part-way write the same index
byte for byte and leave the same state; the next run parses nothing again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.workers import POOL_MIN_FILES
from tests.conftest import REPO, run_cli
from tests.test_parallel_ingest import _cache_rows, _index_parts, _project

# The real CLI with `HOLD_BYTES` set (argv[1]); the rest of argv is the command line.
_BUDGET = r"""
import sys
import pipeline.state as st
st.HOLD_BYTES = int(sys.argv[1])
from mdvdb.cli import main
sys.argv = ["mdvdb", *sys.argv[2:]]
sys.exit(main())
"""

ENV = {"MDVDB_CLUSTERING_ENABLED": "false"}


def _ingest(root: Path, budget: int | None, workers: str = "2") -> dict:
    env = {**os.environ, **ENV, "MDVDB_WORKERS": workers}
    env.pop("FORCE_COLOR", None)
    if budget is None:
        out = run_cli("ingest", "--json", "--root", str(root), env={**env, **ENV})
    else:
        out = subprocess.run(
            [sys.executable, "-c", _BUDGET, str(budget), "ingest", "--json", "--root", str(root)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow  # three builds of 1,400 files
def test_held_spilled_and_written_builds_are_the_same(tmp_path: Path):
    held = _project(tmp_path / "held", POOL_MIN_FILES + 400)
    written = Path(shutil.copytree(held, tmp_path / "written"))
    spilled = Path(shutil.copytree(held, tmp_path / "spilled"))

    reports = [
        _ingest(held, None),
        _ingest(written, 0, workers="1"),  # nothing held: every batch written, the serial way
        _ingest(spilled, 300_000),  # a few batches held, then written with the rest
    ]
    for key in ("files", "chunks", "chunks_embedded", "chunked", "errors"):
        assert len({json.dumps(r[key]) for r in reports}) == 1, key
    assert reports[0]["chunked"] > POOL_MIN_FILES
    index = _index_parts(held / ".markdownvdb.index")
    state = _cache_rows(held / ".markdownvdb.state")
    for other in (written, spilled):
        assert _index_parts(other / ".markdownvdb.index") == index, other.name
        assert _cache_rows(other / ".markdownvdb.state") == state, other.name
    # Only the manifest (and the small values) stay after the hand-over.
    assert not state["chunks"] and not state["embeddings"] and not state["embedded"]

    # Every file touched, none changed: nothing is parsed or embedded again.
    for path in held.rglob("*.md"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = _ingest(held, None)
    assert again["chunked"] == 0 and again["chunks_embedded"] == 0, again
