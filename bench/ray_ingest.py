"""Ingest on a multi-node Ray cluster: the actor pool of pipeline/ray_executor.py against a
Ray Data pipeline doing the same work (issue 36 item 3), per number of worker nodes.

    python bench/ray_ingest.py [--files 20000] [--nodes 1,2,3] [--rounds 2] [--json]
    python bench/ray_ingest.py --executors pool --nodes 1,2,3     # the chosen executor only

`data` needs Ray Data (`pip install 'ray[data]'`); docs/scale-out.md, "Ingest: actor pool
against Ray Data (issue 36 item 3)", has the figures and the decision.

The cluster is built on this machine with `ray.cluster_utils.Cluster`, as
tests/test_ray_nodes.py does: a head that offers no CPU and N worker nodes of one CPU each
(each node its own raylet and object store), in a process of its own; its start-up (`ray
start` of every node until all are registered) is timed apart. The corpus is the first
`--files` tldr pages of ../shared/corpora (the 7,425 English ones, `pages/` sorted by path,
then the translations, `pages.ar/` on), copied fresh for every run and ingested from nothing
with `mdvdb ingest --json --executor ray:ADDRESS` (the files shipped as bytes, the default
with an address; clustering off: it records when it ran, so two builds differ there, and it
is the driver's work after either executor's):

- `pool`: the executor as it is, a pool of actors built by hand (one per CPU, each holding
  the model), fed the batches of 128 (path, sha) pairs, two in flight per actor;
- `data`: the same ingest with `pipeline.ray_executor.prepare` replaced, in the driver, by
  `data_prepare` below: `ray.data.from_items` of the same batches (one row each, one block
  each), `map_batches` over an actor pool (`ActorPoolStrategy`, the pool's size and
  resources from `plan_pool`: GPUs when the cluster has them) whose class loads the model
  once and runs the same per-batch function (`Preparer.prepare`: `prepare_batch` and, for
  the encoder, `MDVDB_EMBEDDING_BATCH_SIZE` texts a call), the results gathered back at the
  driver in order (`preserve_order`). Everything else is the same run: the driver keeps
  doit's stages, the SHA-256 caches, the writer lock and the pack.

Per node count, after `--warmup` untimed runs of each (the cluster's first worker processes,
the page cache), the executors alternate (pool, data, data, pool, ...), `--rounds` each;
medians. `ray_start_s`: Ray's start-up inside the run, connecting to the cluster until every
actor holds its model (`executor_start_seconds`; for `data`, until the last actor's
constructor returned, stamped by the actor on this machine's clock); `work_s` is the run
without it, `chunks_per_s` the chunks cut over `work_s`, `wall_chunks_per_s` over the whole
run. `local`: the same runs without Ray, first (pipeline/workers.py, a process per core): every
run's index (the footer's time of writing aside) and caches are compared with its build,
byte for byte (`same_index`); the bench fails if one differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, corpus, print_table  # noqa: E402

QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    # A local Ray run leaves ~/.ray/auth_token, and a driver that finds one turns token auth
    # on against this cluster, started without it (tests/test_ray_nodes.py).
    "RAY_AUTH_MODE": "disabled",
    # Clustering records when it ran, so two builds of one folder differ there; it is the
    # driver's work after the executor's, the same whichever executor ran (off, as in
    # tests/test_ray_nodes.py).
    "MDVDB_CLUSTERING_ENABLED": "false",
}
STORE_BYTES = 300_000_000  # each node's object store

# The cluster, in its own process: prints its address, and stops when its stdin closes;
# a line "kill N" on its stdin makes worker node N die at once (tests/test_ray_nodes.py).
CLUSTER = """
import os, sys
from ray.cluster_utils import Cluster
temp, count, cpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = {"object_store_memory": int(sys.argv[4])}
os.makedirs("/tmp/ray", exist_ok=True)  # Cluster records its address there
cluster = Cluster(
    initialize_head=True,
    head_node_args={"num_cpus": 0, "temp_dir": temp, "include_dashboard": False, **store},
)
nodes = [cluster.add_node(num_cpus=cpus, **store) for _ in range(count)]
cluster.wait_for_nodes()
print(cluster.address, flush=True)
for line in sys.stdin:
    if line.startswith("kill "):
        cluster.remove_node(nodes[int(line.split()[1])], allow_graceful=False)
        print("killed", flush=True)
