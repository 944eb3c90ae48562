"""Whether a query has any real evidence of a match in this index, or an empty answer is honest.

A hybrid ranking always has a best section: a query of random letters still gets the sections
whose vectors happen to lie nearest, and the pseudo-relevance feedback round then finds "their"
words in them. Neither is evidence. A query has some when either side says so on its own:

- lexical: one of the query's best BM25F sections (its first 10, before any feedback) holds at
  least half of the query's word weight (the sum of its terms' idf; a word the index lacks
  weighs the most). A query made of words from another subject shares a few common words with
  the index, scattered over sections that hold none of the rest.
- dense: the query's best cosine over the index is above what nonsense reaches on this same
  index: the mean plus three standard deviations of the best cosines of PROBES random letter
  strings, embedded the way the query is (measured once per snapshot). An index's cosines
  depend on its model and its texts (a static model's best cosine for letters is ~0.25-0.45
  on one set, ~0.19-0.31 on another), so no constant fits every index.

`--mode semantic` is not judged: it asks for the sections nearest in meaning, however far.
The numbers behind the rule (bench/no_match.py) are in docs/search-quality.md, "An honest
empty answer".
"""

from __future__ import annotations

import random
import string
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from query.snapshot import Reader

PROBES = 64  # random letter strings whose best cosines set the dense threshold
SPREAD = 3.0  # standard deviations above the probes' mean
WORD_SHARE = 0.5  # share of the query's word weight one section must hold
TOP_SECTIONS = 10  # the best BM25F sections looked at


def no_evidence(index: Reader, query: str, mode: str, bm25: np.ndarray | None = None) -> str | None:
    """Why nothing in the index matches `query` (the one-line reason), or None when
    something does (or when that cannot be told: never an empty answer by accident).
    `bm25`: the query's first-pass BM25F scores when the search already has them."""
    if not query or not query.strip() or mode == "semantic":
        # (`--mode semantic` asks for the nearest sections by meaning, close or not)
        return None
    try:
        if not len(_terms(query)):  # stop words or punctuation only: nothing to judge by
            return None
        words_in_index, held = _lexical_evidence(index, query, bm25)
        if held >= WORD_SHARE:
            return None
        if mode == "lexical":
            return None if words_in_index else _reason(query, False, lexical_only=True)
        if _best_cosine(index, query) >= dense_threshold(index):
            return None
    except Exception:  # a sharded or unusual index: keep the answer the ranking gave
        return None
    return _reason(query, words_in_index)


def _reason(query: str, words_in_index: bool, lexical_only: bool = False) -> str:
    shown = query if len(query) <= 60 else query[:57] + "..."
    words = (
        "no section holds most of the query's words"
        if words_in_index
        else "no query word is in the index"
    )
    if lexical_only:
        return f'no section matches "{shown}" ({words})'
    return f'no section matches "{shown}" ({words}, and nothing is close in meaning)'


def _lexical_evidence(index: Reader, query: str, bm25=None) -> tuple[bool, float]:
    """(whether any query word is in the index, the largest share of the query's word weight
    one of its TOP_SECTIONS best BM25F sections holds)."""
    from query.score.lexical import lexical_index

    hashes = _terms(query)
    lexical = lexical_index(index)
    postings = lexical.term_chunks(hashes)
    if all(p is None for p in postings):
        return False, 0.0
    if bm25 is None or len(bm25) != lexical.n_chunks:
        bm25 = lexical.scores(query)
    top = np.argsort(-bm25, kind="stable")[:TOP_SECTIONS]
    top = top[bm25[top] > 0]
    if not len(top):
        return True, 0.0
    idf = lexical.term_idf(hashes).astype(np.float64)
    held = np.zeros(len(top))
    for weight, chunks in zip(idf.tolist(), postings, strict=True):
        if chunks is not None:
            held += weight * np.isin(top, chunks)
    return True, float(held.max() / idf.sum()) if idf.sum() > 0 else 0.0


def _terms(query: str) -> np.ndarray:
    """The query's distinct analysed terms (stop words are none)."""
    from kernel import text_analysis

    return np.unique(text_analysis.term_ids(query))


def _best_cosine(index: Reader, query: str) -> float:
    """The query's best first-pass cosine over every section (no feedback moved it)."""
    from query.rank.search import _vector_of
    from query.score.fusion_params import params_for
    from query.score.vector import cosine_scores

    vectors = index.snapshot.vectors
    if vectors.shape[0] == 0:
        return -1.0
    qvec = _vector_of(index, query)(params_for(index))
    return float(np.max(cosine_scores(vectors, qvec)))


def probe_queries(count: int = PROBES, seed: int = 0) -> list[str]:
    """Random letter strings of one to three words (the same ones on every run)."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    return [
        " ".join(
            "".join(rng.choice(letters) for _ in range(rng.randint(5, 12)))
            for _ in range(rng.randint(1, 3))
        )
        for _ in range(count)
    ]


def dense_threshold(index: Reader) -> float:
    """Once per snapshot: the best cosine nonsense reaches on this index (see the module)."""
    snap = index.snapshot
    found = snap.cache.get("no_match_threshold")
    if found is None:
        best = np.array([_best_cosine(index, probe) for probe in probe_queries()])
        found = snap.cache["no_match_threshold"] = float(best.mean() + SPREAD * best.std())
    return found
