"""`mdvdb ingest` runs its doit tasks without the current folder's doit settings, without doit
plugins and without importing `importlib.metadata` (`pipeline.doit_run`); plain doit keeps
finding its plugins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import FIXTURES, REPO, copy_markdown, run_cli

# A doit plugin package: importing it leaves a mark; its entry points would replace the `run`
# command and the reporter mdvdb names.
PLUGIN = """
from pathlib import Path
Path(__file__).with_name("imported").write_text("yes")
Run = Reporter = None
"""
ENTRY_POINTS = "[doit.COMMAND]\nrun = evil_doit:Run\n\n[doit.REPORTER]\nzero = evil_doit:Reporter\n"


def _plugin(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "evil_doit-1.0.dist-info").mkdir(parents=True)
    (site / "evil_doit.py").write_text(PLUGIN)
    (site / "evil_doit-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: evil-doit\nVersion: 1.0\n"
    )
    (site / "evil_doit-1.0.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def test_ingest_ignores_the_current_folders_doit_settings_and_doit_plugins(tmp_path: Path):
    notes = copy_markdown(FIXTURES / "notes", tmp_path / "notes")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pyproject.toml").write_text("[tool.doit\nbroken = \n")  # not TOML
    (elsewhere / "doit.cfg").write_text("[GLOBAL]\nbackend = json\ndep_file = here.json\n")
    site = _plugin(tmp_path)
    env = {"PYTHONPATH": f"{site}:{REPO}", "PYTHONPROFILEIMPORTTIME": "1"}
    done = run_cli("ingest", "--root", str(notes), cwd=elsewhere, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "4 added" in done.stdout
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "doit.plugin" in loaded  # the log is there
    assert "importlib.metadata" not in loaded and "evil_doit" not in loaded
    assert not (site / "imported").exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["doit.cfg", "pyproject.toml"]
    again = run_cli("status", "--check", "--root", str(notes), cwd=elsewhere)
    assert again.returncode == 0, again.stderr


def test_plain_doit_still_finds_its_plugins(tmp_path: Path):
    """After `import_doit` (doit imported with `importlib.metadata` deferred), doit's own
    plugin lookup reads the real entry points."""
    site = _plugin(tmp_path)
    code = (
        "import sys; import pipeline.tasks\n"
        "assert 'importlib.metadata' not in sys.modules\n"
        "from doit import plugin\n"
        "found = plugin.PluginDict(); found.add_plugins({}, 'COMMAND')\n"
        "print(sorted(found))\n"
        "import importlib.metadata as m; print(m.version('evil-doit'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{site}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["['run']", "1.0"]
