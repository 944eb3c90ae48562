"""Calibration of `confidence` (query/rank/confidence.py) on every evaluation set.

    python bench/confidence.py [--sets nfcorpus,cacm] [--fit] [--json]

Each set's queries run as `mdvdb search -n 10` does (`query.request.run_request`); each result
gives its FEATURES and a label (its file is judged relevant). For each set, a logistic model is
fitted on the other sets (each set weighted equally) and scored on the held-out one: its
reliability table (confidence buckets: results, mean confidence, share relevant), the expected
calibration error (ECE: the results-weighted mean gap between the two), and what a
`--min-confidence` threshold would remove there (share of relevant and of other results).
`--fit` prints the coefficients fitted on all the sets, for `COEFFICIENTS`.
The sets are those of bench/quality.py, prepared (and kept) the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402
from bench.quality import SETS, Target, set_folder  # noqa: E402

BUCKETS = np.linspace(0.0, 1.0, 11)
THRESHOLDS = (0.02, 0.05, 0.1, 0.2, 0.3)


def collect(target: Target, limit: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and query number of every result of every query of a set."""
    from query.rank.confidence import features
    from query.request import SearchRequest, run_request

    rows, labels, queries = [], [], []
    for number, q in enumerate(target.qids):
        text = target.queries[q]
        outcome = run_request(target.index, SearchRequest(query=text, limit=limit))
        hits = [hit for _, hit in outcome.tiers.results if target.doc_of_path[hit.path] != q]
        if not hits:
            continue
        rows.append(features(target.index, text, hits))
        judged = target.qrels[q]
        labels.extend(judged.get(target.doc_of_path[hit.path], 0) >= 1 for hit in hits)
        queries.extend([number] * len(hits))
    return np.vstack(rows), np.array(labels, dtype=bool), np.array(queries)


def fit(parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Intercept and weights of a logistic model, each set weighing the same."""
    from sklearn.linear_model import LogisticRegression

    x = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    weight = np.concatenate([np.full(len(p[1]), 1.0 / len(p[1])) for p in parts])
    model = LogisticRegression(C=1.0, max_iter=1000).fit(x, y, sample_weight=weight * len(y))
    return np.concatenate([model.intercept_, model.coef_[0]])


def predict(coef: np.ndarray, x: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The product's confidence: the logistic value, never rising down a response."""
    values = 1.0 / (1.0 + np.exp(-(coef[0] + x @ coef[1:])))
    out = values.copy()
    for q in np.unique(queries):
        at = np.flatnonzero(queries == q)  # results in their ranked order
        out[at] = np.minimum.accumulate(values[at])
    return out


def reliability(name: str, p: np.ndarray, y: np.ndarray) -> tuple[list[dict], float]:
    rows, gap = [], 0.0
    for low, high in zip(BUCKETS[:-1], BUCKETS[1:], strict=True):
        inside = (p >= low) & ((p < high) | (high == 1.0))
        if not inside.any():
            continue
        mean, share = float(p[inside].mean()), float(y[inside].mean())
        gap += inside.sum() * abs(mean - share)
        rows.append(
            {
                "set": name,
                "bucket": f"{low:.1f}-{high:.1f}",
                "results": int(inside.sum()),
                "mean_confidence": round(mean, 3),
                "share_relevant": round(share, 3),
            }
        )
    return rows, gap / len(p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--fit", action="store_true", help="coefficients fitted on all sets")
    parser.add_argument("--save", type=Path, help="also write the features to this .npz")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    data = {}
    for name in sets:
        data[name] = collect(Target(name, set_folder(name, None)))
        print(f"{name}: {len(data[name][1])} results", file=sys.stderr)
    if args.save:
        np.savez(args.save, **{f"{k}_{i}": v for k, d in data.items() for i, v in enumerate(d)})
    table, summary, cuts = [], [], []
    for held in sets:
        coef = fit([data[s][:2] for s in sets if s != held])
        x, y, queries = data[held]
        p = predict(coef, x, queries)
        rows, ece = reliability(held, p, y)
        table.extend(rows)
        summary.append(
            {"set": held, "results": len(y), "relevant": round(float(y.mean()), 3), "ece": ece}
        )
        for t in THRESHOLDS:
            cut = p < t
            cuts.append(
                {
                    "set": held,
                    "min_confidence": t,
                    "relevant_removed": round(float(cut[y].mean()) if y.any() else 0.0, 4),
                    "others_removed": round(float(cut[~y].mean()), 4),
                }
            )
    print_table("Reliability, each set fitted on the others", table, args.json)
    print_table("Expected calibration error (held out)", summary, args.json)
    print_table("What --min-confidence would remove (held out)", cuts, args.json)
    if args.fit:
        coef = fit([data[s][:2] for s in sets])
        print("COEFFICIENTS = (" + ", ".join(f"{c:.4f}" for c in coef) + ")")


if __name__ == "__main__":
    main()
