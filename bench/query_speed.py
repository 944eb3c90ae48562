"""Warm, in-process query latency per search mode on tldr (38k files, ~40k chunks).

    python bench/query_speed.py [--root /path/to/ingested/tldr] [--rounds 5] [--json]

Without --root, tldr is unpacked under MDVDB_BENCH_DIR and ingested first (minutes, once).
Each query runs once to warm up (maps the index, loads the model, builds the lexical views),
then `rounds` times per mode through `Index.search` (limit 10), the same call `mdvdb search`
makes. `lexical scoring only` times just the BM25F scoring, the part the issue bounds at 5 ms;
the last two rows time the corpus-matrix product both ways (BLAS, and the einsum we use).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="an already ingested tldr folder")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from kernel.config import load_config
    from query import open_index
    from query.lexical import lexical_index
    from query.vector import row_dots

    root = args.root or corpus("tldr")
    config = load_config(root, environ={})
    if args.root is None:
        from pipeline.ingest import ingest_folder as ingest

        ingest(config)
    index = open_index(config=config)
    lexical = lexical_index(index)
    vectors = index.snapshot.vectors
    probe = index.provider().embed([QUERIES[0]])[0]

    for q in QUERIES:  # warm-up: map, model, lexical views
        for mode in ("lexical", "semantic", "hybrid"):
            index.search(q, mode=mode)

    def timed(fn) -> list[float]:
        samples = []
        for _ in range(args.rounds):
            for q in QUERIES:
                start = time.perf_counter()
                fn(q)
                samples.append(time.perf_counter() - start)
        return samples

    runs = {
        "lexical scoring only": lambda q: lexical.scores(q),
        "search --mode lexical": lambda q: index.search(q, mode="lexical"),
        "search --mode semantic": lambda q: index.search(q, mode="semantic"),
        "search --mode hybrid": lambda q: index.search(q, mode="hybrid"),
        "query embedding only": lambda q: index.provider().embed([q]),
        "chunks x query, BLAS sgemv (V @ q)": lambda q: vectors @ probe,
        "chunks x query, einsum (used)": lambda q: row_dots(vectors, probe),
    }
    rows = []
    for name, fn in runs.items():
        samples = timed(fn)
        rows.append(
            {
                "run": name,
                "queries": len(samples),
                "p50_ms": round(median_ms(samples), 2),
                "p95_ms": round(p95_ms(samples), 2),
            }
        )
    snap = index.snapshot
    title = (
        f"Warm in-process query latency, tldr ({len(snap.paths)} files, "
        f"{snap.vectors.shape[0]} chunks, {len(lexical.terms)} terms)"
    )
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
