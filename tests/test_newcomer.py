"""A newcomer's first minutes: the README's two commands, in order, in a fresh clone.

The commands are read out of README.md, so this breaks when the README changes. Command 1
runs as written in a `git clone` of this repository. Its install steps (venv + `pip install`)
download the whole dependency tree from PyPI, so they run only with MDVDB_NEWCOMER_PIP=1
(`.ci/run` sets it); otherwise the rest of command 1 runs, as written, with `mdvdb` being
this interpreter running the clone's code. Command 2 (the whole suite) is then run on a
quick subset that reads the fixtures command 1 used to write into."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO, copy_markdown

# Tests that count the fixture notes' files: an index leaking into their copy fails them.
QUICK_SUBSET = [
    "tests/test_ingest.py::test_first_ingest_then_noop_embeds_nothing",
    "tests/test_cli.py::test_ingest_search_get_status_json",
]
INSTALL_STEPS = ("python3 -m venv", ". .venv/bin/activate", "pip install")


def readme_commands() -> list[str]:
    """The ```sh blocks of the README's "The two commands" section, continuation lines
    joined."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return [re.sub(r"\\\n\s*", "", block).strip() for block in blocks]


def test_readme_has_the_two_commands():
    first, second = readme_commands()
    assert "mdvdb ingest" in first and "mdvdb search" in first
    assert "tests/" not in first  # command 1 must leave the tests' fixtures alone
    assert second == "python -m pytest -q -n 4 --dist loadfile"


def test_fixture_copies_hold_only_markdown(tmp_path: Path):
    source = tmp_path / "source"
    shutil.copytree(FIXTURES / "notes", source)
    (source / ".markdownvdb.index").write_bytes(b"MDVDBIX\0")
    (source / ".markdownvdb.state").mkdir()
    (source / ".markdownvdb.state" / "cache.sqlite3").write_bytes(b"")
    (source / "guides" / "notes.txt").write_text("not Markdown")
    copied = copy_markdown(source, tmp_path / "copy")
    names = sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file())
    assert names == sorted(
        p.relative_to(FIXTURES / "notes").as_posix() for p in (FIXTURES / "notes").rglob("*.md")
    )


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_readme_commands_in_order_in_a_fresh_clone(tmp_path: Path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "clone"
    _git("clone", "--quiet", str(REPO), str(clone), cwd=tmp_path)
    first, _ = readme_commands()
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.pop("PYTHONPATH", None)
    if os.environ.get("MDVDB_NEWCOMER_PIP") == "1":
        command = first
        python = str(clone / ".venv" / "bin" / "python")
    else:
        steps = [s.strip() for s in first.split("&&")]
        command = " && ".join(s for s in steps if not s.startswith(INSTALL_STEPS))
        assert command != first and command.startswith("mdvdb ingest")
        # `mdvdb` = this interpreter running the clone's code (cwd and PYTHONPATH first).
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "mdvdb").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mdvdb "$@"\n')
        (bin_dir / "mdvdb").chmod(0o755)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        env["PYTHONPATH"] = str(clone)
        python = sys.executable
    done = subprocess.run(
        ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tar.md" in done.stdout.split("files:", 1)[-1]  # the search found the tar page
    # Nothing written into tests/ (ignored files included), nothing left untracked.
    assert _git("status", "--porcelain", "--ignored", "tests", cwd=clone) == ""
    assert "??" not in _git("status", "--porcelain", cwd=clone)

    which = subprocess.run(
        [python, "-c", "import mdvdb; print(mdvdb.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert which.stdout.startswith(str(clone)), which.stdout + which.stderr
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *QUICK_SUBSET],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert f"{len(QUICK_SUBSET)} passed" in tests.stdout
