"""Shared fixtures: real folders in tmp, the real CLI, and the shared corpora when present."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_CORPORA = Path(os.environ.get("MDVDB_SHARED_CORPORA", REPO.parent / "shared" / "corpora"))

# Model tables live in a per-user cache (mdvdb/user_cache.py). The suite gets its own, shared
# by every test and every CLI subprocess of the session (they inherit the variable), so a test
# run never writes into the real home; tests/test_footprint.py checks the real location rules.
if not os.environ.get("MDVDB_CACHE_DIR"):
    os.environ["MDVDB_CACHE_DIR"] = tempfile.mkdtemp(prefix="mdvdb-test-cache-")


MARKDOWN = (".md", ".markdown")


def copy_markdown(source: Path, target: Path) -> Path:
    """Copy the Markdown files of `source` (and the folders holding them) to `target`, and
    nothing else: an index or state folder someone built in the fixtures (README command 1
    once pointed there) must never leak into a test."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [
            name
            for name in names
            if not (Path(folder, name).is_dir() and not Path(folder, name).is_symlink())
            and not name.lower().endswith(MARKDOWN)
        ]

    shutil.copytree(source, target, ignore=ignore)
    return target


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A copy of the small fixture folder's Markdown, as a project root."""
    return copy_markdown(FIXTURES / "notes", tmp_path / "notes")


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, input: str | None = None):
    """Run the real `mdvdb` command in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("FORCE_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "mdvdb", *args],
        cwd=cwd,
        env=full_env,
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def corpora_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SHARED_CORPORA.is_dir():
        pytest.skip("../shared/corpora is not here")
    return tmp_path_factory.mktemp("corpora")


def unpack_corpus(corpora_dir: Path, name: str) -> Path:
    """Unpack ../shared/corpora/<archive> once per session; returns the unpacked folder."""
    archives = {
        "tldr": "tldr.tar.gz",
        "leetcode": "leetcode.tar.gz",
        "powershell-docs": "powershell-docs.tar.gz",
        "edge-cases": "edge-cases.tar.gz",
        "nfcorpus": "beir-nfcorpus.tar.gz",
        "cranfield": "beir-cranfield.tar.gz",
    }
    target = corpora_dir / name
    if not target.exists():
        with tarfile.open(SHARED_CORPORA / archives[name]) as tar:
            tar.extractall(corpora_dir, filter="data")
    if not target.exists():
        pytest.skip(f"corpus {name} did not unpack to {target}")
    return target
