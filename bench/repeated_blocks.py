"""How often repeated blocks (footers, template sections, boilerplate parameters) fill an answer.

    python bench/repeated_blocks.py FOLDER [--min-files N] [--queries 150]

FOLDER: an ingested folder. Asks `mdvdb search`'s library call (`query.run_request`, -n 10)
the titles of randomly chosen files, every second one with " parameters" added, and counts
the sections of the answers that are copies in at least N files (`also_in_count` + 1 >= N;
N defaults to 2% of the files, at least 10: the boilerplate rule of query/rank/collapse.py).
Run it with the code of two commits on two indexes of the same folder to compare them
(docs/search-quality.md, issue 35).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from query import SearchRequest, open_index, run_request

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--min-files", type=int, default=0)
    parser.add_argument("--queries", type=int, default=150)
    args = parser.parse_args()
    index = open_index(args.folder)
    files = index.snapshot.table("files")
    titles = sorted({t for t in files.column("title").to_pylist() if t})
    need = args.min_files or max(10, math.ceil(0.02 * files.num_rows))
    random.seed(7)
    chosen = random.sample(titles, min(args.queries, len(titles)))
    queries = [f"{q} parameters" if i % 2 else q for i, q in enumerate(chosen)]
    slots = answers = 0
    for query in queries:
        outcome = run_request(index, SearchRequest(query=query, limit=10))
        hits = [hit for _, hit in outcome.tiers.results] if outcome.tiers else []
        repeated = sum(1 for hit in hits if hit.also_in_count + 1 >= need)
        slots += repeated
        answers += bool(repeated)
    print(
        json.dumps({"queries": len(queries), "min_files": need, "slots": slots, "answers": answers})
    )


if __name__ == "__main__":
    main()
