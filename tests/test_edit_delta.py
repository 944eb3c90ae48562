"""The edit path's shortcuts give what the long way gives.

discover compares only the folders whose stat signature moved (reading back only their
manifest rows), and pack plans from discover's changes (`pipeline.plan.Delta`) instead of
diffing the previous index against every current file. Each step below edits a folder,
checks that the shortcut was taken, and that the stored manifest, the report's counts and the
published index equal what the long way gives: a run with no stored signatures and no trusted
change list, then a full rebuild of the index (`assert_same_as_full`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernel.config import load_config
from pipeline import ingest, stages
from pipeline.pack import build as packing
from pipeline.state import State
from tests.test_incremental_pack import TOPICS, page, tables_and_meta, write


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    for i in range(30):
        topic = list(TOPICS)[i % 3]
        write(root, f"{topic}/{i % 2}/note-{i:02d}.md", page(topic, i))
    write(root, "top.md", page("git", 99))
    ingest.ingest_folder(load_config(root, environ={}))
    return root


class Spy:
    """Records whether the long ways ran: every manifest row read, every file diffed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.full_manifest = 0
        self.full_diff = 0
        self.delta_plans: list[bool] = []
        self.cluster_diffs = 0
        real_manifest, real_diff = State.manifest, packing._file_source
        real_delta = packing._delta_source
        real_changes = State.cluster_changes

        def cluster_changes(state):
            self.cluster_diffs += 1
            return real_changes(state)

        monkeypatch.setattr(State, "cluster_changes", cluster_changes)

        def manifest(state):
            self.full_manifest += 1
            return real_manifest(state)

        def file_source(entries, previous):
            self.full_diff += len(entries) > 2
            return real_diff(entries, previous)

        def delta_source(previous, delta, files):
            out = real_delta(previous, delta, files)
            self.delta_plans.append(out is not None)
            return out

        monkeypatch.setattr(State, "manifest", manifest)
        monkeypatch.setattr(packing, "_file_source", file_source)
        monkeypatch.setattr(packing, "_delta_source", delta_source)

    def reset(self) -> None:
        self.full_manifest = self.full_diff = self.cluster_diffs = 0
        self.delta_plans.clear()


def long_way(root: Path) -> tuple[dict, dict, dict]:
    """The manifest, counts and index tables a run that trusts nothing stored gives (no
    folder signatures, no trusted change list), on a copy."""
    copy = root.parent / f"{root.name}-long"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, symlinks=True, copy_function=shutil.copy2)
    config = load_config(copy, environ={})
    with State(config.state_path) as state:
        state.delete_value(stages.STAT_SIGNATURES)
        state.set_value("clean_run", None)
    report = ingest.ingest_folder(config)
    with State(config.state_path) as state:
        manifest = {p: tuple(e)[1:] for p, e in state.manifest().items()}
    counts = {k: getattr(report, k) for k in ("files", "added", "changed", "removed")}
    tables = tables_and_meta(config.index_path)[0]
    shutil.rmtree(copy)
    return manifest, counts, tables


def shortcut_equals_long_way(root: Path, spy: Spy, touched: int = 0) -> None:
    expected_manifest, expected_counts, expected_tables = long_way(root)
    spy.reset()
    config = load_config(root, environ={})
    report = ingest.ingest_folder(config)
    assert spy.full_manifest == 0, "discover read every manifest row"
    assert spy.full_diff == 0 and spy.delta_plans == [True], "pack diffed every file"
    assert spy.cluster_diffs == 0, "the cluster stage diffed every assignment"
    assert {k: getattr(report, k) for k in expected_counts} == expected_counts
    assert report.reused_files == report.files - report.added - report.changed - touched
    with State(config.state_path) as state:
        manifest = {p: tuple(e)[1:] for p, e in state.manifest().items()}
        assert state.get_value(stages.UNPACKED_RESTAMPS) is None
    assert manifest == expected_manifest
    # The shortcut's index is the one the long way packs, and the one a full rebuild packs.
    tables, meta = tables_and_meta(config.index_path)
    assert sorted(tables) == sorted(expected_tables)
    for name, table in tables.items():
        assert table.equals(expected_tables[name]), name
    config.index_path.unlink()
    assert ingest.ingest_folder(config).published
    full, full_meta = tables_and_meta(config.index_path)
    for name, table in tables.items():
        assert table.equals(full[name]), name
    assert meta == full_meta


