"""An honest empty answer, measured: queries that have no answer in a set get `no_match`, the
set's own queries keep their relevant results.

    python bench/no_match.py [--sets nfcorpus,cacm] [--queries 200] [--json] [--fit]

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

`--fit`: instead, each query's evidence (query.rank.evidence's coverage + closeness) and the
relevant files its top 10 held with the rule off; then per set the frontier (the share of the
no-answer queries under each threshold, and the share of relevant results lost), the
threshold chosen on all the sets (the largest least share with every set losing at most
LOSS), and leave one set out: the threshold chosen so on the other sets, applied to it.
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


LOSS = 0.0025  # the share of relevant results a threshold may lose on a set
THRESHOLDS = tuple(round(0.4 + 0.05 * i, 2) for i in range(13))


def evidence_rows(name: str, count: int) -> list[tuple[str, float, int]]:
    """(kind, coverage + closeness, relevant files in the top 10 with the rule off) per query:
    `count` no-answer queries, then the set's own."""
    from query.rank.evidence import evidence
    from query.request import SearchRequest, run_request

    target = Target(name, set_folder(name, None))
    other = Target(FOREIGN[name], set_folder(FOREIGN[name], None))
    half = count // 2
    asked = [("random", text, None) for text in letters(half)]
    asked += [("foreign", other.queries[q], None) for q in other.qids[: count - half]]
    asked += [("own", target.queries[q], q) for q in target.qids]
    rows = []
    with rule_off():
        for kind, text, qid in asked:
            outcome = run_request(target.index, SearchRequest(query=text, files=True))
            relevant = 0
            if qid is not None:
                judged = target.qrels[qid]
                docs = {target.doc_of_path[hit.path] for hit in outcome.files or []}
                relevant = sum(
                    judged.get(d, 0) > 0 and not (target.drop_self and d == qid) for d in docs
                )
            rows.append((kind, evidence(target.index, text), relevant))
    return rows


def at_threshold(rows: list[tuple[str, float, int]], threshold: float) -> tuple[float, float]:
    """(share of no-answer queries under `threshold`, share of relevant results lost)."""
    empty = [kind for kind, value, _ in rows if kind != "own" and value < threshold]
    asked = sum(kind != "own" for kind, _, _ in rows)
    total = sum(rel for kind, _, rel in rows if kind == "own")
    lost = sum(rel for kind, value, rel in rows if kind == "own" and value < threshold)
    return len(empty) / max(asked, 1), lost / total if total else 0.0


def chosen(table: dict[str, dict[float, tuple[float, float]]], sets: list[str]) -> float:
    """The threshold of the largest least no-answer share over `sets`, each losing <= LOSS."""
    allowed = [t for t in THRESHOLDS if all(table[s][t][1] <= LOSS for s in sets)] or [
        THRESHOLDS[0]
    ]
    return max(allowed, key=lambda t: (min(table[s][t][0] for s in sets), -t))


def fit(sets: list[str], count: int, as_json: bool) -> None:
    table = {}
    for name in sets:
        rows = evidence_rows(name, count)
        table[name] = {t: at_threshold(rows, t) for t in THRESHOLDS}
    frontier = [
        {"threshold": t, **{s: f"{table[s][t][0]:.1%} / {table[s][t][1]:.2%}" for s in sets}}
        for t in THRESHOLDS
    ]
    print_table("no_match share / relevant lost, per threshold", frontier, as_json)
    everywhere = chosen(table, sets)
    held = []
    for name in sets:
        t = chosen(table, [s for s in sets if s != name])
        share, lost = table[name][t]
        on_all = table[name][everywhere]
        held.append(
            {
                "held_out": name,
                "threshold": t,
                "no_match": round(share, 3),
                "lost_share": round(lost, 4),
                "all_sets_threshold": everywhere,
                "no_match_at_it": round(on_all[0], 3),
                "lost_at_it": round(on_all[1], 4),
            }
        )
    print_table(f"Leave one set out (loss <= {LOSS:.2%} on the others)", held, as_json)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated set names")
    parser.add_argument("--queries", type=int, default=200, help="no-answer queries per set")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--fit", action="store_true", help="the threshold's frontier and LOSO")
    args = parser.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in FOREIGN]
    if unknown:
        parser.error(f"unknown set: {', '.join(unknown)}")
    if args.fit:
        fit(sets, args.queries, args.json)
        return
    rows = [run_set(name, args.queries) for name in sets]
    load = os.getloadavg()[0]
    title = f"No-answer queries and the sets' own (load {load:.1f})"
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
