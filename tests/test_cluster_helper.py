"""A big first build's clustering fit runs in a helper process (`pipeline.cluster_helper`)
while the parent plans and packs, from document vectors the workers summed. Real `mdvdb
ingest` processes: the helped build equals the one-process build table for table (the
clustering's time of building aside), the parent never imports scikit-learn, and a helper
that dies is one line, publishes nothing, and the next run clusters in full."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cluster.topics import NUMPY_BELOW
from pipeline.cluster_helper import MIN_FILES
from pipeline.workers import POOL_MIN_FILES
from tests.conftest import REPO
from tests.test_parallel_ingest import _project

# The real CLI; as it exits (`os._exit` after an ingest, `sys.exit` otherwise), whether this
# (parent) process imported scikit-learn. argv[1]: "die" makes the helper's fit end its
# process.
_CLI = r"""
import os, sys
if sys.argv[1] == "die":
    import pipeline.cluster.topics
    pipeline.cluster.topics.choose_and_fit = lambda *args: os._exit(3)
import mdvdb.cli
def said(exit):  # an ingest that ends by `os._exit` reports first
    def report(*args):
        print("parent imported sklearn:", "sklearn" in sys.modules, file=sys.stderr)
        return exit(*args)
    return report
mdvdb.cli.exit_now = said(mdvdb.cli.exit_now)
sys.exit = said(sys.exit)
sys.argv = ["mdvdb", *sys.argv[2:]]
mdvdb.cli.main()
"""


def _ingest(root: Path, workers: str, how: str = "plain") -> subprocess.CompletedProcess:
    env = {**os.environ, "MDVDB_WORKERS": workers}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        [sys.executable, "-c", _CLI, how, "ingest", "--json", "--root", str(root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _tables(index: Path) -> dict:
    """Every table of the index and its metadata, the clustering's time of building out."""
    from kernel import index_format

    read = index_format.read_index(index)
    out = {}
    for name, table in read.tables.items():
        meta = dict(table.schema.metadata or {})
        for key, value in meta.items():
            if b"built_at" in value:
                decoded = json.loads(value)
                decoded.pop("built_at")
                meta[key] = decoded
        out[name] = (table.replace_schema_metadata(None).to_pydict(), meta)
    return out


def test_the_helper_runs_only_where_the_workers_and_scikit_learn_would():
    assert max(POOL_MIN_FILES, NUMPY_BELOW) <= MIN_FILES


@pytest.mark.slow  # builds of 1,400 files
def test_a_helped_build_equals_the_one_process_build_and_survives_a_dead_helper(
    tmp_path: Path,
):
    serial = _project(tmp_path / "serial", MIN_FILES + 400)
    helped = Path(shutil.copytree(serial, tmp_path / "helped"))
    broken = Path(shutil.copytree(serial, tmp_path / "broken"))

    one = _ingest(serial, "1")
    assert one.returncode == 0, one.stderr
    assert "parent imported sklearn: True" in one.stderr  # one process: it clusters itself
    two = _ingest(helped, "2")
    assert two.returncode == 0, two.stderr
    assert "parent imported sklearn: False" in two.stderr  # the helper did
    reports = [json.loads(one.stdout), json.loads(two.stdout)]
    assert [r["workers"] for r in reports] == [1, 2]
    expected = _tables(serial / ".markdownvdb.index")
    assert expected["clusters"][0]["cluster_id"]  # clusters were made
    assert _tables(helped / ".markdownvdb.index") == expected

    # The helper dies in its fit: one line, exit 1, no index; the next run clusters in full.
    dead = _ingest(broken, "2", "die")
    assert dead.returncode == 1
    lines = [line for line in dead.stderr.splitlines() if not line.startswith("parent ")]
    assert len(lines) == 1 and "clustering helper process died" in lines[0], dead.stderr
    assert "Traceback" not in dead.stderr
    assert not (broken / ".markdownvdb.index").exists()
    again = _ingest(broken, "2")
    assert again.returncode == 0, again.stderr
    assert _tables(broken / ".markdownvdb.index") == expected


# A parent with a helper and, forked after it, a process holding the parent's end of the
# helper's pipe (as the ingest workers do); prints both pids, then waits to be killed.
_KILLED = r"""
import multiprocessing, sys, time
from pipeline.cluster_helper import ClusterHelper
helper = ClusterHelper.start()
worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(120,))
worker.start()
print(helper._process.pid, worker.pid, flush=True)
time.sleep(120)
"""


def test_a_helper_dies_with_its_parent_even_by_sigkill():
    """The helper holds the parent's descriptors (the writer lock's among them): a parent
    killed outright must not leave it waiting, or the next ingest would wait for the lock."""
    import signal

    parent = subprocess.Popen(
        [sys.executable, "-c", _KILLED], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    helper, worker = map(int, parent.stdout.readline().split())  # type: ignore[union-attr]
    os.kill(helper, 0)  # alive
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    try:
        _wait_gone(helper)
    finally:
        os.kill(worker, signal.SIGKILL)


def _wait_gone(helper: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{helper}/stat") as stat:  # a zombie waits for init to reap it
            if stat.read().split(") ", 1)[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        raise AssertionError("the helper outlived its parent")
