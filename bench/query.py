"""Query benchmark: warm in-process search (p50/p95) and a cold `mdvdb search` process.

Reference alternatives in the same run: brute force over vectors loaded into RAM without the
map (np.load of the same matrix), and `rg -l` for the cold process (the cheapest thing a user
could run instead).

    python bench/query.py [--corpus tldr] [--queries 200] [--json]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import corpus, p95_ms, print_table, run  # noqa: E402
from bench.ingest import MDVDB, _rg, prepare  # noqa: E402

QUERIES = [
    "extract a tar archive",
    "list open network ports",
    "change file permissions",
    "show disk usage of a folder",
    "download a file over http",
    "search text in files recursively",
    "kill a process by name",
    "create a git branch",
    "compress images",
    "convert video to gif",
    "schedule a recurring job",
    "show system memory",
]


def bench(name: str, n_queries: int, cold_runs: int, against: dict | None = None) -> list[dict]:
    root = prepare(name) if name.startswith("gen") else corpus(name)
    if not (root / ".markdownvdb.index").exists():
        run([*MDVDB, "ingest", "--root", str(root)])
    from kernel.config import load_config
    from query import open_index

    index = open_index(config=load_config(root))
    rng = random.Random(1)
    queries = [rng.choice(QUERIES) + f" {i % 7}" for i in range(n_queries)]
    index.search(queries[0])  # load the model and map the index
    warm, other = [], []
    from query import fusion

    for q in queries:
        start = time.perf_counter()
        index.search(q, limit=10)
        warm.append(time.perf_counter() - start)
        if against is not None:  # the same query with other ranking settings, interleaved
            with fusion.overridden(**against):
                start = time.perf_counter()
                index.search(q, limit=10)
                other.append(time.perf_counter() - start)

    import numpy as np

    matrix = np.array(index.snapshot.vectors)  # a private copy in RAM: no map
    provider = index.provider()
    brute = []
    for q in queries:
        start = time.perf_counter()
        v = provider.embed([q])[0]
        scores = matrix @ v
        np.argsort(-scores)[:10]
        brute.append(time.perf_counter() - start)

    cold = []
    for q in QUERIES[:cold_runs]:
        start = time.perf_counter()
        result = run([*MDVDB, "search", q, "--root", str(root), "--json"])
        cold.append(time.perf_counter() - start)
        assert result.returncode == 0, result.stderr
    rg = []
    for q in QUERIES[:cold_runs]:
        start = time.perf_counter()
        run([_rg(), "-l", "-i", q.split()[-1], str(root)])
        rg.append(time.perf_counter() - start)
    chunks = index.snapshot.vectors.shape[0]

    def row(what: str, samples: list[float]) -> dict:
        p50 = statistics.median(samples) * 1000
        return {
            "corpus": name,
            "what": what,
            "chunks": chunks,
            "p50_ms": p50,
            "p95_ms": p95_ms(samples),
        }

    settings = ", ".join(f"{k}={v}" for k, v in (against or {}).items())
    return [
        row("mdvdb search, warm, in-process", warm),
        *([row(f"mdvdb search, warm, in-process ({settings})", other)] if other else []),
        row("brute force argsort, RAM copy", brute),
        row("mdvdb search, cold process", cold),
        row("rg -l -i WORD, cold process", rg),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=["tldr"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also time warm search with these query.fusion settings, interleaved",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    against = None
    if args.against:
        from query.fusion import PARAMS

        against = {}
        for item in args.against:
            name, _, value = item.partition("=")
            against[name] = type(getattr(PARAMS, name))(value)
    rows = [row for name in args.corpus for row in bench(name, args.queries, args.cold, against)]
    print_table("mdvdb search latency", rows, args.json)


if __name__ == "__main__":
    main()