def test_edits_take_the_shortcuts_and_equal_the_long_way(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
):
    root = corpus
    spy = Spy(monkeypatch)
    # A run that stored the signatures (the fixture's first build did), then: one body edit.
    path = root / "cooking/1/note-01.md"
    path.write_text(path.read_text() + "\nA new line about sourdough kayaks.\n")
    shortcut_equals_long_way(root, spy)

    # A rename across folders, a delete, an add in a new folder, an add at the root.
    shutil.move(root / "git/0/note-00.md", root / "garden/0/renamed-00.md")
    (root / "git/1/note-03.md").unlink()
    write(root, "aaa/new/first.md", page("git", 100))
    write(root, "zz.md", page("garden", 101))
    shortcut_equals_long_way(root, spy)

    # A whole folder goes.
    shutil.rmtree(root / "garden/1")
    shortcut_equals_long_way(root, spy)


def test_a_touched_file_is_repacked_with_its_new_mtime(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
):
    """Touched, same content: no pack runs, so the published row keeps the old mtime; the
    next edit's pack (planned from the delta) must rebuild that row too."""
    root = corpus
    spy = Spy(monkeypatch)
    os.utime(root / "git/0/note-06.md", ns=(1_700_000_000_000_000_000,) * 2)
    config = load_config(root, environ={})
    report = ingest.ingest_folder(config)
    assert not report.published and spy.full_manifest == 0
    with State(config.state_path) as state:
        assert state.get_value(stages.UNPACKED_RESTAMPS) == ["git/0/note-06.md"]
    write(root, "cooking/0/note-10.md", page("cooking", 10) + "\nOne more line.\n")
    shortcut_equals_long_way(root, spy, touched=1)
    index = load_config(root, environ={}).index_path
    from kernel import index_format

    files = index_format.read_index(index).tables["files"]
    at = files.column("path").to_pylist().index("git/0/note-06.md")
    assert files.column("mtime")[at].as_py() == 1_700_000_000.0


def test_the_delta_plan_equals_the_full_diff(corpus: Path):
    """`_delta_source` against `_file_source` on the same previous index and manifest, for
    changes at the first and last rows, a re-stamp back to the indexed mtime, and removals."""
    from kernel import index_format
    from pipeline.plan import Delta

    config = load_config(corpus, environ={})
    previous = index_format.read_index(config.index_path)
    with State(config.state_path) as state:
        manifest = state.manifest()
    paths = sorted(manifest)
    first, last, middle, gone = paths[0], paths[-1], paths[7], paths[12]
    entries = dict(manifest)
    entries[first] = entries[first]._replace(sha256="0" * 64)
    entries[last] = entries[last]._replace(mtime_ns=entries[last].mtime_ns + 1)
    entries["a-new.md"] = entries[middle]._replace(path="a-new.md")
    entries["git/0/note-00b.md"] = entries[middle]._replace(path="git/0/note-00b.md")
    del entries[gone]
    fresh = [entries[p] for p in (first, last, "a-new.md", "git/0/note-00b.md")]
    fresh.append(entries[middle])  # listed, but its row is as indexed: kept
    delta = Delta(tuple(fresh), (gone,))
    planned = packing._delta_source(previous, delta, len(entries))
    assert planned is not None
    fresh_rows, source = planned
    ordered = sorted(entries.values())
    expected = packing._file_source(ordered, previous)
    assert np.array_equal(source, expected)
    rebuilt = [e.path for e, s in zip(ordered, expected, strict=True) if s < 0]
    assert [e.path for e in fresh_rows] == rebuilt
    # A delta that does not describe this index (a row too many) is refused.
    assert packing._delta_source(previous, delta, len(entries) + 1) is None
