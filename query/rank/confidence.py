"""Each result's `confidence`: the estimated chance, in [0, 1], that it is relevant.

A ranking's scores are relative to one query (a hybrid's best hit is near 1 whatever it is),
so they cannot say whether a result is any good. The confidence is a logistic model over
features that mean the same for every query and index:

- `coverage`: the share of the query's word weight (BM25 idf) found in the section;
- `page_coverage`: the same share over the section's whole page;
- `cosine_z`: how far the section's cosine stands above the query's cosines over the index
  (their mean and spread, from a fixed sample of SAMPLE rows);
- `rank`: log(1 + position) in the response.

`COEFFICIENTS` were fitted on the five evaluation sets' relevance labels by
`bench/confidence.py`, which reports each set's reliability table fitted on the other four
(docs/search-quality.md, "A calibrated confidence"). Down a response the confidence never
rises (a running minimum), so a result never looks surer than one ranked above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

__all__ = ["FEATURES", "confidences", "features", "rate"]

if TYPE_CHECKING:
    from query.results import SearchResult
    from query.snapshot import Reader

FEATURES = ("coverage", "page_coverage", "cosine_z", "rank")
# intercept, then one weight per FEATURES entry (bench/confidence.py --fit)
COEFFICIENTS = (-3.0, 1.5, 1.0, 0.5, -0.5)
SAMPLE = 2048  # rows whose cosines give the query's own distribution


def features(
    index: Reader, query: str, hits: Sequence[SearchResult], mode: str = "hybrid"
) -> np.ndarray:
    """One row of FEATURES per hit; a lexical search embeds nothing (`cosine_z` 0)."""
    out = np.zeros((len(hits), len(FEATURES)), dtype=np.float64)
    if not hits:
        return out
    chunks = np.array([hit.chunk_id for hit in hits], dtype=np.int64)
    files = np.array([hit.file_id for hit in hits], dtype=np.int64)
    out[:, 0], out[:, 1] = _coverage(index, query, chunks, files)
    if mode != "lexical":
        out[:, 2] = _cosine_z(index, query, chunks)
    out[:, 3] = np.log1p(np.arange(len(hits)))
    return out


def confidences(
    index: Reader, query: str, hits: Sequence[SearchResult], mode: str = "hybrid"
) -> list[float]:
    """Each hit's confidence, never rising down the list."""
    if not hits:
        return []
    weights = np.asarray(COEFFICIENTS, dtype=np.float64)
    logits = weights[0] + features(index, query, hits, mode) @ weights[1:]
    values = np.minimum.accumulate(1.0 / (1.0 + np.exp(-logits)))
    return [round(float(v), 4) for v in values]


def rate(index: Reader, query: str, hits: Sequence[SearchResult], mode: str) -> None:
    """Set each hit's `confidence`, in response order."""
    for hit, value in zip(hits, confidences(index, query, hits, mode), strict=True):
        hit.confidence = value


def _coverage(
    index: Reader, query: str, chunks: np.ndarray, files: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The idf-weighted share of the query's terms in each section, and in its page."""
    from kernel import text_analysis
    from query.score.lexical import bm25_idf, lexical_index

    terms = np.unique(text_analysis.term_ids(query), return_counts=True)[0]
    section = np.zeros(len(chunks))
    page = np.zeros(len(chunks))
    if not len(terms):
        return section, page
    snap = index.snapshot
    n = max(int(snap.chunk_file_ids.shape[0]), 1)
    postings = lexical_index(index).term_chunks(terms)
    weights = np.array([bm25_idf(n, len(p)) if p is not None else 0.0 for p in postings])
    total = float(weights.sum())
    if total <= 0:
        return section, page
    for weight, found in zip(weights, postings, strict=True):
        if found is None:
            continue
        section += weight * np.isin(chunks, found)
        page += weight * np.isin(files, snap.chunk_file_ids[found])
    return section / total, page / total


def _cosine_z(index: Reader, query: str, chunks: np.ndarray) -> np.ndarray:
    """Each section's cosine in standard deviations above the query's mean over the index."""
    from query.rank.search import query_vector
    from query.score.vector import row_dots

    snap = index.snapshot
    if snap.vectors.shape[0] == 0:
        return np.zeros(len(chunks))
    qvec = np.asarray(query_vector(index, query), dtype=np.float32)
    sample = _sample_rows(index)
    spread = row_dots(snap.vectors[sample], qvec)
    mine = row_dots(snap.vectors[chunks], qvec).astype(np.float64)
    std = float(spread.std()) or 1.0
    return (mine - float(spread.mean())) / std


def _sample_rows(index: Reader) -> np.ndarray:
    """Once per snapshot: a fixed, evenly spread sample of rows."""
    snap = index.snapshot
    found = snap.cache.get("confidence_sample")
    if found is None:
        n = int(snap.vectors.shape[0])
        found = np.unique(np.linspace(0, n - 1, num=min(SAMPLE, n)).astype(np.int64))
        snap.cache["confidence_sample"] = found
    return found
