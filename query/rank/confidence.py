"""Each result's `confidence`, the estimated chance in [0, 1] that it is relevant: a logistic
model over the query's word weight found in the section (`coverage`) and log(1 + position),
fitted by `bench/confidence.py` (docs/search-quality.md, "A calibrated confidence"); a
running minimum down the response."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

__all__ = ["COEFFICIENTS", "FEATURES", "confidences", "features", "rate", "section_coverage"]

if TYPE_CHECKING:
    from query.results import SearchResult
    from query.snapshot import Reader

FEATURES = ("coverage", "rank")
# intercept, then one weight per FEATURES entry (bench/confidence.py --fit)
COEFFICIENTS = (-0.9769, 1.4035, -0.5547)


def features(index: Reader, query: str, hits: Sequence[SearchResult]) -> np.ndarray:
    """One row of FEATURES per hit."""
    out = np.zeros((len(hits), len(FEATURES)), dtype=np.float64)
    if hits:
        chunks = np.array([hit.chunk_id for hit in hits], dtype=np.int64)
        out[:, 0] = section_coverage(index, query, chunks)
        out[:, 1] = np.log1p(np.arange(len(hits)))
    return out


def confidences(index: Reader, query: str, hits: Sequence[SearchResult]) -> list[float]:
    """Each hit's confidence, never rising down the list."""
    if not hits:
        return []
    weights = np.asarray(COEFFICIENTS, dtype=np.float64)
    logits = weights[0] + features(index, query, hits) @ weights[1:]
    values = np.minimum.accumulate(1.0 / (1.0 + np.exp(-logits)))
    return [round(float(v), 4) for v in values]


def rate(index: Reader, query: str, hits: Sequence[SearchResult]) -> None:
    """Set each hit's `confidence`, in response order."""
    with index.pinned():  # (the caller's pin when it has one: one snapshot, read once)
        values = confidences(index, query, hits)
    for hit, value in zip(hits, values, strict=True):
        hit.confidence = value


def section_coverage(index: Reader, query: str, chunks: np.ndarray) -> np.ndarray:
    """The idf-weighted share of the query's terms in each section."""
    from kernel import text_analysis
    from query.score.lexical import bm25_idf, lexical_index

    share = np.zeros(len(chunks))
    # return_counts: a plain np.unique imports numpy.ma (query.rank.evidence)
    terms = np.unique(text_analysis.term_ids(query), return_counts=True)[0]
    if not len(terms):
        return share
    n = max(int(index.snapshot.chunk_file_ids.shape[0]), 1)
    lexical = lexical_index(index)
    # a word the index lacks weighs the most (df 0): no section can hold it
    weights = bm25_idf(n, lexical.document_frequency(terms).astype(np.float64))
    total = float(weights.sum())
    if total <= 0:
        return share
    for at, held in enumerate(lexical.chunk_terms(chunks)):
        # a few query terms against a section's: one comparison matrix (np.isin sorts)
        share[at] = float(weights[(held[:, None] == terms[None, :]).any(axis=0)].sum()) / total
    return share
