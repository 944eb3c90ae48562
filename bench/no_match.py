"""An honest empty answer, measured: queries that have no answer in a set get `no_match`, the
set's own queries keep their relevant results.

    python bench/no_match.py [--sets nfcorpus,cacm] [--queries 200] [--json]

Over each of the five evaluation sets' indexes (built and kept by bench/quality.py under
$MDVDB_BENCH_DIR, default /tmp/mdvdb-bench), through `query.request.run_request` (the library
call behind `mdvdb search` and the MCP search tool), with the default settings:

- `--queries` queries with no answer there: half random letter strings (one to three words of
  5-12 letters, another seed than the probes query.rank.evidence measures its threshold with),
  half real queries of another set (FOREIGN: a set of another subject). The share answered
  `no_match`, per kind and both together.
- every query of the set itself, answered with `-n 10 --files` by the ranking with the
  no-evidence rule switched off (before) and on (after): the relevant files the top 10 held
  before, how many of them the answer no longer holds (lost), and the share of the set's
  queries answered `no_match`.
"""

from __future__ import annotations

import argparse
import os
import random
import string
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402
from bench.quality import SETS, Target, set_folder  # noqa: E402

# The set whose real queries are asked of each set: another subject, so no answer there.
FOREIGN = {
    "nfcorpus": "cranfield",  # aerodynamics asked of nutrition and medicine
    "cranfield": "ray-docs-qa",  # Ray questions asked of aerodynamics
    "arguana": "cranfield",  # aerodynamics asked of debate arguments
    "cacm": "nfcorpus",  # nutrition asked of computer science
    "ray-docs-qa": "nfcorpus",  # nutrition asked of Ray's documentation
}


def letters(count: int, seed: int = 20261202) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 12)))
            for _ in range(rng.randint(1, 3))
        )
        for _ in range(count)
    ]


@contextmanager
def rule_off():
    """The ranking without the no-evidence rule: what the default returned before it."""
    from query.rank import evidence

    saved = evidence.no_evidence
    evidence.no_evidence = lambda *args, **kwargs: None
    try:
        yield
    finally:
        evidence.no_evidence = saved


def no_match_share(target: Target, queries: list[str]) -> float:
    from query.request import SearchRequest, run_request

    empty = 0
    for text in queries:
        outcome = run_request(target.index, SearchRequest(query=text))
        empty += not outcome.tiers.results
    return empty / max(len(queries), 1)


def relevant_top10(target: Target) -> tuple[dict[str, set[str]], int]:
    """Each query's relevant files in its top 10, and how many queries got no_match."""
    from query.request import SearchRequest, run_request

    found, empty = {}, 0
    for q in target.qids:
        outcome = run_request(target.index, SearchRequest(query=target.queries[q], files=True))
        docs = [target.doc_of_path[hit.path] for hit in outcome.files or []]
        judged = target.qrels[q]
        found[q] = {d for d in docs if judged.get(d, 0) > 0 and not (target.drop_self and d == q)}
        empty += outcome.no_evidence is not None
    return found, empty


def run_set(name: str, count: int) -> dict:
    started = time.perf_counter()
    target = Target(name, set_folder(name, None))
    other = Target(FOREIGN[name], set_folder(FOREIGN[name], None))
    half = count // 2
    foreign = [other.queries[q] for q in other.qids[: count - half]]
    random_share = no_match_share(target, letters(half))
    foreign_share = no_match_share(target, foreign)
    with rule_off():
        before, _ = relevant_top10(target)
    after, empty = relevant_top10(target)
    kept = sum(len(before[q] & after[q]) for q in target.qids)
    total = sum(len(found) for found in before.values())
    return {
        "set": name,
        "random": round(random_share, 3),
        "foreign": FOREIGN[name],
        "foreign_no_match": round(foreign_share, 3),
        "both": round((random_share * half + foreign_share * (count - half)) / count, 3),
        "own_queries": len(target.qids),
        "own_no_match": round(empty / max(len(target.qids), 1), 3),
        "relevant_top10": total,
        "lost": total - kept,
        "lost_share": round((total - kept) / total, 4) if total else 0.0,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated set names")
    parser.add_argument("--queries", type=int, default=200, help="no-answer queries per set")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in FOREIGN]
    if unknown:
        parser.error(f"unknown set: {', '.join(unknown)}")
    rows = [run_set(name, args.queries) for name in sets]
    load = os.getloadavg()[0]
    title = f"No-answer queries and the sets' own (load {load:.1f})"
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
