"""Warm search latency through the request path: what `mdvdb serve` and the MCP search tool
answer (`query.request.run_request`: the ranking, the no-evidence rule, the confidence), and
the raw ranking (`Index.search`) beside it, in a second loop.

    python bench/warm_request.py --root INGESTED_FOLDER [--code CHECKOUT] [--queries 200] [--json]

`--code`: the checkout whose `query` package is timed (default this one), so that an older
commit runs the same loop on an index built with its own code (`git archive COMMIT | tar -x
-C DIR`, then `PYTHONPATH=DIR python -m mdvdb ingest --root FOLDER`). As bench/query.py: one
search to map the index and load the model, `Index.warm_up()`, then the timed queries
(bench/query.py's queries), p50 and p95 in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="an ingested folder")
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    from query import SearchRequest, open_index, run_request

    index = open_index(args.root)
    asked = [QUERIES[i % len(QUERIES)] + f" {i % 7}" for i in range(args.queries)]
    run_request(index, SearchRequest(query=asked[0]))
    index.warm_up()
    request, raw = [], []
    for text in asked:  # two loops: a search keeps its query's scores for the next of it
        started = time.perf_counter()
        run_request(index, SearchRequest(query=text, limit=10))
        request.append(time.perf_counter() - started)
    for text in asked[1:] + asked[:1]:
        started = time.perf_counter()
        index.search(text, limit=10)
        raw.append(time.perf_counter() - started)

    def ms(samples: list[float], q: float) -> float:
        return round(statistics.quantiles(samples, n=100)[q - 1] * 1000, 2)

    row = {
        "root": str(args.root),
        "code": str(args.code),
        "chunks": int(index.snapshot.vectors.shape[0]),
        "request_p50": round(statistics.median(request) * 1000, 2),
        "request_p95": ms(request, 95),
        "search_p50": round(statistics.median(raw) * 1000, 2),
        "search_p95": ms(raw, 95),
        "load": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
