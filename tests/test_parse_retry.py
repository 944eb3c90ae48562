"""A file that could not be parsed is reported, left out, and indexed by the first run
after it reads again, even when what it reads is the content discover had hashed.

The skip happens after discover: parse reads a file again and finds other bytes than the
ones discover hashed ("changed while indexing"), or cannot read it. Such a file leaves the
manifest; the next run's discover puts it back. When its content is the one hashed before,
the manifest the next discover reports is the one the failing run's discover reported, and
the later stages must not call themselves up to date on that: the file has never been
parsed. The real CLI, as a user meets it: `status` and `status --verify` must agree with
what the ingest did.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

TARGET = "git-basics.md"


def ok(*args: str) -> dict:
    result = run_cli(*args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return json.loads(result.stdout) if "--json" in args else {}


def indexed(root: Path) -> dict:
    return ok("status", "--json", "--root", str(root))


def fail_the_parse_of(root: Path, original: bytes) -> None:
    """Other bytes of the same size under the same mtime (discover trusts the stat and keeps
    the sha it had), with no published index (every file is read again by parse)."""
    target = root / TARGET
    st = target.stat()
    other = original.swapcase()
    assert other != original and len(other) == len(original)
    target.write_bytes(other)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    (root / ".markdownvdb.index").unlink()


# Both fixes reach the same path (discover sees a new stat, hashes the content it had hashed
# in the failing run, and parse must still run): the second is `slow` (CI runs it).
@pytest.mark.parametrize(
    "fix", ["rewritten", pytest.param("deleted and added again", marks=pytest.mark.slow)]
)
def test_a_file_skipped_by_parse_is_indexed_once_it_reads_again(indexed_notes: Path, fix: str):
    """`indexed_notes`: the first build is not the subject here (one ingest per run, copied);
    every command after it is the real CLI."""
    root = indexed_notes
    original = (root / TARGET).read_bytes()
    files = len(list(root.rglob("*.md")))  # every page of the notes is indexed

    fail_the_parse_of(root, original)
    report = ok("ingest", "--root", str(root), "--json")
    assert {"path": TARGET, "problem": "changed while indexing; indexed at next run"} in report[
        "errors"
    ], report
    skipped = indexed(root)
    assert skipped["files"] == files - 1
    assert skipped["fresh"], skipped  # reported and left out: not work for the next run

    # The file is fixed: its content is again the one discover hashed in the failing run.
    if fix == "rewritten":
        (root / TARGET).write_bytes(original)
    else:
        (root / TARGET).unlink()
        (root / TARGET).write_bytes(original)
    ok("ingest", "--root", str(root))
    status = indexed(root)
    assert status["files"] == files, status
    assert status["fresh"] and not status["new_files"] and not status["stale_files"], status
    found = ok("search", "--root", str(root), "--json", "git commit")
    assert TARGET in {r["path"] for r in found["results"]}, found
    verified = ok("status", "--verify", "--json", "--root", str(root))
    assert verified["ok"] and not verified["stale"], verified

    # And a run after that has nothing to do.
    again = ok("ingest", "--root", str(root), "--json")
    assert again["unchanged"] == files and not again["published"], again
