"""Warm, in-process query latency per search mode, int8 first pass against the exact scan.

    python bench/query_speed.py [--root /ingested/folder ...] [--rounds 5] [--json]
    python bench/query_speed.py --synthetic 1000000      # the dense pass alone at 1M rows

Without --root, tldr is unpacked under MDVDB_BENCH_DIR and ingested first (minutes, once).
Each query runs once to warm up (maps the index, loads the model, builds the lexical views
and the int8 copy), then `rounds` times per run through `Index.search` (limit 10), the call
`mdvdb serve` makes. Per index, in the same run:
- `search --mode hybrid` with MDVDB_SEARCH_FIRST_PASS=exact (the float32 scans) and =int8;
- lexical and semantic search;
- the references: `M @ v` over an in-memory float32 copy of the whole matrix (NumPy's default
  BLAS threads: the fastest obvious scan), the int8 pass alone, and bm25s (its own index of
  the chunk texts, top 10);
- recall@10 of the int8 hybrid ranking against the exact one, and the share of queries whose
  fused scores are bit-identical;
- with an index that holds IVF lists (`kernel.ivf`; `bench/add_ivf.py` adds them to an
  existing index): `search --mode hybrid` with MDVDB_SEARCH_FIRST_PASS=ivf, and its recall;
`--real` runs on the real large corpus of bench/real_corpus.py (built and ingested on first
use) with its fixed real queries: the folder every speed figure is reported on first.
`--synthetic N` times the dense pass alone (two directions, as hybrid search asks) on N random
unit vectors of 256 dimensions against the float32 scan: no 1M-chunk index is ingested (about
half an hour here), so the lexical side at that size is not in it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import corpus, median_ms, p95_ms, print_table  # noqa: E402

QUERIES = [
    "extract a tar archive",
    "create a compressed zip file",
    "list files sorted by size",
    "find files modified in the last day",
    "show disk usage of a folder",
    "kill a process by name",
    "change file permissions recursively",
    "download a file over http",
    "search text in files recursively",
    "show network connections",
    "convert video to gif",
    "resize an image",
    "git undo last commit",
    "docker remove all stopped containers",
    "ssh with a private key",
    "count lines in a file",
    "replace text in a file with sed",
    "schedule a cron job",
    "mount a usb drive",
    "check which process uses a port",
    "压缩文件",
    "ファイルを検索する",
    "создать архив",
    "afficher les fichiers cachés",
    "kubernetes get pods in all namespaces",
    "python virtual environment",
    "generate ssh key",
    "compare two files line by line",
    "monitor cpu usage",
    "print the current date",
]


CLOCK = time.perf_counter  # --cpu: time.process_time (this process's CPU time)
SCAN = "M @ v, float32 copy in RAM (NumPy default threads)"  # the obvious alternative


def samples_of(fn, queries: list[str], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        for q in queries:
            start = CLOCK()
            fn(q)
            out.append(CLOCK() - start)
    return out


def row(name: str, samples: list[float], **extra) -> dict:
    return {
        "run": name,
        "queries": len(samples),
        "p50_ms": round(median_ms(samples), 2),
        "p95_ms": round(p95_ms(samples), 2),
        **extra,
    }


def agreement(exact_index, fast_index, queries: list[str], mode: str = "hybrid"):
    """Mean recall@10 of a first pass's ranking vs the exact one; the share of queries whose
    scores are the same bits (every row); the share whose top 10 rows and scores are."""
    from query.rank.search import mode_scores
    from query.score.vector import top_rows

    recalls, same, top_same = [], 0, 0
    for q in queries:
        a, _ = mode_scores(exact_index, q, mode)
        b, _ = mode_scores(fast_index, q, mode)
        ta, tb = top_rows(a, 10), top_rows(b, 10)
        recalls.append(len(set(ta.tolist()) & set(tb.tolist())) / max(len(ta), 1))
        same += bool(np.array_equal(a, b))
        top_same += bool(np.array_equal(ta, tb) and np.array_equal(a[ta], b[tb]))
    return float(np.mean(recalls)), same / len(queries), top_same / len(queries)


def _opened(root: Path, mode: str):
    from kernel.config import load_config
    from query import open_index

    return open_index(config=load_config(root, environ={"MDVDB_SEARCH_FIRST_PASS": mode}))


def _has_lists(index) -> bool:
    """The index holds IVF lists (kernel.ivf) a search can use."""
    from kernel import ivf

    snap = index.snapshot
    n, d = snap.vectors.shape
    return ivf.read(snap.table(ivf.TABLE), snap.meta, n, d) is not None


def recall_only(root: Path, queries: list[str]) -> list[dict]:
    from query.score import vector

    exact = _opened(root, "exact")
    n = exact.snapshot.vectors.shape[0]
    out = []
    for mode in ("int8", "ivf") if _has_lists(exact) else ("int8",):
        recall, same, _ = agreement(exact, _opened(root, mode), queries)
        row = {"root": root.name, "pass": mode, "chunks": n, "depth": vector.RESCORE_DEPTH}
        row |= {"queries": len(queries), "recall@10": round(recall, 4)}
        out.append(row | {"identical_scores": round(same, 3)})
    return out


def bm25s_runner(index):
    """bm25s over the same chunk texts (English stop-words, Snowball): the plain BM25 a
    user would reach for, timed on the same queries."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    texts = index.snapshot.table("chunks").column("text").to_pylist()
    model = bm25s.BM25()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    model.index(tokens, show_progress=False)

    def run(q: str):
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
        return model.retrieve(tokens, k=10, show_progress=False, n_threads=1)

    return run


