"""Whether a query has any real evidence of a match in this index, or an empty answer is honest.

A hybrid ranking always has a best section: a query of random letters still gets the sections
whose vectors happen to lie nearest, and the pseudo-relevance feedback round then found "their"
words in them. Neither is evidence. A query has some when either side says so on its own:

- lexical: one of its words (analysed as the index is) is in some section;
- dense: its best cosine over the index is above what nonsense reaches on this same index: the
  mean plus three standard deviations of the best cosines of PROBES random letter strings,
  embedded the way the query is (measured once per snapshot). An index's cosines depend on its
  model and its texts (a static model's best cosine for letters is ~0.25-0.45 on one set,
  ~0.19-0.31 on another, up to 0.52 on a third), so no constant fits every index.

A stricter lexical side (one of the 10 best sections must hold half of the query's word
weight) also answered queries of another subject `no_match`, but cost three of the five
evaluation sets 0.007-0.034 nDCG@10 (short or misspelt questions): not kept
(docs/search-quality.md, "An honest empty answer", with bench/no_match.py's numbers).
`--mode semantic` is not judged: it asks for the sections nearest in meaning, however far.
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


def no_evidence(index: Reader, query: str, mode: str) -> str | None:
    """Why nothing in the index matches `query` (the one-line reason), or None when
    something does (or when that cannot be told: never an empty answer by accident)."""
    if not query or not query.strip() or mode == "semantic":
        # (`--mode semantic` asks for the nearest sections by meaning, close or not)
        return None
    terms = _terms(query)
    if not len(terms):  # stop words or punctuation only: nothing to judge by
        return None
    if _words_in_index(index, terms):
        return None
    if mode != "lexical" and _best_cosine(index, query) >= dense_threshold(index):
        return None
    return _reason(query, lexical_only=mode == "lexical")


def _reason(query: str, lexical_only: bool = False) -> str:
    shown = query if len(query) <= 60 else query[:57] + "..."
    if lexical_only:
        return f'no section matches "{shown}" (no query word is in the index)'
    return (
        f'no section matches "{shown}" (no query word is in the index, and nothing is close '
        "in meaning)"
    )


def _words_in_index(index: Reader, terms: np.ndarray) -> bool:
    from query.score.lexical import lexical_index

    # document frequency, not lookup: a sharded index has no term rows (its lookup is the
    # identity); its frequencies are kept per generation, so the search's own ask answers
    return bool(np.any(lexical_index(index).document_frequency(terms) > 0))


def _terms(query: str) -> np.ndarray:
    """The query's distinct analysed terms (stop words are none)."""
    from kernel import text_analysis

    # return_counts: a plain np.unique imports numpy.ma (~18 ms of a cold search here)
    return np.unique(text_analysis.term_ids(query), return_counts=True)[0]


def _best_cosine(index: Reader, query: str) -> float:
    """The query's best first-pass cosine over every section (no feedback moved it)."""
    from query.rank.search import query_vector
    from query.score.vector import cosine_scores

    vectors = index.snapshot.vectors
    if vectors.shape[0] == 0:
        return -1.0
    qvec = query_vector(index, query)
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
