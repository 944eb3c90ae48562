"""`mdvdb ingest --executor ray[:ADDRESS]` (pipeline/ray_executor.py): the per-file work on Ray
actors, which hold every local model, builds exactly the local index; a worker process killed
from outside while it holds a batch is retried, or stops the run with one line; a missing
extra or an unreachable cluster is one line with the index untouched.

One Ray head per module (`ray start --head --block`, stopped by its process group) serves the
tests that pass an address; the tldr test starts a cluster for its run, as a user without one
does. Every run is a real `mdvdb` subprocess; workers are found by their process title
(`ray::Preparer.prepare` while a batch runs) among the children of the head's raylet."""

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
from dataclasses import dataclass
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
# Each batch waits in its actor until this file exists (pipeline/ray_executor.py HOLD): a
# test kills a worker that holds a batch, then lets the others go.
HOLD = "MDVDB_TEST_RAY_HOLD"
MINILM = {"MDVDB_EMBEDDING_MODEL": "all-minilm-l6-v2", "MDVDB_EMBEDDING_BATCH_SIZE": "16"}


@dataclass(frozen=True)
class Head:
    address: str
    temp: str  # the cluster's --temp-dir: names its raylet among this machine's processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head():
    """A one-node Ray cluster for the module."""
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
        yield Head(address, temp)
    finally:
        # `ray start` alone: it drains its node and stops the processes it started (~2 s).
        # Signalled with it, the raylet dies first and the drain waits its full 30 s.
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
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


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _workers_holding_a_batch(head: Head) -> list[int]:
    """Pids of the head's worker processes running `Preparer.prepare` now (Ray sets the
    process title of an actor's worker to the method it runs)."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    raylets = {p for p in pids if "raylet/raylet" in _cmdline(p) and head.temp in _cmdline(p)}
    assert raylets, "the head's raylet is not running"
    return [
        p for p in pids if _parent(p) in raylets and _cmdline(p).startswith("ray::Preparer.prepare")
    ]


def _wait_for_worker(head: Head, run: subprocess.Popen, exclude: set[int]) -> int | None:
    """A worker holding a batch (not one already killed), once the run has one; None when
    the run ended first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [p for p in _workers_holding_a_batch(head) if p not in exclude]
        if found:
            return found[0]
        if run.poll() is not None:
            return None
        time.sleep(0.1)
    pytest.fail("no Ray worker took a batch within 120 s")


