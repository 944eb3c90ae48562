"""The documentation as a reader meets it: a README of at most 300 lines for users (the
contributor material is in CONTRIBUTING.md), and the guides built as a site by MkDocs with
no broken link and no page left out."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_points_to_the_guides():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    assert "pip install markdown-vdb" in readme
    for page in ("docs/configuration.md", "docs/agents.md", "CONTRIBUTING.md"):
        assert f"]({page})" in readme and (REPO / page).exists(), page


@pytest.mark.slow  # MkDocs builds every page: ~2 CPU-s
def test_the_docs_build_as_a_site_with_no_broken_link(tmp_path: Path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").exists()
