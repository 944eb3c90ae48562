"""Sharded vs one-file index: query latency, and the per-shard costs a scale-out plan needs.

    python bench/scaleout.py --chunks 131000 --shards 4,20 [--rounds 5] [--json]
    python bench/scaleout.py --chunks 1000000 --shards 4,20        # the 1M-chunk point
    python bench/scaleout.py ingest --files 4000 --workers 1,2     # Ray vs local ingest

A corpus of ~chunks/3 files is generated (bench/generate.py: 2-4 sections a file) under
MDVDB_BENCH_DIR, copied once per layout and ingested with `mdvdb ingest` (MDVDB_SHARDS=1,
then each N); ingests are timed too. Then, warm and in process:

0. opening the index: one map, or N maps and the gathered one-file view;
1. `Index.search` (limit 10) per mode, one file vs N shards (the shards scored in threads),
   median and p95 over the queries x rounds, and whether every answer is the same (paths,
   lines, scores);
2. the simulation of a cluster: for the largest N, each shard's own work for a query timed
   one shard at a time (BM25F over its postings with the global statistics, the dense
   product over its vectors, its local top 10), and the merge of the N top-10 lists. If each
   shard ran on its own node, a query would cost about the slowest shard plus the merge
   (plus the network): the `fan-out critical path` row, next to the one-file cost of the same
   work. docs/scale-out.md builds the 10M-document plan from these rows.
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

from bench.common import WORK, median_ms, p95_ms, print_table  # noqa: E402
from bench.generate import generate  # noqa: E402

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


def search_rows(indexes: dict[int, object], rounds: int) -> list[dict]:
    rows = []
    for mode in ("lexical", "hybrid"):
        reference = {q: answers(indexes[1], q, mode) for q in QUERIES}  # warm-up too
        for shards, index in indexes.items():
            same = all(answers(index, q, mode) == reference[q] for q in QUERIES)
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
                }
            )
    return rows


def open_rows(roots: dict[int, Path], rounds: int) -> list[dict]:
    """Opening the index (files in the page cache): map one file, or map N shards and
    gather the one-file view (files and chunks tables, the vectors matrix)."""
    from kernel.config import load_config
    from kernel.shards import published_source
    from query.sharded import ShardedSnapshot
    from query.snapshot import Snapshot

    rows = []
    for shards, root in roots.items():
        source = published_source(load_config(root, {**os.environ, "MDVDB_SHARDS": str(shards)}))
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            if shards == 1:
                Snapshot.load(source)
            else:
                ShardedSnapshot.load(source, Snapshot.load)
            samples.append(time.perf_counter() - started)
        name = "one file" if shards == 1 else f"{shards} shards"
        rows.append({"layout": name, "open_ms": median_ms(samples)})
    return rows


def simulation_rows(one, sharded, rounds: int) -> list[dict]:
    """Each shard's own work timed alone, the merge, and the one-file cost of the same."""
    import numpy as np

    from kernel import text_analysis
    from query.lexical import lexical_index
    from query.search import query_vector
    from query.sharded import shard_term_scores
    from query.vector import row_dots

    def top10(scores):
        k = min(10, len(scores))
        part = np.argpartition(-scores, k - 1)[:k] if k else np.zeros(0, np.int64)
        return part[np.argsort(-scores[part], kind="stable")]

    with sharded.pinned() as snap, one.pinned() as flat:
        lexical = lexical_index(sharded)
        whole = lexical_index(one)
        parts = snap.parts
        lex_shard = [[] for _ in parts]
        dense_shard = [[] for _ in parts]
        merges, lex_one, dense_one = [], [], []
        for _ in range(rounds):
            for q in QUERIES:
                hashes, counts = np.unique(text_analysis.term_ids(q), return_counts=True)
                weights = counts.astype(np.float32)
                idf = lexical.idf(lexical.document_frequency(hashes))
                vector = query_vector(one, q)
                tops = []
                for i, part in enumerate(parts):
                    ids = lexical.chunk_ids[i]
                    norm = lexical.norm[ids]  # what a shard server holds for its chunks
                    started = time.perf_counter()
                    local = shard_term_scores(
                        lexical.parts[i], hashes, weights, idf, norm, np.zeros(len(ids), np.float32)
                    )
                    best = top10(local)
                    lex_shard[i].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    cos = row_dots(part.vectors, vector)
                    top10(cos)
                    dense_shard[i].append(time.perf_counter() - started)
                    tops.append((ids[best], local[best]))
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
    per_lex = [statistics.median(s) * 1000 for s in lex_shard]
    per_dense = [statistics.median(s) * 1000 for s in dense_shard]
    chunks = [len(p.chunk_file_ids) for p in parts]
    merge = median_ms(merges)
    return [
        {
            "work": "BM25F + top 10",
            "one_file_ms": median_ms(lex_one),
            "shard_median_ms": statistics.median(per_lex),
            "shard_max_ms": max(per_lex),
            "sum_of_shards_ms": sum(per_lex),
            "merge_ms": merge,
            "fan_out_critical_path_ms": max(per_lex) + merge,
            "chunks_per_shard": int(statistics.median(chunks)),
        },
        {
            "work": "dense product + top 10",
            "one_file_ms": median_ms(dense_one),
            "shard_median_ms": statistics.median(per_dense),
            "shard_max_ms": max(per_dense),
            "sum_of_shards_ms": sum(per_dense),
            "merge_ms": merge,
            "fan_out_critical_path_ms": max(per_dense) + merge,
            "chunks_per_shard": int(statistics.median(chunks)),
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=131_000, help="about this many chunks")
    parser.add_argument("--shards", default="4,20", help="shard counts to compare, e.g. 4,20")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.shards.split(",") if int(n) > 1]
    files = max(1, args.chunks // 3)
    base = WORK / f"scaleout-{files}"
    corpus = generate(base / "corpus", files)
    built = {}
    for shards in [1, *counts]:
        _, seconds = layout(base, corpus, shards)
        built[shards] = seconds
    indexes = {shards: open_at(base / f"shards-{shards}", shards) for shards in [1, *counts]}
    with indexes[1].pinned() as snap:
        total = len(snap.chunk_file_ids)
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
        open_rows({n: base / f"shards-{n}" for n in [1, *counts]}, args.rounds),
        args.json,
    )
    print_table(
        f"warm Index.search, limit 10 ({total} chunks, {len(QUERIES)} queries x {args.rounds})",
        search_rows(indexes, args.rounds),
        args.json,
    )
    if counts:
        most = max(counts)
        print_table(
            f"per-shard costs, {most} shards timed one at a time ({total} chunks)",
            simulation_rows(indexes[1], indexes[most], args.rounds),
            args.json,
        )
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["ingest"]:  # the ingest rows: Ray vs the local pool
        from bench.scaleout_ingest import main as ingest_main

        ingest_main(sys.argv[2:])
    else:
        main()
