"""A touched-but-unchanged file is read once, not at every later ingest (through the CLI),
and the one ingest that reads it republishes the index with its new stat, so that the
index is fresh again (tests/test_freshness.py: `status --check`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _ingest_json(root: Path) -> dict:
    done = run_cli("ingest", "--json", "--root", str(root))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_touched_file_is_read_once(indexed_notes: Path):
    """The inner loop's case (the fuller ones below are `slow` and run `mdvdb ingest`): after
    a touch, one ingest reads the file, embeds nothing and publishes its new stat; the next
    reads no file and publishes nothing. The ingest the command runs, in this process."""
    from kernel.config import load_config
    from pipeline import ingest_folder

    def ingest():
        return ingest_folder(load_config(indexed_notes, environ=dict(os.environ)))

    assert ingest().hashed == 0  # (the copy's own first run)
    os.utime(indexed_notes / "tar.md", (1_700_000_000, 1_700_000_000))
    first = ingest()
    assert (first.hashed, first.changed, first.chunks_embedded, first.published) == (1, 0, 0, True)
    second = ingest()
    assert (second.hashed, second.published) == (0, False)


@pytest.mark.slow
def test_touched_file_is_hashed_once_then_trusted_by_its_new_stat(indexed_notes: Path):
    assert _ingest_json(indexed_notes)["hashed"] == 0  # (the copy's own first run)
    os.utime(indexed_notes / "tar.md", (1_700_000_000, 1_700_000_000))
    first = _ingest_json(indexed_notes)
    assert (first["hashed"], first["changed"], first["published"]) == (1, 0, True)
    # The manifest took the new mtime: the next no-op reads no file at all.
    second = _ingest_json(indexed_notes)
    assert (second["hashed"], second["changed"], second["published"]) == (0, 0, False)
    assert second["unchanged"] == first["unchanged"] == first["files"]
    # A new file makes the next run compare every stat with the manifest (not only the
    # walk's signature): the touched file is not read again, only the new one.
    (indexed_notes / "new.md").write_text("# New\n\nA page about zstd frames.\n")
    third = _ingest_json(indexed_notes)
    assert (third["hashed"], third["added"]) == (1, 1)


@pytest.mark.slow
def test_a_copy_without_kept_mtimes_is_rehashed_once(indexed_notes: Path, tmp_path: Path):
    """`cp -r` (no -p) gives every file a new mtime: one ingest re-hashes them all, the
    next none."""
    copy = tmp_path / "copy"
    shutil.copytree(indexed_notes, copy, copy_function=shutil.copyfile)
    first = _ingest_json(copy)
    assert first["hashed"] == first["files"] > 0 and first["changed"] == 0
    assert _ingest_json(copy)["hashed"] == 0
    (copy / "new.md").write_text("# New\n\nA page about zstd frames.\n")
    assert _ingest_json(copy)["hashed"] == 1  # the new file only, not the copied ones


@pytest.mark.slow
def test_an_edit_is_still_seen_after_a_touch(indexed_notes: Path):
    """The stored stat is the one hashed: a later edit (new size) is read and indexed."""
    target = indexed_notes / "tar.md"
    _ingest_json(indexed_notes)
    os.utime(target, (1_700_000_000, 1_700_000_000))
    _ingest_json(indexed_notes)
    target.write_text(target.read_text() + "\n## Extra\n\nA section about zstd frames.\n")
    edited = _ingest_json(indexed_notes)
    assert (edited["hashed"], edited["changed"], edited["published"]) == (1, 1, True)
    found = run_cli("search", "zstd frames", "--json", "--root", str(indexed_notes))
    assert found.returncode == 0 and "tar.md" in found.stdout


@pytest.mark.slow
def test_after_a_noop_an_added_and_a_deleted_file_are_seen(indexed_notes: Path):
    """A run that finds every stat as stored reads no manifest row (the walk's signature is
    kept with it); anything added or deleted changes the signature and is compared in full."""
    _ingest_json(indexed_notes)
    noop = _ingest_json(indexed_notes)
    assert (noop["hashed"], noop["published"], noop["unchanged"]) == (0, False, noop["files"])
    (indexed_notes / "tar.md").unlink()
    (indexed_notes / "new.md").write_text("# New\n\nA page about zstd frames.\n")
    after = _ingest_json(indexed_notes)
    assert (after["added"], after["removed"], after["files"]) == (1, 1, noop["files"])
    again = _ingest_json(indexed_notes)
    assert (again["added"], again["removed"], again["hashed"]) == (0, 0, 0)
