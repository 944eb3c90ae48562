"""The inner loop's scheduling (tests/conftest.py): under xdist the files go out costliest
first, each file's tests kept together and in their order (a module fixture is built once
per worker only if its file stays in one unit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import DEFAULT_FILE_CPU, FILE_CPU, REPO, SAME_WORKER, by_cost, unit_cost


def _pytest_run(
    root: Path, test_file: Path, *options: str, env: dict | None = None, conftest: bool = True
):
    """A pytest run of `test_file` (under `root`) in a subprocess, with this suite's
    configuration and (`conftest`) its conftest, whose hooks some tests here check."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            *options,
            "-c",
            str(REPO / "pyproject.toml"),
            "-p",
            "no:cacheprovider",
            *(["-p", "tests.conftest"] if conftest else []),
            "--rootdir",
            str(root),
            str(test_file),
        ],
        cwd=REPO,
        # not this run's xdist worker variables: the run started here has workers of its own
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_files_go_out_costliest_first_and_whole():
    alone = {f: c for f, c in FILE_CPU.items() if f not in SAME_WORKER}
    costly = max(alone, key=alone.get)
    cheap = min(alone, key=alone.get)
    assert FILE_CPU[cheap] > DEFAULT_FILE_CPU  # a listed file goes before any unlisted one
    order = [
        "tests/test_unlisted.py::test_a",
        f"{cheap}::test_b",
        "tests/test_unlisted.py::test_c",
        f"{costly}::test_d[1]",
        f"{cheap}::test_e",
        f"{costly}::test_d[2]",
        "tests/test_other_unlisted.py::test_f",
    ]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in order]
    by_cost(items)
    assert [item.nodeid for item in items] == [
        f"{costly}::test_d[1]",
        f"{costly}::test_d[2]",
        f"{cheap}::test_b",
        f"{cheap}::test_e",
        "tests/test_unlisted.py::test_a",
        "tests/test_unlisted.py::test_c",
        "tests/test_other_unlisted.py::test_f",
    ]


@pytest.mark.slow  # one more pytest process (~1 CPU-s)
def test_a_hypothesis_failure_still_fails_the_run_without_its_plugin(tmp_path: Path):
    """pyproject's addopts turn hypothesis's pytest plugin off (its end-of-run summary imported
    all of hypothesis); `@given` itself still raises the falsifying example."""
    (tmp_path / "test_given.py").write_text(
        "def test_small():\n"
        "    from hypothesis import given, strategies as st\n\n"
        "    @given(st.integers())\n"
        "    def check(x):\n"
        "        assert x < 10\n\n"
        "    check()\n"
    )
    done = _pytest_run(tmp_path, tmp_path / "test_given.py", conftest=False)
    assert "no:hypothesispytest" in (REPO / "pyproject.toml").read_text()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "x=10" in done.stdout, done.stdout  # shrunk, shown


def test_a_shared_folder_written_by_a_test_fails_at_teardown(tmp_path: Path):
    """`read_only_folder`: the module fixtures that hand one built folder to every test
    (no copy per test) rely on it to catch a test that writes into it."""
    from tests.conftest import read_only_folder

    (tmp_path / "page.md").write_text("# Page\n")
    with read_only_folder(tmp_path):
        (tmp_path / "page.md").read_text()  # reading is fine
    written = pytest.raises(AssertionError, match="wrote into the shared folder")
    with written, read_only_folder(tmp_path):
        (tmp_path / ".markdownvdb.state").mkdir()
        (tmp_path / ".markdownvdb.state" / "cache").write_bytes(b"x")


def test_files_of_one_shared_cost_go_to_one_worker():
    """SAME_WORKER: the files that load MCP's SDK, MiniLM or scikit-learn in the test process
    are one work unit of the scheduler (one worker pays the load once); others stay apart."""
    from tests.conftest import SAME_WORKER, pytest_xdist_make_scheduler

    class Config:
        option = SimpleNamespace(loadscopereorder=True, tx=["popen"] * 2, dist="loadfile")

        def getvalue(self, name):
            return getattr(self.option, name)

        def getoption(self, name, default=None):
            return getattr(self.option, name, default)

    scheduler = pytest_xdist_make_scheduler(Config(), None)
    units = {scheduler._split_scope(f"{path}::test_x[a]") for path in SAME_WORKER}
    assert units == {"mcp", "minilm", "sklearn"}
    minilm = {path for path, unit in SAME_WORKER.items() if unit == "minilm"}
    assert {"tests/test_minilm.py", "tests/test_warm_queries.py"} <= minilm
    assert scheduler._split_scope("tests/test_cli.py::test_x") == "tests/test_cli.py"
    assert Config.option.loadscopereorder is False  # units go out in the collection's order


def test_a_shared_unit_goes_out_at_its_summed_cost_with_its_files_together():
    """The files of one SAME_WORKER unit are one unit of work: it is placed by the sum of
    their costs, and their tests stay together, each file's in order."""
    minilm = sorted(f for f, unit in SAME_WORKER.items() if unit == "minilm")
    total = sum(FILE_CPU.get(f, DEFAULT_FILE_CPU) for f in minilm)
    assert unit_cost(minilm[-1]) == unit_cost(minilm[0]) == pytest.approx(total)
    assert total > max(FILE_CPU.values())
    alone = next(f for f in FILE_CPU if f not in SAME_WORKER)
    order = [f"{alone}::test_a", f"{minilm[1]}::test_b", f"{minilm[0]}::test_c"]
    order += [f"{minilm[1]}::test_d"]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in order]
    by_cost(items)
    assert [item.nodeid for item in items] == [*order[1:], order[0]]


OLD_RUNS_GONE = """
import time


def test_old_runs_go_while_this_one_runs(tmp_path):
    root = tmp_path.parents[1]  # ROOT/pytest-6/test_old_runs_go_while_this_one0
    deadline = time.monotonic() + 30
    while {p.name for p in root.glob("pytest-[023]")} and time.monotonic() < deadline:
        time.sleep(0.01)
    names = sorted(p.name for p in root.glob("pytest-[0-9]*"))
    assert names == ["pytest-1", "pytest-4", "pytest-5", "pytest-6"], names
"""


def test_old_temp_folders_go_while_the_run_runs(tmp_path: Path):
    """pytest's removal of the temp folders of older runs (beyond the last three) starts as the
    run starts (tests/conftest.py), not after its last test: a test sees them gone, except a
    folder whose lock is fresh (another run still in it), which stays after the run too."""
    import getpass

    runs = tmp_path / f"pytest-of-{getpass.getuser()}"
    for n in range(6):
        (runs / f"pytest-{n}" / "test_x0").mkdir(parents=True)
        (runs / f"pytest-{n}" / "test_x0" / "file").write_text("x")
        stale = 1_000_000_000 + n  # (2001): older than pytest's lock timeout
        os.utime(runs / f"pytest-{n}", (stale, stale))
    (runs / "pytest-1" / ".lock").write_text("")  # fresh: a run in progress
    (tmp_path / "test_old_runs.py").write_text(OLD_RUNS_GONE)
    done = _pytest_run(
        tmp_path, tmp_path / "test_old_runs.py", env={"PYTEST_DEBUG_TEMPROOT": str(tmp_path)}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in runs.glob("pytest-[0-9]*")) == [
        "pytest-1",
        "pytest-4",
        "pytest-5",
        "pytest-6",
    ]