cluster.shutdown()
"""


def start_cluster(
    nodes: int, cpus: int = 1, store: int = STORE_BYTES, env: dict | None = None
) -> tuple[subprocess.Popen, str, float, str]:
    """A head (no CPU) and `nodes` worker nodes of `cpus` CPUs: the process, the address,
    the seconds until every node was registered, its temp folder. RuntimeError, with the
    cluster's log, when it does not start."""
    temp = tempfile.mkdtemp(prefix="mdvdb-rb-", dir="/tmp")  # short: Ray's socket paths
    log = open(os.path.join(temp, "cluster.log"), "w")  # noqa: SIM115 - the process holds it
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLUSTER, temp, str(nodes), str(cpus), str(store)],
        env={**os.environ, **QUIET, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    address = proc.stdout.readline().strip()  # a loaded 2-core machine: ~30 s seen
    seconds = time.perf_counter() - started
    if not address:
        proc.kill()
        raise RuntimeError("the cluster did not start: " + Path(log.name).read_text()[-2000:])
    return proc, address, seconds, temp


def stop_cluster(proc: subprocess.Popen, temp: str) -> None:
    proc.stdin.close()  # the script shuts its nodes down
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    shutil.rmtree(temp, ignore_errors=True)


def tldr_subset(files: int) -> Path:
    """The first `files` tldr pages, hard-linked once under WORK: the English pages
    (`pages/`, sorted by path), then the translations (`pages.ar/`, `pages.bg/`, ...)."""
    source = corpus("tldr")
    target = WORK / f"ray-ingest-tldr-{files}"
    folders = sorted(source.glob("pages*"), key=lambda p: (p.name != "pages", p.name))
    pages = [page for folder in folders for page in sorted(folder.rglob("*.md"))][:files]
    if len(pages) < files:
        raise SystemExit(f"tldr has {len(pages)} pages, fewer than --files {files}")
    for page in pages:
        out = target / page.relative_to(source)
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(page, out)
            except OSError:
                shutil.copy2(page, out)
    return target


# --- the Ray Data variant, run inside the driver ------------------------------------------


class DataPreparer:
    """map_batches' class: the model loaded once in the constructor (an `ray_executor.Preparer`
    inside it), then each row (one batch of files) prepared as the pool's actors do."""

    def __init__(self, spec, encoder, batch_size: int, num_gpus: float) -> None:
        from pipeline.ray_executor import Preparer

        self.inner = Preparer(spec, encoder, batch_size, num_gpus, "")
        self.ready_at = time.time()

    def __call__(self, rows: dict) -> dict:
        import pickle
        from dataclasses import asdict

        out = []
        for task in rows["task"]:
            items, contents = pickle.loads(task)
            out.append(pickle.dumps(self.inner.prepare(items, contents), protocol=5))
        report = json.dumps(asdict(self.inner.report))
        n = len(out)
        return {
            "n": rows["n"],
            "batch": out,
            "report": [report] * n,
            "ready_at": [self.ready_at] * n,
        }


def data_prepare(config, todo, embed, progress=None, pool=None):
    """`pipeline.ray_executor.prepare` as a Ray Data pipeline: the same batches, the same
    per-batch work, the results yielded in the order sent."""
    import pickle

    from pipeline import ray_executor as rx
    from pipeline.workers import Spec, WorkerDied, batches_of, read_file

    pool = pool if pool is not None else rx.PoolRun()
    if not todo:
        return
    encoder = embed if isinstance(embed, rx.EncoderEmbed) else None
    spec = Spec(  # as ray_executor.prepare builds it
        str(config.root),
        config.chunk_max_tokens,
        config.chunk_overlap_tokens,
        None if encoder is not None else embed,
        lexical=config.shards <= 1,
        follow_outside=config.follow_outside_root,
        max_bytes=config.max_file_bytes,
    )
    batches = batches_of(todo)
    wall_started = time.time()  # the actors stamp their start on this machine's clock
    ray = rx._start(config)
    try:
        import ray.data

        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # written as sent, as the pool does
        context.enable_progress_bars = False
        plan = rx.plan_pool(ray.cluster_resources(), config.workers, len(batches), bool(encoder))
        ship = rx.files_mode(config) == "bytes"
        rows = []
        for n, items in enumerate(batches):
            contents = [read_file(spec, path) for path, _ in items] if ship else None
            rows.append({"n": n, "task": pickle.dumps((items, contents), protocol=5)})
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            DataPreparer,
            fn_constructor_args=(spec, encoder, config.embedding_batch_size, plan.num_gpus),
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(
                size=plan.actors, max_tasks_in_flight_per_actor=rx.IN_FLIGHT_PER_ACTOR
            ),
            num_cpus=plan.num_cpus,
            num_gpus=plan.num_gpus,
            batch_format="numpy",
        )
        reports: dict[int, dict] = {}
        ready: dict[int, float] = {}
        done = 0
        for expected, row in enumerate(dataset.iter_rows()):
            if int(row["n"]) != expected:
                raise WorkerDied(f"batch {row['n']} came back in place of {expected}")
            report = json.loads(row["report"])
            key = report["pid"]
            if report["batches"] >= reports.get(key, {}).get("batches", 0):
                reports[key] = report
            ready.setdefault(key, float(row["ready_at"]))
            batch = pickle.loads(row["batch"])
            yield batch
            done += len(batches[expected])
            if progress:
                progress(done)
        pool.actors = len(reports)
        pool.reports = list(reports.values())
        pool.start_seconds = max(ready.values()) - wall_started if ready else 0.0
    finally:
        ray.shutdown()


