"""Sharded vs one-file index: query latency, and the per-shard costs a scale-out plan needs.

    python bench/scaleout.py --chunks 131000 --shards 4,20 [--rounds 5] [--json]
    python bench/scaleout.py --chunks 1000000 --shards 4,20        # the 1M-chunk point
    python bench/scaleout.py --layouts 1=ONE_FILE_ROOT,20=SHARDED_ROOT [--groups 4]
        # folders already ingested (one file, and MDVDB_SHARDS=20): nothing is built; a
        # sharded folder can be split from the one-file index without embedding again:
        # MDVDB_IVF_MIN_CHUNKS=20000 python bench/split_shards.py /tmp/m1 SHARDED_ROOT --shards 20
    python bench/scaleout.py ingest --files 4000 --workers 1,2     # Ray vs local ingest
    python bench/scaleout.py nodes --executors pool --nodes 1,2,3  # bench/ray_ingest.py
    python bench/scaleout.py shard --one ONE_FILE_ROOT --shard SHARD_ROOT
        # one shard's files ingested alone (e.g. shard 0 of 20 of the 1M corpus), its
        # staged per-shard work timed, next to the one-file search of the whole corpus

A corpus of ~chunks/3 files is generated (bench/generate.py: 2-4 sections a file) under
MDVDB_BENCH_DIR, copied once per layout and ingested with `mdvdb ingest` (MDVDB_SHARDS=1,
then each N); ingests are timed too. Then, warm and in process:

0. opening the index: one map, or the manifest, N lazy maps and the one-file order (stored
   by the pack), and the same plus a first lexical search (the tables it reads);
1. `Index.search` (limit 10) per mode, one file vs N shards (the shards scored in threads),
   median and p95 over the queries x rounds, and whether every answer is the same (paths,
   lines, scores);
2. the simulation of a cluster: for the largest N, each shard's own work for a query timed
   one shard at a time (BM25F over its postings with the global statistics, the dense
   product over its vectors, its local top 10; and all of a shard's calls for a query in
   each mode, p50 / p95 per shard), and the merge of the N top-10 lists. If each
   shard ran on its own node, a query would cost about the slowest shard plus the merge
   (plus the network): the `fan-out critical path` row, next to the one-file cost of the same
   work. docs/scale-out.md builds the 10M-document plan from these rows;
3. with --groups K: `mdvdb serve --ray local` deploys the largest N's shards as K shard
   groups on Ray Serve, and a router in this process (`MDVDB_RAY_SERVE`) and the app's HTTP
   endpoint answer the same searches: latency, rounds and bytes, and whether every answer
   is the one-file one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.common import WORK, median_ms, p95_ms, print_table  # noqa: E402
from bench.generate import generate  # noqa: E402

MODES = ("lexical", "hybrid", "semantic")
QUERIES = [
    "extract a tar archive",
    "merge a branch and push to the remote",
    "bake bread with yeast and flour",
    "database index for a join query",
    "firewall port and dns route",
    "prune the garden and compost the soil",
    "invoice tax audit",
    "python package import test",
    "compress folder",
    "replica backup schedule",
]


def ingest(root: Path, shards: int) -> float:
    env = {**os.environ, "MDVDB_SHARDS": str(shards)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--quiet", "--root", str(root)],
        check=True,
        env=env,
    )
    return time.perf_counter() - started


def layout(base: Path, corpus: Path, shards: int) -> tuple[Path, float | None]:
    """The corpus ingested for this layout (reused when already there). A sharded layout
    starts from a copy of the one-file folder, index and state included, so its ingest
    takes the records and vectors from there (no re-embedding): it times the sharded pack."""
    root = base / f"shards-{shards}"
    done = root / ".ingested"
    if done.exists():
        return root, None
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(corpus if shards == 1 else base / "shards-1", root, symlinks=True)
    (root / ".ingested").unlink(missing_ok=True)
    seconds = ingest(root, shards)
    done.write_text(f"{seconds}\n")
    return root, seconds


class _KeepAll(dict):
    """A per-process cache of one snapshot's answer (query.rank.govern's frontmatter-field test,
    query.schema's schema) that keeps every snapshot's: the bench holds two indexes in one
    process and alternates between them, where a reader process holds one; with a one-entry
    cache each alternation recomputed it (~150 ms a query at 1M chunks, in both layouts)."""

    def clear(self) -> None:
        pass


def _keep_both_readers() -> None:
    from query import schema
    from query.rank import govern

    govern._DETECTED = _KeepAll(govern._DETECTED)
    schema._CACHE = _KeepAll(schema._CACHE)


def open_at(root: Path, shards: int):
    from kernel.config import load_config
    from query import open_index

    config = load_config(root, {**os.environ, "MDVDB_SHARDS": str(shards)})
    return open_index(config=config)


def answers(index, query: str, mode: str) -> list:
    return [
        (r.path, r.start_line, r.end_line, r.score)
        for r in index.search(query, limit=10, mode=mode).results
    ]


def overlap(found: list, expected: list) -> float:
    """The share of the expected top 10 (path and lines) that `found` holds."""
    want = {r[:3] for r in expected}
    return len(want & {r[:3] for r in found}) / len(want) if want else 1.0


def search_rows(indexes: dict[int, object], rounds: int, modes=MODES) -> list[dict]:
    rows = []
    for mode in modes:
        reference = {q: answers(indexes[1], q, mode) for q in QUERIES}  # warm-up too
        for shards, index in indexes.items():
            got = {q: answers(index, q, mode) for q in QUERIES}
            same = all(got[q] == reference[q] for q in QUERIES)
            shared = statistics.mean(overlap(got[q], reference[q]) for q in QUERIES)
            samples = []
            for _ in range(rounds):
                for q in QUERIES:
                    started = time.perf_counter()
                    index.search(q, limit=10, mode=mode)
                    samples.append(time.perf_counter() - started)
            rows.append(
                {
                    "mode": mode,
                    "layout": "one file" if shards == 1 else f"{shards} shards",
                    "median_ms": median_ms(samples),
                    "p95_ms": p95_ms(samples),
                    "same_answers": same if shards != 1 else "reference",
                    "top10_overlap": round(shared, 3) if shards != 1 else "",
                }
            )
    return rows


def interleaved_rows(indexes: dict[int, object], rounds: int) -> list[dict]:
    """Warm hybrid search with the layouts interleaved query by query (one file, then each
    sharded layout, same query): on a loaded machine the load drifts between two separate
    loops, so the median of the per-query ratios is steadier than a ratio of medians."""
    rows = []
    for shards, index in indexes.items():
        if shards == 1:
            continue
        ratios, own = [], []
        for _ in range(rounds):
            for q in QUERIES:
                started = time.perf_counter()
                indexes[1].search(q, limit=10, mode="hybrid")
                one = time.perf_counter() - started
                started = time.perf_counter()
                index.search(q, limit=10, mode="hybrid")
                own.append(time.perf_counter() - started)
                ratios.append(own[-1] / one)
        rows.append(
            {
                "layout": f"{shards} shards",
                "hybrid_median_ms": median_ms(own),
                "median_ratio_to_one_file": round(statistics.median(ratios), 2),
            }
        )
    return rows


def open_rows(roots: dict[int, Path], rounds: int) -> list[dict]:
    """Opening the index (files in the page cache): map one file, or read the manifest and
    map N shards lazily; then the same plus a first lexical search (what it opens)."""
    from kernel.config import load_config
    from kernel.shards import published_source
    from query.shards.reader import ShardedSnapshot
    from query.snapshot import Reader, Snapshot

    rows = []
    for shards, root in roots.items():
        config = load_config(root, {**os.environ, "MDVDB_SHARDS": str(shards)})
        source = published_source(config)
        opened, first = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            snap = Snapshot.load(source) if shards == 1 else ShardedSnapshot.load(source)
            opened.append(time.perf_counter() - started)
            from query.rank import search as searching

            reader = Reader(config)
            reader._snapshot = snap
            searching.search(reader, "extract a tar archive", limit=10, mode="lexical")
            first.append(time.perf_counter() - started)
        # What the reader allocates to open and answer a first hybrid search (NumPy and
        # Arrow buffers are traced; mapped files are not): a gathered copy would show here.
        import tracemalloc

        tracemalloc.start()
        snap = Snapshot.load(source) if shards == 1 else ShardedSnapshot.load(source)
        reader = Reader(config)
        reader._snapshot = snap
        searching.search(reader, "extract a tar archive", limit=10, mode="hybrid")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        name = "one file" if shards == 1 else f"{shards} shards"
        rows.append(
            {
                "layout": name,
                "open_ms": median_ms(opened),
                "open_and_search_ms": median_ms(first),
                "hybrid_peak_alloc_mb": round(peak / 1e6, 1),
            }
        )
    return rows


def simulation_rows(one, sharded, rounds: int) -> list[dict]:
    """Each shard's own work timed alone (the `ShardPart` calls a shard group answers),
    the merge, and the one-file cost of the same."""
    import numpy as np

    from kernel import text_analysis
    from query.rank.search import query_vector
    from query.score.lexical import lexical_index
    from query.score.vector import row_dots

    def top10(scores):
        k = min(10, len(scores))
        part = np.argpartition(-scores, k - 1)[:k] if k else np.zeros(0, np.int64)
        return part[np.argsort(-scores[part], kind="stable")]

    with sharded.pinned() as snap, one.pinned() as flat:
        lexical = lexical_index(sharded)
        whole = lexical_index(one)
        parts = snap.parts
        spec = lexical.norm_spec()
        lex_shard = [[] for _ in parts]
        dense_shard = [[] for _ in parts]
        merges, lex_one, dense_one, int8_one = [], [], [], []
        # The int8 first pass rescored exactly (query.score.vector), in each shard and in the
        # one file, when simsimd is there: the copies are built here, outside the timing.
        int8_shard = compact_one = None
        from query.shards.part import CALLS

        if _has_simsimd() and "dense" in CALLS:  # a checkout before it: the exact scans
            from query.score.vector import DenseScorer, Int8Rows
            from query.shards.reader import shard_depth

            int8_shard = [[] for _ in parts]
            n = flat.vectors.shape[0]
            depths = [shard_depth(len(ids), n, 101) for ids in lexical.chunk_ids]
            compact_one = DenseScorer(flat.vectors, Int8Rows.of(flat.vectors))

        def _scores(answer, i):  # a shard's (rows, scores) answer as its local array
            out = np.zeros(len(lexical.chunk_ids[i]), np.float32)
            if isinstance(answer, np.ndarray):  # an older shard call: the whole array
                return answer
            if answer[0] is None:  # most chunks score: the whole array
                return np.asarray(answer[1])
            out[np.asarray(answer[0], dtype=np.int64)] = answer[1]
            return out

        for part in parts:  # map what the calls read (a shard group keeps it mapped)
            part.call("term_df", np.zeros(1, np.uint64))
            part.call("dots", np.zeros(flat.vectors.shape[1], np.float32))
            if int8_shard is not None:
                zero = np.zeros(flat.vectors.shape[1], np.float32)
                part.call("dense", zero, None, 0.0, 101, 0.0, "int8", 101, 101)
        for _ in range(rounds):
            for q in QUERIES:
                hashes, counts = np.unique(text_analysis.term_ids(q), return_counts=True)
                weights = counts.astype(np.float32)
                idf = lexical.idf(lexical.document_frequency(hashes))
                vector = query_vector(one, q)
                tops = []
                for i, part in enumerate(parts):
                    started = time.perf_counter()
                    local = _scores(part.call("term_scores", hashes, weights, idf, spec), i)
                    best = top10(local)
                    lex_shard[i].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    top10(part.call("dots", vector))
                    dense_shard[i].append(time.perf_counter() - started)
                    if int8_shard is not None:
                        started = time.perf_counter()
                        part.call("dense", vector, None, 0.0, 101, 0.0, "int8", 101, depths[i])
                        int8_shard[i].append(time.perf_counter() - started)
                    tops.append((lexical.chunk_ids[i][best], local[best]))
                started = time.perf_counter()
                ids = np.concatenate([t[0] for t in tops])
                scores = np.concatenate([t[1] for t in tops])
                ids[top10(scores)]
                merges.append(time.perf_counter() - started)
                started = time.perf_counter()
                top10(whole.scores(q))
                lex_one.append(time.perf_counter() - started)
                started = time.perf_counter()
                top10(row_dots(flat.vectors, vector))
                dense_one.append(time.perf_counter() - started)
                if int8_shard is not None:
                    started = time.perf_counter()
                    top10(compact_one.mixed(vector, keep=101)[1])
                    int8_one.append(time.perf_counter() - started)
    per_lex = [statistics.median(s) * 1000 for s in lex_shard]
    per_dense = [statistics.median(s) * 1000 for s in dense_shard]
    chunks = [len(ids) for ids in lexical.chunk_ids]
    merge = median_ms(merges)
    work = [
        ("BM25F + top 10", lex_one, per_lex),
        ("dense product + top 10", dense_one, per_dense),
    ]
    if int8_shard is not None:
        per_int8 = [statistics.median(s) * 1000 for s in int8_shard]
        work.append(("dense int8 pass + exact rescoring, top 101", int8_one, per_int8))
    return [
        {
            "work": work,
            "one_file_ms": median_ms(one_ms),
            "shard_median_ms": statistics.median(per),
            "shard_max_ms": max(per),
            "sum_of_shards_ms": sum(per),
            "merge_ms": merge,
            "fan_out_critical_path_ms": max(per) + merge,
            "chunks_per_shard": int(statistics.median(chunks)),
        }
        for work, one_ms, per in work
    ]


def shard_summary(rows: list[dict]) -> list[dict]:
    """The median and the largest of each column over the shards."""
    if not rows:
        return []
    out = []
    for name, pick in (("median", statistics.median), ("max", max)):
        row: dict = {"shard": name}
        for key in rows[0]:
            if key != "shard":
                row[key] = pick(r[key] for r in rows)
        out.append(row)
    return out


class _Timed:
    """A shard's part with each call timed and its bytes counted (the request's arguments
    and the answer as pickled, what Ray carries; counted outside the time)."""

    remote = False

    counting = 0.0  # seconds spent encoding to count bytes (all instances)

    def __init__(self, part, shard: int, log: list):
        self.part, self.shard, self.log = part, shard, log

    def call(self, name: str, *args):
        import pickle

        started = time.perf_counter()
        value = self.part.call(name, *args)
        took = time.perf_counter() - started
        step = f"stage:{args[1]}" if name == "stage" else name
        size = len(pickle.dumps(list(args), 5)) + len(pickle.dumps(value, 5))
        self.log.append((self.shard, step, took, size))
        _Timed.counting += time.perf_counter() - started - took  # not the router's work
        return value


class _InTurn:
    """A thread pool that runs the calls one after another (each shard timed alone)."""

    def map(self, function, items):
        return [function(item) for item in items]


def staged_rows(one, sharded, rounds: int, per_shard: list | None = None) -> list[dict]:
    """The staged query (query.rank.shard_search) with each shard's calls run one at a time and
    timed: per query, the work of each shard in each round, the router's own work (the wall
    time less every shard's), and the bytes a wire would carry. If each shard ran on its
    own node, a query would cost the router's work plus, per round, the slowest shard
    (plus a network round trip per round): the `critical path` column. Semantic mode takes
    the per-chunk path (one `dense` call a shard). `per_shard`: filled with one row per
    shard, its work per query (all its calls) p50 and p95 in each mode."""
    from query.rank import shard_search as shard_query
    from query.shards import reader as fanned

    rows = []
    shard_query.IN_PROCESS = True  # the rounds a router over shard groups runs
    with sharded.pinned() as snap:
        saved_parts, saved_pool = list(snap.parts), fanned._POOLS.get(False)
        log: list = []
        for i, part in enumerate(saved_parts):
            snap.parts[i] = _Timed(part, i, log)
        fanned._POOLS[False] = _InTurn()
        own: dict[str, list[list[float]]] = {}
        try:
            for mode in MODES:
                for q in QUERIES:  # warm: int8 copies, df, page lengths
                    sharded.search(q, limit=10, mode=mode)
                walls, routers, paths, sums, kb, calls, one_ms = [], [], [], [], [], [], []
                each = own[mode] = [[] for _ in saved_parts]
                by_step: dict[str, list[float]] = {}
                for _ in range(rounds):
                    for q in QUERIES:
                        started = time.perf_counter()
                        one.search(q, limit=10, mode=mode)
                        one_ms.append(time.perf_counter() - started)
                        del log[:]
                        _Timed.counting = 0.0
                        started = time.perf_counter()
                        sharded.search(q, limit=10, mode=mode)
                        wall = time.perf_counter() - started - _Timed.counting
                        work = sum(t for _, _, t, _ in log)
                        steps: dict[str, list[float]] = {}
                        for _, step, took, _ in log:
                            steps.setdefault(step, []).append(took)
                        # a step called once per shard is one round; more (df misses,
                        # feedback postings) counted round by round of N calls
                        n = len(saved_parts)
                        slowest = sum(
                            max(times[k : k + n])
                            for times in steps.values()
                            for k in range(0, len(times), n)
                        )
                        for step, times in steps.items():
                            by_step.setdefault(step, []).append(sum(times))
                        mine = [0.0] * len(saved_parts)
                        for shard, _, took, _ in log:
                            mine[shard] += took
                        for shard, took in enumerate(mine):
                            each[shard].append(took)
                        walls.append(wall)
                        routers.append(wall - work)
                        paths.append(wall - work + slowest)
                        sums.append(work)
                        kb.append(sum(b for *_, b in log) / 1e3)
                        calls.append(len(log) / n)
                rows.append(
                    {
                        "mode": mode,
                        "one_file_ms": median_ms(one_ms),
                        "shards_in_turn_ms": median_ms(walls),
                        "sum_of_shard_work_ms": median_ms(sums),
                        "router_ms": median_ms(routers),
                        "critical_path_ms": median_ms(paths),
                        "calls_per_shard": round(statistics.median(calls), 1),
                        "kb_per_query": round(statistics.median(kb), 1),
                        # each step's work summed over the shards, median over the queries
                        "shard_work_by_step_ms": ", ".join(
                            f"{step.removeprefix('stage:')} {statistics.median(t) * 1000:.1f}"
                            for step, t in sorted(by_step.items(), key=lambda kv: -sum(kv[1]))
                        ),
                        "chunks_per_shard": int(
                            statistics.median(len(ids) for ids in snap.order.chunk_ids)
                        ),
                    }
                )
            if per_shard is not None:
                for shard, ids in enumerate(snap.order.chunk_ids):
                    row: dict = {"shard": shard, "chunks": len(ids)}
                    for mode, samples in own.items():
                        row[f"{mode}_p50_ms"] = median_ms(samples[shard])
                        row[f"{mode}_p95_ms"] = p95_ms(samples[shard])
                    per_shard.append(row)
        finally:
            shard_query.IN_PROCESS = False
            snap.parts[:] = saved_parts
            if saved_pool is None:
                fanned._POOLS.pop(False, None)
            else:
                fanned._POOLS[False] = saved_pool
    return rows


def one_shard_reader(root: Path):
    """A one-file index read as a sharded index of one shard: the per-shard work of a
    staged query on exactly the rows one shard of a bigger layout holds (its files' paths
    hash to that shard), with the statistics of those rows (a timing, not a ranking)."""
    from kernel import shards
    from kernel.config import load_config
    from query.index import Index
    from query.shards.part import ShardFile
    from query.shards.reader import ShardedSnapshot

    path = root / ".markdownvdb.index"
    shard = ShardFile.load(path)
    dims = int(shard.meta.get("dimensions") or 0)
    entry = shards.ShardEntry(0, path.name, 1, "-", len(shard.paths), len(shard.chunk_file_ids))
    manifest = shards.Manifest(1, 1, [entry], path.name, {**shard.meta, "dimensions": dims})
    snap = ShardedSnapshot._opened(path, os.stat(path), manifest, [shard], shard.file, ())
    reader = Index(load_config(root, dict(os.environ)))
    reader._snapshot = snap
    reader._is_outdated = lambda _snap: False  # pinned to this object
    return reader


def one_shard_main(argv: list[str]) -> None:
    """`python bench/scaleout.py shard --one ROOT --shard ROOT [--rounds N] [--json]`:
    the staged per-shard work on one shard's files (ingested alone as ROOT of --shard)
    next to the one-file search of the whole corpus (--one)."""
    parser = argparse.ArgumentParser(description=one_shard_main.__doc__)
    parser.add_argument("--one", required=True, help="the whole corpus, one-file index")
    parser.add_argument("--shard", required=True, help="one shard's files, ingested alone")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    _keep_both_readers()
    one = open_at(Path(args.one), 1)
    shard = one_shard_reader(Path(args.shard))
    with one.pinned() as snap:
        total = len(snap.chunk_file_ids)
    print_table(
        f"one shard's staged work, in turn ({args.shard}) vs the one file ({total} chunks)",
        staged_rows(one, shard, args.rounds),
        args.json,
    )
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


def _has_simsimd() -> bool:
    try:
        import simsimd  # noqa: F401
    except ImportError:
        return False
    return True


class Traffic:
    """Calls, rounds and bytes between a router and its shards, counted where the router sends
    a round (`query.shards.reader.call_each`): each call's arguments and answer as pickled
    (what Ray carries to a shard group), in all and per call (`stage:STEP` for a staged
    round). The same counts for shards on Ray Serve and for shards in threads with the
    staged rounds on (`query.rank.shard_search.IN_PROCESS`)."""

    def __init__(self):
        import threading

        self.sent = self.received = self.requests = self.rounds = 0
        self.by_call: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.steps: list[str] = []  # each round's name, in order
        self.lock = threading.Lock()

    def __enter__(self):
        import pickle

        from query.rank import shard_search
        from query.shards import reader

        self.modules = (reader, shard_search)
        real = self.saved = reader.call_each

        def counted(parts, name, args=None):
            out = real(parts, name, args)
            given = [()] * len(parts) if args is None else args
            key = f"stage:{given[0][1]}" if name == "stage" and given else name
            sent = sum(len(pickle.dumps(list(a), 5)) for a in given)
            received = sum(len(pickle.dumps(v, 5)) for v in out)
            with self.lock:
                self.sent, self.received = self.sent + sent, self.received + received
                self.requests += len(parts)
                self.rounds += 1
                self.steps.append(key)
                self.calls[key] = self.calls.get(key, 0) + len(parts)
                self.by_call[key] = self.by_call.get(key, 0) + sent + received
            return out

        for module in self.modules:
            module.call_each = counted
        return self

    def __exit__(self, *exc):
        for module in self.modules:
            module.call_each = self.saved


def start_serve(root: Path, shards: int, groups: int, cpus: float) -> tuple:
    """`mdvdb serve --ray local` of `root` in its own process: (process, Ray address, URL)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "mdvdb", "serve", "--ray", "local", "--root", str(root)]
    argv += ["--groups", str(groups), "--cpus", str(cpus), "--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "MDVDB_SHARDS": str(shards), "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    ready = (
        proc.stdout.readline()
    )  # "serve: ... on Ray ADDRESS; search at URL (bearer token: PATH)"
    if "search at" not in ready:
        proc.kill()
        raise SystemExit(f"mdvdb serve --ray did not start: {ready!r}")
    url, token_file = ready.split(" search at ")[1].split(" (bearer token: ")
    return proc, ready.split(" on Ray ")[1].split(";")[0], url, token_file.strip().rstrip(")")


def router_rows(one_root: Path, root: Path, shards: int, groups: int, rounds: int) -> list[dict]:
    """`groups` shard groups on Ray Serve (a Ray started for these rows) share the shards; a
    router in a process of its own (one Ray cluster a process) answers the searches."""
    import json

    proc, address, url, token_file = start_serve(root, shards, groups, cpus=0.5)
    try:
        argv = [sys.executable, __file__, "routed", str(one_root), str(root), str(shards)]
        argv += [str(groups), str(rounds), address, url, token_file]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"the routed run failed: {done.stderr[-3000:]}")
        return json.loads(done.stdout.splitlines()[-1])
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def routed_main(argv: list[str]) -> None:
    """The router of `router_rows`: with MDVDB_RAY_SERVE in this process, and the app's
    HTTP endpoint; one JSON list of rows on stdout."""
    import json

    from kernel.config import load_config
    from query import open_index

    one_root, root, shards, groups, rounds, address, url, token_file = argv
    token = Path(token_file).read_text(encoding="utf-8").strip()
    headers = {"authorization": f"Bearer {token}"}
    shards, groups, rounds = int(shards), int(groups), int(rounds)
    _keep_both_readers()
    one = open_at(Path(one_root), 1)
    env = {**os.environ, "MDVDB_SHARDS": str(shards), "MDVDB_RAY_SERVE": address}
    router = open_index(config=load_config(Path(root), env))
    rows = []
    for mode in MODES:
        reference = {q: answers(one, q, mode) for q in QUERIES}
        got = {q: answers(router, q, mode) for q in QUERIES}
        samples, posted = [], []
        with Traffic() as traffic:
            for _ in range(rounds):
                for q in QUERIES:
                    started = time.perf_counter()
                    router.search(q, limit=10, mode=mode)
                    samples.append(time.perf_counter() - started)
        for _ in range(rounds):
            for q in QUERIES:
                started = time.perf_counter()
                asked = {"query": q, "mode": mode, "limit": 10}
                httpx.post(url, json=asked, headers=headers, timeout=60)
                posted.append(time.perf_counter() - started)
        searches = rounds * len(QUERIES)
        qps = _throughput(url, headers, mode, searches, CLIENTS)
        rows.append(
            {
                "mode": mode,
                "layout": f"Serve, {groups} groups x {shards // groups} shards",
                "median_ms": median_ms(samples),
                "p95_ms": p95_ms(samples),
                "http_median_ms": median_ms(posted),
                "http_p95_ms": p95_ms(posted),
                "same_answers": all(got[q] == reference[q] for q in QUERIES),
                "top10_overlap": round(
                    statistics.mean(overlap(got[q], reference[q]) for q in QUERIES), 3
                ),
                "kb_per_query": round((traffic.sent + traffic.received) / searches / 1e3, 1),
                "rounds_per_query": round(traffic.rounds / searches, 1),
                f"http_qps_{CLIENTS}_clients": round(qps, 1),
            }
        )
    print(json.dumps(rows))


