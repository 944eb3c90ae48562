"""What each command loads, as the real process shows it: a no-op ingest imports neither
typer nor NumPy/Arrow (the hook after every save pays the walk, not the imports), and no
command but `--help` imports typer (`mdvdb.cli.parser` reads every argument list)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli

PROBE = """
import sys
sys.argv = ["mdvdb", *sys.argv[1:]]
from mdvdb.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
names = ("typer", "pydantic", "numpy", "pyarrow", "sklearn")
heavy = sorted(m for m in names if m in sys.modules)
print("HEAVY", ",".join(heavy), code, file=sys.stderr)
"""


def _probe(*argv: str) -> tuple[subprocess.CompletedProcess, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=300
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("HEAVY")][-1]
    return done, line


def test_a_noop_imports_no_heavy_library(indexed_notes: Path):
    build_index(indexed_notes)  # the copy's first run publishes (the folder moved)
    done, heavy = _probe("ingest", "--json", "--root", str(indexed_notes))
    assert heavy == "HEAVY  0", done.stderr
    report = json.loads(done.stdout)
    assert (report["published"], report["hashed"]) == (False, 0)


def test_only_help_imports_typer(indexed_notes: Path):
    """The real commands, `-X importtime` listing what they loaded."""
    for argv in (["status"], ["get", "tar.md"], ["search", "tar"], ["ingest", "--help"]):
        done = run_cli(*argv, "--root", str(indexed_notes), env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert done.returncode == 0, done.stderr
        loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
        assert "mdvdb.cli.parser" in loaded  # the log is there
        typer = {m for m in loaded if m.split(".")[0] in ("typer", "click", "pydantic")}
        assert bool(typer) == (argv[-1] == "--help"), argv


@pytest.mark.slow  # without typer: also in tests/test_agents_mcp.py's one session
def test_mcp_over_stdio_starts_without_typer(indexed_notes: Path) -> None:
    """`mdvdb mcp --root DIR` (how clients start it) serves stdio without importing typer; at
    the end of its input it exits 0."""
    done = run_cli(
        "mcp", "--root", str(indexed_notes), input="", env={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "mdvdb.mcp_server" in loaded
    assert not {m for m in loaded if m.split(".")[0] == "typer"}  # (the SDK imports click)