def _data_driver(argv: list[str]) -> None:
    """`mdvdb ingest ARGV` in this process, its Ray executor's prepare replaced by Ray Data."""
    from pipeline import ray_executor

    ray_executor.prepare = data_prepare
    sys.argv = ["mdvdb", "ingest", *argv]
    from mdvdb.cli import main

    main()


# --- the runs -----------------------------------------------------------------------------


def run_once(folder: Path, target: Path, executor: str, address: str) -> dict:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(folder, target)
    env = {**os.environ, **QUIET}
    tail = ["--json", "--root", str(target)]
    if executor == "local":
        args = [sys.executable, "-m", "mdvdb", "ingest", *tail]
    elif executor == "pool":
        args = [sys.executable, "-m", "mdvdb", "ingest", *tail, "--executor", f"ray:{address}"]
    else:
        tail += ["--executor", f"ray:{address}"]
        args = [sys.executable, str(Path(__file__).resolve()), "--data-driver", *tail]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{executor}: {done.stderr.strip()[-3000:]}")
    report = json.loads(done.stdout)
    report["_built"] = built(target)
    shutil.rmtree(target)
    return report


def built(root: Path) -> tuple[bytes, dict, dict]:
    """The index body and footer (its time of writing dropped) and every cache row: what
    must be the same whichever executor built it (tests/test_parallel_ingest.py)."""
    data = (root / ".markdownvdb.index").read_bytes()
    footer_len = int.from_bytes(data[-24:-16], "little")
    footer = json.loads(data[-24 - footer_len : -24])
    footer["meta"].pop("written_at")
    db = sqlite3.connect(root / ".markdownvdb.state" / "cache.sqlite3")
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {}
        for table in tables:
            if table == "_migrations":
                continue
            column = "key" if table == "kv" else "*"
            rows[table] = sorted(db.execute(f"SELECT {column} FROM {table}").fetchall())
    finally:
        db.close()
    return data[: -24 - footer_len], footer, rows