def bench_root(
    root: Path, rounds: int, queries: list[str], with_bm25s: bool
) -> tuple[list[dict], list[dict]]:
    from kernel.config import load_config
    from query import open_index
    from query.score.vector import Int8Rows

    exact = open_index(config=load_config(root, environ={"MDVDB_SEARCH_FIRST_PASS": "exact"}))
    fast = open_index(config=load_config(root, environ={"MDVDB_SEARCH_FIRST_PASS": "int8"}))
    lists = _opened(root, "ivf") if _has_lists(exact) else None
    vectors = exact.snapshot.vectors
    probe = np.asarray(exact.provider().embed([queries[0]])[0], dtype=np.float32)
    compact = Int8Rows.of(vectors)
    in_ram = np.array(vectors)  # the obvious alternative's matrix: a private float32 copy
    for q in queries:  # warm-up: map, model, lexical views, the int8 copy
        for mode in ("lexical", "semantic", "hybrid"):
            exact.search(q, mode=mode)
        fast.search(q, mode="hybrid")
        fast.search(q, mode="semantic")
        if lists is not None:
            lists.search(q, mode="hybrid")
    runs = {
        "search --mode hybrid, exact": lambda q: exact.search(q, mode="hybrid"),
        "search --mode hybrid, int8 + rescoring": lambda q: fast.search(q, mode="hybrid"),
        "search --mode lexical": lambda q: fast.search(q, mode="lexical"),
        "search --mode semantic, exact": lambda q: exact.search(q, mode="semantic"),
        "search --mode semantic, int8 + rescoring": lambda q: fast.search(q, mode="semantic"),
        SCAN: lambda q: in_ram @ probe,
        "int8 pass alone, 2 directions": lambda q: compact.dots(np.stack([probe, probe])),
    }
    if lists is not None:
        runs["search --mode hybrid, IVF + rescoring"] = lambda q: lists.search(q, mode="hybrid")
    if with_bm25s:
        runs["bm25s top 10"] = bm25s_runner(exact)
    n, d = vectors.shape
    rows = []
    for name, fn in runs.items():
        rows.append(row(name, samples_of(fn, queries, rounds), root=root.name, chunks=n))
    scan = next(r for r in rows if r["run"] == SCAN)["p50_ms"]
    for r in rows:
        r["x_scan"] = round(r["p50_ms"] / scan, 2) if scan else None
    agreed = []
    passes = (("int8", fast, "hybrid"), ("ivf", lists, "hybrid"), ("int8", fast, "semantic"))
    for name, index, mode in passes:
        if index is None:
            continue
        recall, same, top_same = agreement(exact, index, queries, mode)
        agree = {"root": root.name, "mode": mode, "pass": name, "chunks": n}
        agree |= {"queries": len(queries), "recall@10": recall}
        agreed.append(agree | {"identical_scores": round(same, 3), "identical_top10": top_same})
    return rows, agreed


