"""The hand-over after a first build: the caches give back what the published index holds,
cheaply, and a SIGKILL at any point of it leaves caches the next run can trust. Real
`mdvdb ingest` processes on a generated corpus for the kills; the state left by a build is
the library's (`ingest_folder`, what the command runs)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

ENV = {"MDVDB_WORKERS": "1"}

# Runs the real CLI with one `State` method wrapped to SIGKILL the process at a chosen point.
_KILLER = r"""
import os, signal, sys
import pipeline.state as st
point = sys.argv[1]
if point == "mid-transaction":  # the old table dropped, the copy renamed, nothing committed
    orig = st.State._rebuild_without
    def wrapped(self, *a, **k):
        orig(self, *a, **k)
        os.kill(os.getpid(), signal.SIGKILL)
    st.State._rebuild_without = wrapped
else:  # "before-reclaim": the hand-over committed (in the WAL), the free pages not given back
    orig, handing = st.State.hand_over, []
    def wrapped(self, *a, **k):
        handing.append(1)
        return orig(self, *a, **k)
    def reclaim(self):
        if handing:  # not the one at the start of a run
            os.kill(os.getpid(), signal.SIGKILL)
    st.State.hand_over, st.State.reclaim = wrapped, reclaim
from mdvdb.cli import main
sys.argv = ["mdvdb", *sys.argv[2:]]
sys.exit(main())
"""


def _generate(dest: Path, files: int) -> Path:
    """`bench/generate.py DEST --files N`, in this process (the corpus is not the subject)."""
    from bench.generate import generate

    return generate(dest, files)


def _ingest(folder: Path, *extra: str) -> dict:
    out = run_cli("ingest", "--json", *extra, str(folder), cwd=folder, env=ENV)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _state(folder: Path) -> Path:
    return folder / ".markdownvdb.state" / "cache.sqlite3"


def _state_bytes(folder: Path) -> int:
    db = _state(folder)
    return sum(p.stat().st_size for p in db.parent.iterdir() if p.name.startswith("cache.sqlite3"))


def _rows(folder: Path) -> dict[str, int]:
    with sqlite3.connect(_state(folder)) as db:
        return {
            t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("manifest", "parsed", "chunks", "embedded", "embeddings")
        }


def _touch_all(folder: Path) -> None:
    """Every file's mtime moves, its bytes stay: discover hashes them all again."""
    for path in folder.rglob("*.md"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def _search(folder: Path) -> str:
    out = run_cli("search", "--json", "-n", "10", "topic retrieval", cwd=folder, env=ENV)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _ingest_here(folder: Path) -> dict:
    """The same ingest in this process (`ingest_folder`, the command's), its report as the
    command's --json prints it: for the build whose caches are looked at, not its process."""
    from kernel.config import load_config
    from pipeline import ingest_folder

    return ingest_folder(load_config(folder, environ={**os.environ, **ENV})).to_json()


def test_first_build_leaves_a_small_state_file(tmp_path: Path):
    """The library's runs (the commands' processes are the kill tests' subject)."""
    folder = _generate(tmp_path / "corpus", 400)
    first = _ingest_here(folder)
    assert first["added"] == 400 and first["chunks_embedded"] > 1000
    rows = _rows(folder)
    # What the index holds is not kept twice (the default model is cheap to re-run, so its
    # vectors go too); only the manifest stays.
    assert rows["manifest"] == 400
    assert rows["parsed"] == rows["chunks"] == rows["embedded"] == rows["embeddings"] == 0
    # The pages the records took are given back: the state is a small fraction of the index
    # (it peaked at ~9 KB per file while the build ran).
    assert _state_bytes(folder) < 400 * 1024, _state_bytes(folder)
    index = first["index_bytes"]
    assert _state_bytes(folder) < index / 5, (_state_bytes(folder), index)
    # Unchanged files, re-hashed, are neither parsed nor embedded again.
    _touch_all(folder)
    again = _ingest_here(folder)
    assert again["unchanged"] == 400 or again["changed"] == 0
    assert again["chunks_embedded"] == 0 and again["chunked"] == 0, again


@pytest.mark.slow  # 15 s under load: two builds and five runs
@pytest.mark.parametrize("point", ["mid-transaction", "before-reclaim"])
def test_kill_during_hand_over_leaves_caches_usable(tmp_path: Path, point: str):
    folder = _generate(tmp_path / "corpus", 300)
    reference = tmp_path / "reference"
    import shutil

    shutil.copytree(folder, reference)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLER, point, "ingest", str(folder)],
        cwd=folder,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # The index was published before the hand-over: a reader sees the whole build.
    assert _search(folder) == _search(_ingest_clean(reference))
    rows = _rows(folder)
    if point == "mid-transaction":  # rolled back: every record still here, none lost
        assert rows["chunks"] == rows["embedded"] == 300 and rows["embeddings"] > 0, rows
    else:  # committed: what the index holds is gone from the state
        assert rows["chunks"] == rows["embedded"] == rows["embeddings"] == 0, rows
    # The next run (which sees the interrupted one and may pack again) parses and embeds
    # nothing, and finishes the hand-over.
    noop = _ingest(folder)
    assert noop["chunks_embedded"] == 0 and noop["chunked"] == 0, noop
    assert _rows(folder)["embeddings"] == 0
    # Unchanged files re-hashed: nothing parsed or embedded twice.
    _touch_all(folder)
    again = _ingest(folder)
    assert again["chunks_embedded"] == 0 and again["chunked"] == 0, again
    # One edit: only that file is redone, and the index answers as a clean build does.
    victim = sorted(folder.rglob("*.md"))[7]
    twin = reference / victim.relative_to(folder)
    for path in (victim, twin):
        path.write_text(path.read_text() + "\n\n## Added section\n\nTopic retrieval notes.\n")
    edit = _ingest(folder)
    assert edit["changed"] == 1 and 0 < edit["chunks_embedded"] < 20, edit
    assert _search(folder) == _search(_ingest_clean(reference))
    with sqlite3.connect(_state(folder)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert not any(t.endswith("__kept") for t in tables), tables


def _ingest_clean(folder: Path) -> Path:
    _ingest(folder)
    return folder
