"""Whether two checkouts rank the same: dump each query's hybrid scores, then compare dumps.

    cd CHECKOUT && .venv/bin/python /path/to/bench/rank_identity.py dump --root DIR \
        [--queries Q.jsonl] [--limit 200] [--first-pass auto] --out A.json
    python bench/rank_identity.py compare A.json B.json

`dump` runs in the current directory's code (the checkout it is started from: its `query`
package comes first on the path), through `query.rank.search.mode_scores` (the fused score of
every chunk) and `Index.search` (the response a user gets, limit 10). Per query it records a
digest of the whole fused score array, the top 10 (chunk ids and scores) and the response's
(chunk id, score) pairs, and a digest of the whole response as `mdvdb search --json
--explain` prints it (paths, lines, excerpts, metadata, every explain part), searched again
with `explain=True`. `compare` prints, per dump pair, how many queries have bit-identical
fused scores, the same top 10 in the same order, the same response and the same full one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path


def dump(args) -> None:
    sys.path.insert(0, os.getcwd())
    import numpy as np

    from kernel.config import load_config
    from query import open_index
    from query.rank.search import mode_scores

    queries = _queries(args.queries)[: args.limit]
    env = {"MDVDB_SEARCH_FIRST_PASS": args.first_pass}
    index = open_index(config=load_config(args.root, environ=env))
    for q in queries[:2]:  # a long-lived reader: the first passes' copies built
        index.search(q, mode="hybrid")
        index.search(q, mode="hybrid")
    out = []
    for q in queries:
        index.snapshot.cache.pop("last_scores", None)
        scores, _ = mode_scores(index, q, "hybrid")
        scores = np.asarray(scores, dtype=np.float32)
        top = np.lexsort((np.arange(len(scores)), -scores))[:10]
        index.snapshot.cache.pop("last_scores", None)
        hits = index.search(q, mode="hybrid", limit=10).results
        index.snapshot.cache.pop("last_scores", None)
        shown = index.search(q, mode="hybrid", limit=10, explain=True).results
        shown = json.dumps([h.to_json(explain=True) for h in shown], sort_keys=True)
        out.append(
            {
                "query": q,
                "digest": hashlib.sha256(scores.tobytes()).hexdigest(),
                "top": [[int(i), float(scores[i])] for i in top],
                "response": [[h.chunk_id, h.score] for h in hits],
                "full": hashlib.sha256(shown.encode()).hexdigest(),
            }
        )
    Path(args.out).write_text(json.dumps({"root": str(args.root), "queries": out}))
    print(f"{len(out)} queries -> {args.out}")


def _queries(path: Path | None) -> list[str]:
    if path is None:
        from bench.query_speed import QUERIES

        return list(QUERIES)
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def compare(a_path: Path, b_path: Path) -> None:
    a = json.loads(a_path.read_text())["queries"]
    b = json.loads(b_path.read_text())["queries"]
    assert [x["query"] for x in a] == [x["query"] for x in b], "different query lists"
    same_scores = sum(x["digest"] == y["digest"] for x, y in zip(a, b, strict=True))
    same_top = sum(x["top"] == y["top"] for x, y in zip(a, b, strict=True))
    same_response = sum(x["response"] == y["response"] for x, y in zip(a, b, strict=True))
    same_full = sum(x.get("full") == y.get("full") for x, y in zip(a, b, strict=True))
    recall = [
        len({i for i, _ in x["top"]} & {i for i, _ in y["top"]}) / max(len(x["top"]), 1)
        for x, y in zip(a, b, strict=True)
    ]
    n = len(a)
    print(
        f"{a_path.name} vs {b_path.name}: {n} queries; fused scores identical {same_scores}/{n}; "
        f"top 10 identical {same_top}/{n}; response identical {same_response}/{n}; "
        f"full response (excerpts, explain) identical {same_full}/{n}; "
        f"recall@10 {sum(recall) / max(n, 1):.4f}"
    )


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--root", type=Path, required=True)
    d.add_argument("--queries", type=Path)
    d.add_argument("--limit", type=int, default=200)
    d.add_argument("--first-pass", default="auto")
    d.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args)
    else:
        compare(args.a, args.b)


if __name__ == "__main__":
    main()