CLIENTS = 4  # concurrent HTTP clients for the throughput column


def _throughput(url: str, headers: dict, mode: str, searches: int, clients: int) -> float:
    """Searches a second through the endpoint with `clients` requests in flight."""
    from concurrent.futures import ThreadPoolExecutor

    asked = [QUERIES[i % len(QUERIES)] for i in range(searches)]
    with (
        httpx.Client(timeout=120, headers=headers) as client,
        ThreadPoolExecutor(clients) as pool,
    ):
        started = time.perf_counter()
        list(pool.map(lambda q: client.post(url, json={"query": q, "mode": mode}), asked))
        return len(asked) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=131_000, help="about this many chunks")
    parser.add_argument("--shards", default="4,20", help="shard counts to compare, e.g. 4,20")
    parser.add_argument(
        "--layouts",
        default="",
        help="N=ROOT,... of folders already ingested (1 = one file): nothing is generated",
    )
    parser.add_argument(
        "--groups", default="", help="shard groups on Ray Serve for routed runs, e.g. 1,2,4"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--queries", type=int, default=len(QUERIES), help="use the first N queries only"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    del QUERIES[max(1, args.queries) :]
    _keep_both_readers()
    built: dict[int, float | None] = {}
    if args.layouts:
        roots = {
            int(n): Path(p) for n, p in (item.split("=", 1) for item in args.layouts.split(","))
        }
        counts = [n for n in roots if n > 1]
        files = None
    else:
        counts = [int(n) for n in args.shards.split(",") if int(n) > 1]
        files = max(1, args.chunks // 3)
        base = WORK / f"scaleout-{files}"
        corpus = generate(base / "corpus", files)
        roots = {}
        for shards in [1, *counts]:
            roots[shards], built[shards] = layout(base, corpus, shards)
    indexes = {shards: open_at(roots[shards], shards) for shards in [1, *counts]}
    with indexes[1].pinned() as snap:
        total = len(snap.chunk_file_ids)
    if built:
        print_table(
            f"ingest ({files} generated files, {total} chunks; s, blank: reused; shards: "
            "from the one-file folder's caches, so the pack alone)",
            [
                {"layout": "one file" if n == 1 else f"{n} shards", "ingest_s": s}
                for n, s in built.items()
            ],
            args.json,
        )
    print_table(
        f"open the index, warm page cache ({total} chunks)",
        open_rows({n: roots[n] for n in [1, *counts]}, args.rounds),
        args.json,
    )
    print_table(
        f"warm Index.search, limit 10 ({total} chunks, {len(QUERIES)} queries x {args.rounds})",
        search_rows(indexes, args.rounds),
        args.json,
    )
    print_table(
        f"warm hybrid, interleaved query by query with the one file ({total} chunks)",
        interleaved_rows(indexes, args.rounds),
        args.json,
    )
    if counts:
        most = max(counts)
        print_table(
            f"per-shard costs, {most} shards timed one at a time ({total} chunks)",
            simulation_rows(indexes[1], indexes[most], args.rounds),
            args.json,
        )
        per_shard: list[dict] = []
        print_table(
            f"staged queries, {most} shards timed one at a time ({total} chunks)",
            staged_rows(indexes[1], indexes[most], args.rounds, per_shard),
            args.json,
        )
        print_table(
            f"each shard's own work per query, {most} shards timed one at a time, all its "
            f"calls ({total} chunks; ms)",
            per_shard + shard_summary(per_shard),
            args.json,
        )
        routed = []
        for groups in [int(g) for g in args.groups.split(",") if g.strip()]:
            routed += router_rows(roots[1], roots[most], most, groups, args.rounds)
        if routed:
            print_table(
                f"routed through Ray Serve on this machine ({total} chunks, {most} shards; "
                "median/p95: a router in this process, http: the app's endpoint)",
                routed,
                args.json,
            )
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["ingest"]:  # the ingest rows: Ray vs the local pool
        from bench.scaleout_ingest import main as ingest_main

        ingest_main(sys.argv[2:])
    elif sys.argv[1:2] == ["nodes"]:  # ingest on 1, 2, 3 nodes of a test cluster
        from bench.ray_ingest import main as nodes_main

        nodes_main(sys.argv[2:])
    elif sys.argv[1:2] == ["routed"]:  # a router over Ray Serve (router_rows)
        routed_main(sys.argv[2:])
    elif sys.argv[1:2] == ["shard"]:  # one shard of a bigger layout, timed alone
        one_shard_main(sys.argv[2:])
    else:
        main()
