"""`mdvdb ingest` runs its doit tasks without the current folder's doit settings
(`pipeline.doit_run`): a folder a user runs it from cannot change them."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES, copy_markdown, run_cli


def test_ingest_ignores_the_current_folders_doit_settings(tmp_path: Path):
    notes = copy_markdown(FIXTURES / "notes", tmp_path / "notes")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pyproject.toml").write_text("[tool.doit\nbroken = \n")  # not TOML
    (elsewhere / "doit.cfg").write_text("[GLOBAL]\nbackend = json\ndep_file = here.json\n")
    done = run_cli("ingest", "--root", str(notes), cwd=elsewhere)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "4 added" in done.stdout
    assert sorted(p.name for p in elsewhere.iterdir()) == ["doit.cfg", "pyproject.toml"]
    again = run_cli("status", "--check", "--root", str(notes), cwd=elsewhere)
    assert again.returncode == 0, again.stderr