def _kill(pid: int) -> None:
    """SIGKILL from outside, and wait until the process is gone (or a zombie)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)


def _ingest_in_background(root: Path, *args: str, env: dict) -> subprocess.Popen:
    full = {**os.environ, **QUIET, **env}
    full.pop("FORCE_COLOR", None)
    mdvdb = Path(sys.executable).parent / "mdvdb"
    return subprocess.Popen(
        [str(mdvdb), "ingest", "--json", "--root", str(root), *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _small_project(root: Path) -> Path:
    """Every kind of file (40), and 120 short pages: two batches, so two actors, and few
    enough chunks for the transformer encoder to embed in seconds."""
    _mixed_project(root, 40)
    for i in range(120):
        page = root / "notes" / f"note-{i:03d}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"# Note {i}\n\nPaddles and canoes, note {i}.\n\n## More\n\nRiver {i}.\n")
    return root


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
    actors = ray["executor_actors"]
    assert len(actors) == ray["workers"] and one["executor_actors"] == []
    # WordLlama, a table lookup: CPUs only, whatever the cluster has.
    assert {(a["model"], a["num_gpus"], a["device"]) for a in actors} == {
        ("wordllama-l2-supercat", 0, "cpu")
    }
    assert sum(a["texts"] for a in actors) >= ray["chunks_embedded"]  # a text in 2 batches
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
    ray = _ok(_ingest(on_ray, "--executor", f"ray:{head.address}"))
    assert ray["workers"] == 2 and ray["errors"] == one["errors"] and one["errors"]
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    assert _cache_rows(on_ray / ".markdownvdb.state") == _cache_rows(local / ".markdownvdb.state")
    page, twin = (root / "d3" / "page-00003.md" for root in (local, on_ray))
    page.write_bytes(page.read_bytes() + b"\n## Added\n\nkayak paddles\n")
    twin.write_bytes(page.read_bytes())  # an edit: only that file goes to the cluster
    os.utime(twin, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns))  # mtimes: indexed
    one = _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    ray = _ok(_ingest(on_ray, env={"MDVDB_EXECUTOR": f"ray:{head.address}"}))
    assert ray["changed"] == one["changed"] == 1 and ray["workers"] == 1
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")


@pytest.mark.slow
def test_the_encoder_embeds_in_the_actors_and_builds_the_local_index(
    head: Head, tmp_path: Path
) -> None:
    """all-MiniLM-L6-v2: the actors embed (each loads the encoder once, asks for no GPU on
    this CPU-only cluster, and runs MDVDB_EMBEDDING_BATCH_SIZE texts a call); the driver
    embeds nothing, and the index and caches are the local build's, where the embed stage
    embeds in the one process."""
    local = _small_project(tmp_path / "local")
    on_ray = Path(shutil.copytree(local, tmp_path / "ray"))
    one = _ok(_ingest(local, env={"MDVDB_WORKERS": "1", **MINILM}))
    ray = _ok(_ingest(on_ray, "--executor", f"ray:{head.address}", env=MINILM))
    assert ray["chunks_embedded"] == one["chunks_embedded"] > 160
    actors = ray["executor_actors"]
    assert ray["workers"] == len(actors) == 2
    assert len({a["pid"] for a in actors}) == 2 and os.getpid() not in {a["pid"] for a in actors}
    for actor in actors:
        assert actor["model"] == "all-minilm-l6-v2"  # the pinned weights: no folder digest
        assert (actor["num_gpus"], actor["gpu_ids"], actor["device"]) == (0, [], "cpu")
        assert actor["batch_size"] == 16 and actor["batches"] == 1 and actor["texts"] > 0
    # Every vector came from an actor: the embed stage found nothing left to embed.
    assert sum(a["texts"] for a in actors) == ray["chunks_embedded"]
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    assert _cache_rows(on_ray / ".markdownvdb.state") == _cache_rows(local / ".markdownvdb.state")


@pytest.mark.slow
def test_a_worker_killed_mid_ingest_is_retried(head: Head, tmp_path: Path) -> None:
    """A worker process holding a batch is SIGKILLed from outside: Ray restarts the actor
    (a new process) and retries the batch, and the run builds the same index as the local
    pool, which verifies."""
    local = _mixed_project(tmp_path / "local", 300)
    on_ray = Path(shutil.copytree(local, tmp_path / "ray"))
    go = tmp_path / "go"
    _ok(_ingest(local, env={"MDVDB_WORKERS": "1"}))
    run = _ingest_in_background(on_ray, "--executor", f"ray:{head.address}", env={HOLD: str(go)})
    try:
        killed = _wait_for_worker(head, run, set())
        assert killed is not None, run.communicate()
        _kill(killed)
        go.touch()  # every batch, the retried one included, may now run
        out, err = run.communicate(timeout=300)
    finally:
        go.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    ray = json.loads(out)
    assert ray["files"] == 300 and ray["workers"] == 2
    assert killed not in {a["pid"] for a in ray["executor_actors"]}  # restarted: a new one
    assert _index_parts(on_ray / ".markdownvdb.index") == _index_parts(local / ".markdownvdb.index")
    _verify(on_ray)


@pytest.mark.slow
def test_workers_that_keep_dying_stop_the_run_with_one_line(head: Head, tmp_path: Path) -> None:
    """The one actor's process is SIGKILLed each time it holds a batch, restarts
    included: one line, exit 1, the previous index untouched; the next run finishes and
    verifies."""
    root = _mixed_project(tmp_path / "p", 300)
    _ok(_ingest(root, env={"MDVDB_WORKERS": "1"}))
    before = (root / ".markdownvdb.index").read_bytes()
    for page in sorted(root.glob("d[0-4]/*.md")):
        page.write_bytes(page.read_bytes() + b"\nmore words about canoes\n")
    never = tmp_path / "never"  # no batch is let through: every incarnation holds one
    env = {HOLD: str(never), "MDVDB_WORKERS": "1"}
    run = _ingest_in_background(root, "--executor", f"ray:{head.address}", env=env)
    killed: set[int] = set()
    try:
        while len(killed) <= 5:
            pid = _wait_for_worker(head, run, killed)
            if pid is None:
                break  # the run gave up after the last kill
            killed.add(pid)
            _kill(pid)
        out, err = run.communicate(timeout=120)
    finally:
        never.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    assert len(killed) == 3  # the actor, and its two restarts (RETRIES)
    _one_line_error(
        subprocess.CompletedProcess(run.args, run.returncode, out, err),
        "a Ray worker failed",
        "after 2 retries",
        "previous index is intact",
    )
    assert (root / ".markdownvdb.index").read_bytes() == before
    after = _ok(_ingest(root, "--executor", f"ray:{head.address}"))
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
