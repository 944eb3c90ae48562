"""Term proximity: a BM25TP-style bonus for query terms found close together in a section.

BM25 scores each query term on its own, so "singular value decomposition" is as good spread
over three paragraphs as said in one phrase. Rasolofo and Savoy (ECIR 2003, "Term proximity
scoring for keyword-based retrieval systems") add, for each pair of distinct query terms,

    tp(a, b) = min(idf_a, idf_b) * (k1 + 1) * acc / (K + acc),  acc = sum over occurrence pairs
               of a and b at most `window` terms apart of 1 / distance^2

with K BM25's length norm of the section. The index keeps no positions, so they are found at
query time, only for the first-pass candidates (the `pool` best BM25F sections), from the
section text analysed by `kernel.text_analysis` exactly as the index was (stop words dropped,
stemmed): a distance counts content words. The bonus is 0 outside the pool and for queries of
one term. Which pairs count: every pair (BM25TP) or only words next to each other in the query
(sequential dependence, Metzler and Croft, SIGIR 2005). Measured on the five sets and tldr in
docs/search-quality.md ("CACM round 5"): off by default (`query.score.fusion.FusionParams`).
"""

from __future__ import annotations

import numpy as np

from kernel import text_analysis

CACHE_LIMIT = 50_000  # sections whose analysed words a reader keeps (then starts afresh)


def chunk_words(snapshot, chunk_ids: list[int]) -> list[list[str]]:
    """Each section's analysed words in order, cached per snapshot (a long-lived reader
    analyses a section once), at most CACHE_LIMIT sections."""
    cache = snapshot.cache.get("proximity_words")
    if cache is None or len(cache) > CACHE_LIMIT:
        cache = snapshot.cache["proximity_words"] = {}
    missing = [c for c in chunk_ids if c not in cache]
    if missing:
        texts = snapshot.table("chunks").column("text").take(missing).to_pylist()
        for chunk, text in zip(missing, texts, strict=True):
            cache[chunk] = text_analysis.words(text or "")
    return [cache[c] for c in chunk_ids]


def query_pairs(sequence: list[str], adjacent: bool) -> list[tuple[str, str]]:
    """The term pairs whose closeness counts: each pair of query words next to each other
    (after stop words; sequential dependence, Metzler and Croft 2005), or every pair."""
    terms = list(dict.fromkeys(sequence))
    if adjacent:
        next_to = zip(sequence, sequence[1:], strict=False)
        pairs = [tuple(sorted((a, b))) for a, b in next_to if a != b]
    else:
        pairs = [tuple(sorted((a, b))) for i, a in enumerate(terms) for b in terms[i + 1 :]]
    return list(dict.fromkeys(pairs))


def closeness(words: list[str], weights: dict[tuple[str, str], float], window: int) -> dict:
    """acc per pair: sum of 1 / d^2 over its two terms' occurrences d <= window apart."""
    wanted = {t for pair in weights for t in pair}
    found = [(i, w) for i, w in enumerate(words) if w in wanted]
    acc: dict[tuple[str, str], float] = {}
    for k, (p, a) in enumerate(found):
        for q, b in found[k + 1 :]:
            d = q - p
            if d > window:
                break
            if a != b:
                pair = (a, b) if a < b else (b, a)
                if pair in weights:
                    acc[pair] = acc.get(pair, 0.0) + 1.0 / (d * d)
    return acc


def scores(
    lexical,
    snapshot,
    query: str,
    bm25: np.ndarray,
    pool: int,
    window: int,
    adjacent: bool = True,
    specific: bool = False,
    key_terms: int = 0,
) -> np.ndarray | None:
    """The proximity bonus of every section (0 outside the `pool` best by `bm25`); None when
    the query has no pair of terms the index knows (nothing to measure). Only sections whose
    postings hold both terms of some pair are read and analysed."""
    from query.score.fusion import best

    sequence = text_analysis.words(query)
    terms = list(dict.fromkeys(sequence))
    if len(terms) < 2:
        return None
    hashes = np.fromiter((text_analysis.term_hash(t) for t in terms), np.uint64, len(terms))
    idf = dict(zip(terms, lexical.term_idf(hashes).tolist(), strict=True))
    known = dict(zip(terms, (lexical.lookup(hashes) >= 0).tolist(), strict=True))
    keys = set(sorted(terms, key=lambda t: -idf[t])[:key_terms]) if key_terms else set(terms)
    weights = {
        pair: min(idf[pair[0]], idf[pair[1]])
        for pair in query_pairs(sequence, adjacent)
        if known[pair[0]] and known[pair[1]] and pair[0] in keys and pair[1] in keys
    }
    chunks = best(bm25, pool)
    norm_of = getattr(lexical, "norm", None)  # a sharded index keeps no per-section norm
    if not weights or not len(chunks) or norm_of is None:
        return None
    # which query terms each pool section holds, from the postings (a term's ids ascend)
    order = np.argsort(chunks, kind="stable")
    ranked = chunks[order]
    holds = {}
    for term, ids in zip(terms, lexical.term_chunks(hashes), strict=True):
        has = np.zeros(len(chunks), dtype=bool)
        if ids is not None and len(ids):
            at = np.minimum(np.searchsorted(ids, ranked), len(ids) - 1)
            has[order] = ids[at] == ranked
        holds[term] = has
    need = np.zeros(len(chunks), dtype=bool)
    for a, b in weights:
        need |= holds[a] & holds[b]
    picked = chunks[need].tolist()
    out = np.zeros(len(bm25), dtype=np.float32)
    if not picked:
        return out
    k1 = float(lexical.k1)
    norms = norm_of[np.asarray(picked)].tolist()  # K = k1 * (1 - b + b * len / avg)
    found = [closeness(w, weights, window) for w in chunk_words(snapshot, picked)]
    if specific:  # a pair found close in most of the pool is a common phrase: idf in the pool
        size = len(chunks)
        df = {p: sum(p in acc for acc in found) for p in weights}
        top = np.log1p((size + 0.5) / 0.5)
        weights = {
            p: w * np.log1p((size - df[p] + 0.5) / (df[p] + 0.5)) / top for p, w in weights.items()
        }
    for chunk, acc, norm in zip(picked, found, norms, strict=True):
        if acc:
            out[chunk] = sum(weights[p] * (k1 + 1.0) * a / (norm + a) for p, a in acc.items())
    return out