def _row(nodes: int | str, executor: str, reports: list[dict], reference: tuple) -> dict:
    """The medians of one executor's runs at one node count."""
    wall = statistics.median(r["seconds"] for r in reports)
    start = statistics.median(r["executor_start_seconds"] for r in reports)
    work = statistics.median(r["seconds"] - r["executor_start_seconds"] for r in reports)
    last = reports[-1]
    return {
        "worker_nodes": nodes,
        "executor": executor,
        "runs": len(reports),
        "wall_s": round(wall, 2),
        "walls": " / ".join(f"{r['seconds']:.1f}" for r in reports),
        "ray_start_s": round(start, 2),
        "work_s": round(work, 2),
        "chunks": last["chunks"],
        "chunks_per_s": round(last["chunked"] / max(work, 1e-9), 1),
        "wall_chunks_per_s": round(last["chunked"] / max(wall, 1e-9), 1),
        "parse_s": round(
            statistics.median(r["stage_seconds"].get("parse", 0.0) for r in reports), 2
        ),
        "actors": _actors(last.get("executor_actors", [])) or f"{last['workers']} processes",
        "same_index": all(r["_built"] == reference for r in reports),
    }


def _actors(reports: list[dict]) -> str:
    """`3 on 3 nodes, cpu, 0 GPU`: the actors' own reports, summed up."""
    if not reports:
        return ""
    nodes = len({r["node_id"] for r in reports})
    devices = ",".join(sorted({r["device"] for r in reports}))
    gpus = sum(r["num_gpus"] for r in reports)
    return f"{len(reports)} on {nodes} nodes, {devices}, {gpus:g} GPU"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--data-driver"]:
        _data_driver(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--files", type=int, default=20000, help="tldr pages, English first (of 38,404)"
    )
    parser.add_argument("--nodes", default="1,2,3", help="worker node counts, e.g. 1,2,3")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each executor")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed runs of each executor on each cluster first"
    )
    parser.add_argument("--executors", default="pool,data", help="alternated, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    if "data" in executors:
        try:
            import ray.data  # noqa: F401 - the driver of each `data` run imports it
        except ImportError:
            raise SystemExit("the data executor needs Ray Data: pip install 'ray[data]'") from None
    folder = tldr_subset(args.files)
    scratch = WORK / "ray-ingest-run"
    ups, table = [], []
    loads = [os.getloadavg()[0]]
    # The local build (pipeline/workers.py, one process per core), once: what every Ray run
    # must build byte for byte, and what Ray costs on this machine.
    locals_ = [run_once(folder, scratch, "local", "") for _ in range(args.warmup + args.rounds)]
    reference = locals_[0]["_built"]
    table.append(_row("-", "local", locals_[args.warmup :], reference))
    for nodes in [int(n) for n in args.nodes.split(",")]:
        try:
            proc, address, up_s, temp = start_cluster(nodes)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from None
        ups.append({"worker_nodes": nodes, "cluster_up_s": round(up_s, 2)})
        runs: dict[str, list[dict]] = {e: [] for e in executors}
        try:
            for _ in range(args.warmup):  # the cluster's first workers, the page cache
                for executor in executors:
                    warm = run_once(folder, scratch, executor, address)
                    if warm["_built"] != reference:
                        raise SystemExit(f"{executor} on {nodes} nodes built another index")
            for n in range(args.rounds):  # ABBA: neither executor always runs first
                for executor in executors if n % 2 == 0 else executors[::-1]:
                    report = run_once(folder, scratch, executor, address)
                    runs[executor].append(report)
                    loads.append(os.getloadavg()[0])
                    print(
                        f"{nodes} nodes, {executor}: {report['seconds']:.1f} s, start "
                        f"{report['executor_start_seconds']:.1f} s, load {loads[-1]:.1f}",
                        file=sys.stderr,
                    )
        finally:
            stop_cluster(proc, temp)
        for executor, reports in runs.items():
            table.append(_row(nodes, executor, reports, reference))
    print_table(
        "Ray start-up: the test cluster (a head with no CPU and N one-CPU worker nodes, "
        "ray.cluster_utils.Cluster) until every node is registered",
        ups,
        args.json,
    )
    print_table(
        f"ingest from nothing on the test cluster, the first {args.files} tldr pages, "
        f"{table[0]['chunks']} chunks, WordLlama (s; median of {args.rounds} after "
        f"{args.warmup} warm-up, executors alternated; "
        f"load average {min(loads):.1f}-{max(loads):.1f})",
        table,
        args.json,
    )
    if not all(row["same_index"] for row in table):
        raise SystemExit("the executors built different indexes")


if __name__ == "__main__":
    main()
