"""`mdvdb ingest` parses its own arguments: a no-op run imports neither typer nor NumPy/Arrow
(the hook after every save pays the walk, not the imports), and prints what typer's path does."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mdvdb.cli.ingest import parse
from tests.conftest import build_index, run_cli

PROBE = """
import sys
sys.argv = ["mdvdb", *sys.argv[1:]]
import mdvdb.cli
from mdvdb.cli import main
mdvdb.cli.exit_now = sys.exit  # a one-shot search ends in os._exit: this probe reports after it
try:
    main()
except SystemExit as exc:
    code = exc.code
names = ("typer", "pydantic", "numpy", "pyarrow", "sklearn", "cloudpickle")
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
    assert heavy == "HEAVY cloudpickle 0", done.stderr  # (doit's own import)
    report = json.loads(done.stdout)
    assert (report["published"], report["hashed"]) == (False, 0)


def test_help_and_unknown_options_go_to_typer(indexed_notes: Path):
    assert parse(["--help"]) is None and parse(["--bogus"]) is None
    assert parse(["--root"]) is None and parse(["--root", "a", "--root", "b"]) is None
    bad = run_cli("ingest", "--bogus", "--root", str(indexed_notes))
    assert bad.returncode == 2 and "No such option: --bogus" in bad.stderr
    assert run_cli("ingest", "--help").returncode == 0


ARGVS = [
    ["-q"],
    ["--json", "tar.md"],
    ["--full", "--quiet"],
    ["--no-wait", "--", "tar.md"],
    ["missing.md"],
    ["--if-present", "--json"],
]


def test_the_two_parsers_read_the_same_arguments():
    """Both paths end in one `run_ingest` call, so equal arguments print equal bytes: every
    form below, in-process (the inner loop's cover for the end-to-end cases that are `slow`)."""
    import typer.main

    from mdvdb.cli import COMMAND_MODULES
    from mdvdb.cli.app import app
    from mdvdb.cli.ingest import FLAGS

    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(app)
    command = typer.main.get_command(app).commands["ingest"]  # type: ignore[attr-defined]
    forms = [*ARGVS, ["--root=r", "a.md", "b.md"], ["--root", "r", "-q", "--", "--full"], []]
    defaults = {param.name: param.default for param in command.params}
    defaults.update(paths=[], root=None)  # as `core.ingest` hands them to `run_ingest`
    assert set(FLAGS.values()) <= set(defaults)
    for argv in forms:
        by_hand = parse(argv)
        assert by_hand is not None, argv
        by_typer = dict(command.make_context("ingest", list(argv)).params)
        by_typer["paths"] = list(by_typer["paths"] or [])
        by_typer["root"] = None if by_typer["root"] is None else str(by_typer["root"])
        assert {**defaults, **by_hand} == by_typer, argv


# Three forms end to end in the inner loop (0.7-1.7 CPU-s each); the others in CI, and all of
# them in-process above.
@pytest.mark.parametrize(
    "argv",
    [
        a if a[0] in ("-q", "--json", "missing.md") else pytest.param(a, marks=pytest.mark.slow)
        for a in ARGVS
    ],
)
def test_the_two_parsers_print_the_same(indexed_notes: Path, argv: list[str]):
    from typer.testing import CliRunner

    from mdvdb.cli import COMMAND_MODULES
    from mdvdb.cli.app import app

    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(app)
    root = str(indexed_notes)
    build_index(indexed_notes)  # the copy's own first run: both parsers see a settled folder
    fast = run_cli("ingest", *argv, "--root", root, cwd=indexed_notes)
    assert parse([*argv, "--root", root]) is not None
    import os

    here = os.getcwd()
    os.chdir(indexed_notes)
    try:
        slow = CliRunner().invoke(app, ["ingest", *argv, "--root", root])
    finally:
        os.chdir(here)

    def same(text: str) -> str:  # timings differ from run to run
        text = re.sub(r'"seconds": [0-9.]+', "", text)
        text = re.sub(r'"(stage_seconds|stage_cpu_seconds)": \{[^}]*\}', "", text)
        text = re.sub(r'"(cpu_seconds|cpu_per_wall|chunks_per_second)": [0-9.]+', "", text)
        return re.sub(r"[0-9.]+ s$", "", text, flags=re.M)

    assert fast.returncode == slow.exit_code
    assert same(fast.stdout) == same(slow.stdout)
    assert same(fast.stderr) == same(slow.stderr)
