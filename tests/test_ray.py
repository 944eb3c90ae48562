"""`mdvdb ingest --executor ray[:ADDRESS]` (pipeline/ray_executor.py): the per-file work on Ray
actors builds exactly the local index, a killed worker is retried or stops the run with one
line, and a missing extra or an unreachable cluster is one line with the index untouched.

One Ray head per module (`ray start --head --block`, stopped by its process group) serves the
tests that pass an address; the tldr test starts a cluster for its run, as a user without one
does. Every run is a real `mdvdb` subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, unpack_corpus
from tests.test_parallel_ingest import _cache_rows, _index_parts
from tests.test_parallel_ingest import _project as _mixed_project
from tests.test_shards import SHARDED, TLDR_QUERIES, _search

# Not importorskip: importing ray costs ~0.8 CPU-s in every process that collects this file
# (each xdist worker, inner loop or not); the tests run it in subprocesses anyway.
if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed", allow_module_level=True)

QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    # Clustering records when it ran: everything else of two builds is compared.
    "MDVDB_CLUSTERING_ENABLED": "false",
}
EXIT_HOOK = "MDVDB_TEST_RAY_EXIT_AT_BATCH"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head():
    """A one-node Ray cluster for the module: its address."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="mdvdb-ray-", dir="/tmp")  # short: Ray's socket paths
    ray_bin = Path(sys.executable).parent / "ray"
    log = open(os.path.join(temp, "head.log"), "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
            "--object-store-memory=200000000",
        ],
        env={**os.environ, **QUIET},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a loaded 2-core machine: ~30 s seen
    while "Ray runtime started" not in Path(log.name).read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("ray start --head did not come up: " + Path(log.name).read_text())
        time.sleep(0.5)
    try:
        yield address
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the group of this `ray start` only
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _ingest(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("ingest", "--json", "--root", str(root), *args, env={**QUIET, **(env or {})})


def _ok(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def _verify(root: Path) -> None:
    done = run_cli("status", "--verify", "--root", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify:   ok" in done.stdout


@pytest.mark.slow
def test_tldr_subset_on_ray_ranks_and_caches_as_local_and_sharded(
    corpora_dir: Path, tmp_path: Path
) -> None:
    """1,600 tldr pages built locally, on a Ray cluster started for the run (files read by
    path), and as four shards: the same top 10 for lexical and hybrid queries; the Ray
    build's caches and index equal the local build's."""
    pages = unpack_corpus(corpora_dir, "tldr") / "pages"
    files = sorted(pages.rglob("*.md"))
    step = len(files) / 1600
    picked = [files[int(i * step)] for i in range(1600)]
    local, on_ray, four = tmp_path / "local", tmp_path / "ray", tmp_path / "four"
    for target in (local, on_ray, four):
        for source in picked:
            dest = target / source.relative_to(pages)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    one = _ok(_ingest(local))
    ray = _ok(_ingest(on_ray, "--executor", "ray"))
    _ok(_ingest(four, env=SHARDED))
    assert ray["files"] == one["files"] == 1600
    assert ray["workers"] >= 1 and ray["chunks_embedded"] == one["chunks_embedded"] > 1600
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    assert _cache_rows(on_ray / ".markdownvdb.state") == _cache_rows(local / ".markdownvdb.state")
    for mode in ("lexical", "hybrid"):
        for query in TLDR_QUERIES:
            expected = _search(local, query, "--mode", mode)
            assert expected["results"], query
            assert _search(on_ray, query, "--mode", mode) == expected, (mode, query)
            assert _search(four, query, "--mode", mode, env=SHARDED) == expected, (mode, query)


@pytest.mark.slow
def test_files_shipped_in_the_task_build_the_local_index(head: str, tmp_path: Path) -> None:
    """On a cluster given by address the files travel as bytes (no shared filesystem
    assumed): the same index and caches as the local pool, incrementally too."""
    local = _mixed_project(tmp_path / "local", 700)  # every kind of file, 6 batches
    on_ray = Path(shutil.copytree(local, tmp_path / "ray"))
    one = _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    ray = _ok(_ingest(on_ray, "--executor", f"ray:{head}"))
    assert ray["workers"] == 2 and ray["errors"] == one["errors"] and one["errors"]
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    assert _cache_rows(on_ray / ".markdownvdb.state") == _cache_rows(local / ".markdownvdb.state")
    page, twin = (root / "d3" / "page-00003.md" for root in (local, on_ray))
    page.write_bytes(page.read_bytes() + b"\n## Added\n\nkayak paddles\n")
    twin.write_bytes(page.read_bytes())  # an edit: only that file goes to the cluster
    os.utime(twin, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns))  # mtimes: indexed
    one = _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    ray = _ok(_ingest(on_ray, env={"MDVDB_EXECUTOR": f"ray:{head}"}))
    assert ray["changed"] == one["changed"] == 1 and ray["workers"] == 1
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")


@pytest.mark.slow
def test_a_worker_killed_mid_ingest_is_retried(head: str, tmp_path: Path) -> None:
    """One actor exits (os._exit) in its 2nd batch: Ray restarts it and retries the batch,
    and the run builds the same index as the local pool."""
    local = _mixed_project(tmp_path / "local", 700)
    on_ray = Path(shutil.copytree(local, tmp_path / "ray"))
    marker = tmp_path / "died"
    _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    ray = _ok(_ingest(on_ray, "--executor", f"ray:{head}", env={EXIT_HOOK: f"2:{marker}"}))
    assert marker.exists(), "no worker was killed"
    assert ray["files"] == 700
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    _verify(on_ray)


@pytest.mark.slow
def test_workers_that_keep_dying_stop_the_run_with_one_line(head: str, tmp_path: Path) -> None:
    """Every actor exits in its first batch, retries included: one line, exit 1, the
    previous index untouched; the next run finishes and verifies."""
    root = _mixed_project(tmp_path / "p", 300)
    _ok(_ingest(root, env={"MDVDB_WORKERS": "1"}))
    before = (root / ".markdownvdb.index").read_bytes()
    for page in sorted(root.glob("d[0-4]/*.md")):
        page.write_bytes(page.read_bytes() + b"\nmore words about canoes\n")
    died = _ingest(root, "--executor", f"ray:{head}", env={EXIT_HOOK: "1"})
    _one_line_error(died, "Ray worker", "previous index is intact")
    assert (root / ".markdownvdb.index").read_bytes() == before
    after = _ok(_ingest(root, "--executor", f"ray:{head}"))
    assert after["published"] and after["workers"] >= 1
    assert (root / ".markdownvdb.index").read_bytes() != before
    _verify(root)
    hits = _search(root, "canoes", "--mode", "lexical")
    assert hits["results"]
    assert all(hit["path"][:2] in {"d0", "d1", "d2", "d3", "d4"} for hit in hits["results"])


@pytest.mark.slow
def test_a_missing_extra_or_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    root = _mixed_project(tmp_path / "p", 40)
    _ok(_ingest(root))
    before = (root / ".markdownvdb.index").read_bytes()
    (root / "d0" / "page-00000.md").write_text("# changed\n\nnew text\n", encoding="utf-8")

    # No ray importable (a package of that name that fails as a missing one does).
    shadow = tmp_path / "no-ray"
    (shadow / "ray").mkdir(parents=True)
    (shadow / "ray" / "__init__.py").write_text("raise ModuleNotFoundError(name='ray')\n")
    missing = _ingest(root, "--executor", "ray", env={"PYTHONPATH": str(shadow)})
    _one_line_error(missing, "pip install 'markdown-vdb[ray]'", "--executor")

    closed = _free_port()
    unreachable = _ingest(root, env={"MDVDB_EXECUTOR": f"ray:127.0.0.1:{closed}"})
    _one_line_error(unreachable, f"127.0.0.1:{closed}", "MDVDB_EXECUTOR", "previous index")

    # A folder's own config does not choose where its files are sent.
    (root / ".markdownvdb").write_text(f"MDVDB_EXECUTOR=ray:127.0.0.1:{closed}\n")
    chosen = _ingest(root)
    _one_line_error(chosen, "a folder does not choose")
    (root / ".markdownvdb").unlink()

    bad = _ingest(root, "--executor", "spark")
    assert bad.returncode == 2 and "--executor" in bad.stderr
    assert bad.stderr.strip().count("\n") == 0
    assert (root / ".markdownvdb.index").read_bytes() == before
