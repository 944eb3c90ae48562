"""Query-term reweighting from the first ranking: which words of a long query matter.

A verbose query ("I'd like to find articles describing the use of singular value
decomposition in digital image processing") carries framing words ("articles", "find",
"like") that a collection's documents rarely use, so idf rates them high and BM25 lifts any
section that happens to say "articles". Robertson and Sparck Jones's relevance weight tells
them apart once some relevant documents are known; with the first fused ranking's best `R`
sections standing in for them (pseudo-relevance, as in Okapi at TREC), a query term found in
`r` of them gets

    w = max(0, idf + γ * log((r + 0.5) / (R - r + 0.5)))

in place of its idf: a word in none of the likely answers is discounted, one in all of them
counts more. γ = 0 is plain BM25F. The lexical side is then re-scored once with the new
weights (one more pass over the query terms' postings).
"""

from __future__ import annotations

import numpy as np

from kernel import text_analysis


def factors(
    lexical, hashes: np.ndarray, chunks: np.ndarray, gamma: float, down_only: bool = False
) -> np.ndarray:
    """Each term's weight over its idf (1: unchanged), from its presence in `chunks`."""
    top = np.sort(np.asarray(chunks))
    big = len(top)
    found = np.zeros(len(hashes), dtype=np.float64)
    for i, ids in enumerate(lexical.term_chunks(hashes)):
        if ids is not None and len(ids):
            at = np.searchsorted(ids, top)
            found[i] = np.count_nonzero(ids[np.minimum(at, len(ids) - 1)] == top)
    idf = lexical.term_idf(hashes).astype(np.float64)
    relevance = np.log((found + 0.5) / (big - found + 0.5))
    if down_only:
        relevance = np.minimum(relevance, 0.0)
    weight = np.maximum(idf + gamma * relevance, 0.0)
    return np.where(idf > 0, weight / np.where(idf > 0, idf, 1.0), 1.0)


def reweighted(
    lexical, query: str, chunks: np.ndarray, gamma: float, size: int, down_only: bool = False
) -> np.ndarray:
    """BM25F of every section with each query term's idf replaced by its relevance weight."""
    out = np.zeros(size, dtype=np.float32)
    hashes = text_analysis.term_ids(query)
    if len(hashes) == 0 or not len(chunks):
        return out
    unique, counts = np.unique(hashes, return_counts=True)
    weights = counts * factors(lexical, unique, chunks, gamma, down_only)
    return lexical.add_terms(out, lexical.lookup(unique), weights.astype(np.float32))
