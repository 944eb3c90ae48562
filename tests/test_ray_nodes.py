"""`mdvdb ingest --executor ray:ADDRESS` on a cluster of several nodes (issue 36): a head that
runs nothing and two worker nodes of one CPU each, started on this machine with
`ray.cluster_utils.Cluster` (each node its own raylet and resources). An ingest spread over
both nodes builds the local index byte for byte, and a pool asked for more actors than the
cluster has CPUs runs with those that start."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_parallel_ingest import _cache_rows, _index_parts
from tests.test_parallel_ingest import _project as _mixed_project

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed", allow_module_level=True)

pytestmark = pytest.mark.slow

QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    "MDVDB_CLUSTERING_ENABLED": "false",  # clustering records when it ran
    # Both sides say it: a local Ray run (tests/test_ray.py) leaves ~/.ray/auth_token, and a
    # driver that finds one turns token auth on against this cluster, started without it.
    "RAY_AUTH_MODE": "disabled",
}


class Nodes:
    def __init__(self, proc: subprocess.Popen, address: str, temp: str) -> None:
        self.proc, self.address, self.temp = proc, address, temp

    def kill(self, node: int) -> None:
        """Worker node `node`'s raylet and workers SIGKILLed (`Cluster.remove_node`)."""
        self.proc.stdin.write(f"kill {node}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "killed"


@pytest.fixture(scope="module")
def nodes():
    with cluster_of(cpus=1) as running:
        yield running


@contextmanager
def cluster_of(cpus: int):
    """A head with no CPU and two worker nodes of `cpus` CPUs each, in their own process
    (bench/ray_ingest.py's, with this module's environment)."""
    from bench.ray_ingest import start_cluster, stop_cluster

    try:
        proc, address, _, temp = start_cluster(2, cpus, 100_000_000, QUIET)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield Nodes(proc, address, temp)
    finally:
        stop_cluster(proc, temp)


def _ingest(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("ingest", "--json", "--root", str(root), *args, env={**QUIET, **(env or {})})


def _ok(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _verify(root: Path) -> None:
    done = run_cli("status", "--verify", "--root", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify:   ok" in done.stdout


def test_an_ingest_over_two_nodes_builds_the_local_index(nodes: Nodes, tmp_path: Path):
    """Every kind of file, six batches: one actor on each worker node (the head offers no
    CPU), the files shipped as bytes; the index and caches are the one-process build's."""
    local = _mixed_project(tmp_path / "local", 300)
    spread = Path(shutil.copytree(local, tmp_path / "spread"))
    one = _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    ray = _ok(_ingest(spread, "--executor", f"ray:{nodes.address}"))
    actors = ray["executor_actors"]
    assert ray["workers"] == len(actors) == 2 and ray["errors"] == one["errors"]
    assert len({a["node_id"] for a in actors}) == 2, actors  # two nodes, one machine
    assert all(a["batches"] >= 1 for a in actors), actors
    assert _index_parts(spread / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    assert _cache_rows(spread / ".markdownvdb.state") == _cache_rows(local / ".markdownvdb.state")
    _verify(spread)
    # Three actors asked of two CPUs: the run goes on with the two that start (it waited for
    # the third forever before), and an edit of every page builds the local index again.
    for page in sorted(local.rglob("page-*.md")):
        page.write_bytes(page.read_bytes() + b"\n## Added\n\nkayak paddles\n")
        twin = spread / page.relative_to(local)
        twin.write_bytes(page.read_bytes())
        os.utime(twin, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns))  # indexed too
    _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    more = _ok(_ingest(spread, "--executor", f"ray:{nodes.address}", env={"MDVDB_WORKERS": "3"}))
    assert more["workers"] == len(more["executor_actors"]) == 2, more["executor_actors"]
    assert _index_parts(spread / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    _verify(spread)


def test_a_worker_node_killed_mid_ingest_leaves_a_clean_retry(nodes: Nodes, tmp_path: Path):
    """Both actors hold a batch when worker node 0 dies (its raylet and workers SIGKILLed):
    the run either finishes on the node left or stops with one line, the previous index
    intact and the folder free; the next run, on the one node left, builds the local index
    byte for byte. (The module's cluster, which loses a node: this test comes last.)"""
    from tests.test_ray import HOLD, Head, _ingest_in_background, _workers_holding_a_batch

    local = _mixed_project(tmp_path / "local", 300)
    later = sorted(local.rglob("page-*.md"))[100:]
    held = {page.relative_to(local): page.read_bytes() for page in later}
    for page in later:
        page.unlink()
    _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))  # the previous index: 200 files fewer
    on_ray = Path(shutil.copytree(local, tmp_path / "ray"))
    before = _index_parts(on_ray / ".markdownvdb.index")
    for name, data in held.items():
        (local / name).write_bytes(data)
        shutil.copy2(local / name, on_ray / name)  # the same bytes and times
    _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    go = tmp_path / "go"
    head = Head(nodes.address, nodes.temp)
    run = _ingest_in_background(
        on_ray, "--executor", f"ray:{nodes.address}", env={**QUIET, HOLD: str(go)}
    )
    try:
        deadline = time.monotonic() + 180
        while len(_workers_holding_a_batch(head)) < 2:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "two actors never held a batch"
            time.sleep(0.2)
        nodes.kill(0)
        go.touch()
        out, err = run.communicate(timeout=600)
    finally:
        go.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    if run.returncode == 0:
        parts = _index_parts(on_ray / ".markdownvdb.index")
        assert parts == _index_parts(local / ".markdownvdb.index")
    else:
        assert run.returncode == 1, err
        lines = [line for line in err.splitlines() if line.startswith("mdvdb:")]
        assert len(lines) == 1 and "previous index is intact" in lines[0], err[-3000:]
        assert _index_parts(on_ray / ".markdownvdb.index") == before
    again = _ok(_ingest(on_ray, "--executor", f"ray:{nodes.address}"))
    assert len({a["node_id"] for a in again["executor_actors"]}) <= 1
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    _verify(on_ray)