def bench_synthetic(n: int, rounds: int, d: int = 256) -> list[dict]:
    from query.score.vector import DenseScorer, Int8Rows

    rng = np.random.default_rng(7)
    matrix = np.empty((n, d), dtype=np.float32)
    for a in range(0, n, 100_000):
        part = rng.standard_normal((min(100_000, n - a), d), dtype=np.float32)
        matrix[a : a + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    compact = Int8Rows.of(matrix)
    fast = DenseScorer(matrix, compact)
    probes = [matrix[i] + matrix[i + 1] for i in range(30)]
    direction = matrix[100:103].mean(axis=0)
    runs = {
        SCAN: lambda i: matrix @ probes[i],
        "dense pass exact, 2 directions": lambda i: DenseScorer(matrix).mixed(
            probes[i], direction, 1.0
        ),
        "dense pass int8 + rescoring, 2 directions": lambda i: fast.mixed(
            probes[i], direction, 1.0
        ),
    }
    rows = [
        row(name, samples_of(fn, list(range(30)), rounds), root="synthetic", chunks=n)
        for name, fn in runs.items()
    ]
    scan = rows[0]["p50_ms"]
    for r in rows:
        r["x_scan"] = round(r["p50_ms"] / scan, 2)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, action="append", help="an ingested folder")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-bm25s", action="store_true")
    parser.add_argument("--synthetic", type=int, action="append", help="rows of random vectors")
    parser.add_argument("--queries", type=Path, help="a queries.jsonl (BEIR) to use instead")
    parser.add_argument("--depth", type=int, help="rows rescored exactly (default 1000)")
    parser.add_argument("--recall-only", action="store_true", help="no timings")
    parser.add_argument("--ivf-share", type=float, help="IVF: share of rows probed (0.15)")
    parser.add_argument("--ivf-min-rows", type=int, help="IVF: rows probed at least (16000)")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="CPU time instead of wall time (steadier on a loaded machine; the int8 hybrid "
        "with a static model runs on one thread, the exact one on two)",
    )
    parser.add_argument("--real", action="store_true", help="the real large corpus")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.cpu:
        global CLOCK
        CLOCK = time.process_time
    from query.score import vector

    if args.depth:
        vector.RESCORE_DEPTH = args.depth
    if args.ivf_share is not None:
        vector.IVF_PROBE_SHARE = args.ivf_share
    if args.ivf_min_rows is not None:
        vector.IVF_MIN_PROBE_ROWS = args.ivf_min_rows
    queries = QUERIES
    if args.queries:
        import json

        queries = [json.loads(line)["text"] for line in args.queries.open(encoding="utf-8")]

    rows: list[dict] = []
    agreements: list[dict] = []
    for n in args.synthetic or []:
        rows += bench_synthetic(n, args.rounds)
    if args.real:
        from bench.real_corpus import ingested_real

        real, queries = ingested_real()
        args.root = [*(args.root or []), real]
    roots = args.root or ([] if args.synthetic else [None])
    for root in roots:
        if root is None:
            from kernel.config import load_config
            from pipeline.ingest import ingest_folder

            root = corpus("tldr")
            ingest_folder(load_config(root, environ={}))
        if args.recall_only:
            agreements += recall_only(root, queries)
            continue
        timed, agreed = bench_root(root, args.rounds, queries, not args.no_bm25s)
        rows += timed
        agreements += agreed
    print_table("Warm in-process query latency (ms), first passes vs exact", rows, args.json)
    if agreements:
        print_table("int8 / IVF hybrid ranking vs the exact scan", agreements, args.json)


if __name__ == "__main__":
    main()
