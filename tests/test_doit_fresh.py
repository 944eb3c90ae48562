"""doit as users run it: `doit list`, `doit` and `doit clean`, the real `doit` command, in a
fresh `git clone` of this repository (its own `dodo.py`) and in a fresh notes folder whose
`dodo.py` is the README's one line. Each works from nothing (no state folder yet), keeps
doit's own database in the state folder (no `.doit.db*` beside the notes) and leaves no
temp file of the index writer behind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

DOIT = Path(sys.executable).with_name("doit")


def readme_dodo() -> str:
    """The one-line `dodo.py` the doit guide (docs/doit.md) gives for a notes folder."""
    text = (REPO / "docs" / "doit.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)[0]


def _doit(root: Path, *args: str, pythonpath: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(
        [str(DOIT), *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _left_over(root: Path) -> list[str]:
    """What must never be left: index temp files, doit's own files outside the state."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.name.endswith(".tmp") or p.name.startswith(".doit.db")
    )


def _listed(output: str) -> set[str]:
    return {line.split()[0] for line in output.splitlines() if line.strip()}


STAGES = {"discover", "parse", "chunk", "embed", "cluster", "schema", "pack"}


def test_doit_list_in_a_fresh_notes_folder(notes: Path):
    """The cheap case: the README's `dodo.py`, no state folder yet; doit's database is
    opened in the state folder, which the import of the tasks made."""
    (notes / "dodo.py").write_text(readme_dodo())
    assert not (notes / ".markdownvdb.state").exists()
    assert _listed(_doit(notes, "list")) == STAGES
    assert (notes / ".markdownvdb.state" / "doit.sqlite3").is_file()
    assert _left_over(notes) == []


@pytest.mark.slow
def test_doit_then_clean_in_a_fresh_notes_folder(notes: Path):
    """A build, a build with nothing to do, a clean; before the first, a temp file such as
    a SIGKILLed writer leaves, which the build deletes (under the lock)."""
    (notes / "dodo.py").write_text(readme_dodo())
    (notes / "..markdownvdb.index.k1ll3d.tmp").write_bytes(b"\0" * 4096)
    _doit(notes)
    assert _left_over(notes) == []  # that one, and the one schema began, are gone
    assert run_cli("status", "--check", "--root", str(notes)).returncode == 0
    found = run_cli("search", "git branch", "--json", "--root", str(notes))
    assert found.returncode == 0 and "git-basics.md" in found.stdout
    _doit(notes)  # nothing to do
    assert _left_over(notes) == []
    _doit(notes, "clean")
    assert not (notes / ".markdownvdb.index").exists()
    assert _left_over(notes) == []
    assert (notes / ".markdownvdb.state" / "doit.sqlite3").is_file()


@pytest.mark.slow
def test_doit_list_build_and_clean_in_a_fresh_clone(tmp_path: Path):
    """This repository as a newcomer clones it: its `dodo.py`, no state folder."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "clone"
    done = subprocess.run(
        ["git", "clone", "--quiet", str(REPO), str(clone)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert not (clone / ".markdownvdb.state").exists()
    assert _listed(_doit(clone, "list", pythonpath=clone)) == STAGES
    _doit(clone, pythonpath=clone)
    assert (clone / ".markdownvdb.index").is_file()
    assert (clone / ".markdownvdb.state" / "doit.sqlite3").is_file()
    assert _left_over(clone) == []
    _doit(clone, "clean", pythonpath=clone)
    assert not (clone / ".markdownvdb.index").exists()
    assert _left_over(clone) == []
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True
    )
    assert status.stdout == ""  # what doit wrote is all ignored
