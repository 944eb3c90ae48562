"""Whether a query has real evidence of a match in this index, or an empty answer is honest:
`coverage + closeness >= MIN_EVIDENCE`, coverage being the share of the query's word weight
one of the best BM25 sections holds, closeness its best cosine between random letters' and
the index's own headings' (docs/search-quality.md, "An honest empty answer" and the
sections after it). `--mode semantic` is not judged."""

from __future__ import annotations

import random
import string
from typing import TYPE_CHECKING

import numpy as np

__all__ = ["MIN_EVIDENCE", "closeness", "coverage", "evidence", "no_evidence", "probe_queries"]

if TYPE_CHECKING:
    from query.snapshot import Reader

PROBES = 64  # random letter strings, and at most as many headings, per reference
TOP_SECTIONS = 10  # the best BM25 sections whose coverage is read
MIN_EVIDENCE = 0.45  # coverage + closeness a query needs (bench/no_match.py --fit)
SPREAD = 3.0  # the least span of closeness, in the letters' standard deviations
BLOCK_ROWS = 16_384  # sections per matrix product of the references (8 MB of scores)


def no_evidence(index: Reader, query: str, mode: str) -> str | None:
    """Why nothing in the index matches `query` (the one-line reason), or None when
    something does (or when that cannot be told: never an empty answer by accident)."""
    if not query or not query.strip() or mode == "semantic":
        # (`--mode semantic` asks for the nearest sections by meaning, close or not)
        return None
    with index.pinned():  # one snapshot for every read (the caller's, when it holds one)
        return _judged(index, query, mode)


def _judged(index: Reader, query: str, mode: str) -> str | None:
    terms = _terms(query)
    if not len(terms):  # stop words or punctuation only: nothing to judge by
        return None
    in_index = _words_in_index(index, terms)
    if mode == "lexical":
        return None if in_index else _reason(query, None, lexical_only=True)
    # Both parts are >= 0: the cheaper one first (closeness once its references are measured,
    # else coverage), the other only when the first is short.
    near = None
    if "no_match_references" in index.snapshot.cache:
        near = closeness(index, query, in_index)
        if near >= MIN_EVIDENCE:
            return None
    held = coverage(index, query) if in_index else 0.0
    if held >= MIN_EVIDENCE:
        return None
    if held + (closeness(index, query, in_index) if near is None else near) >= MIN_EVIDENCE:
        return None
    return _reason(query, held if in_index else None)


def evidence(index: Reader, query: str) -> float:
    """The rule's number for a query (coverage + closeness), every part measured: what
    bench/no_match.py --fit reads."""
    with index.pinned():
        in_index = _words_in_index(index, _terms(query))
        held = coverage(index, query) if in_index else 0.0
        return held + closeness(index, query, in_index)


def _reason(query: str, held: float | None, lexical_only: bool = False) -> str:
    """The one line: `held` is the coverage when some query word is in the index."""
    shown = query if len(query) <= 60 else query[:57] + "..."
    if held is None:
        why = "no query word is in the index"
    else:
        why = f"the best sections hold {held:.0%} of the query's word weight"
    if lexical_only:
        return f'no section matches "{shown}" ({why})'
    return f'no section matches "{shown}" ({why}, and nothing is close in meaning)'


def _words_in_index(index: Reader, terms: np.ndarray) -> bool:
    from query.score.lexical import lexical_index

    # document frequency, not term rows: a sharded index has none (its df is kept per generation)
    return bool(np.any(lexical_index(index).document_frequency(terms) > 0))


def _terms(query: str) -> np.ndarray:
    """The query's distinct analysed terms (stop words are none)."""
    from kernel import text_analysis

    # return_counts: a plain np.unique imports numpy.ma (dear on a cold search)
    return np.unique(text_analysis.term_ids(query), return_counts=True)[0]


def coverage(index: Reader, query: str) -> float:
    """The largest idf share of the query's words one of the best BM25 sections holds."""
    from query.rank.confidence import section_coverage

    bm25 = _bm25(index, query)
    best = np.flatnonzero(bm25 > 0)
    if len(best) > TOP_SECTIONS:  # the ten best in linear time (their order does not matter)
        best = best[np.argpartition(-bm25[best], TOP_SECTIONS - 1)[:TOP_SECTIONS]]
    best = best.astype(np.int64)
    return float(section_coverage(index, query, best).max()) if len(best) else 0.0


def _bm25(index: Reader, query: str) -> np.ndarray:
    """The query's BM25F of every section: the search's own when it kept it."""
    from query.score.lexical import lexical_index

    kept = _kept(index, query, "bm25")
    return kept if kept is not None else lexical_index(index).scores(query)


def _kept(index: Reader, query: str, part: str) -> np.ndarray | None:
    """A part of this query's scores of every section, as the search just kept them
    (query.rank.search's last scores), or None."""
    n = int(index.snapshot.chunk_file_ids.shape[0])
    last = index.snapshot.cache.get("last_scores")
    kept = last[1][1].get(part) if last is not None and last[0][1] == query else None
    return kept if isinstance(kept, np.ndarray) and kept.shape == (n,) else None


def closeness(index: Reader, query: str, words: bool = True) -> float:
    """The query's best cosine between the letters' (0) and the headings' (1); with none of its
    `words` in the index, close only past the best letter probe's."""
    from query.rank.search import query_vector
    from query.score.vector import row_dots

    nonsense, text, letters_best = _references(index)
    vectors = index.snapshot.vectors
    if vectors.shape[0] == 0:
        return 0.0
    best = _kept_best_cosine(index, query)
    if best is None:
        best = float(np.max(row_dots(vectors, query_vector(index, query))))
    if not words and best <= letters_best:
        return 0.0
    return max((best - nonsense) / (text - nonsense), 0.0)


def _kept_best_cosine(index: Reader, query: str) -> float | None:
    """The best cosine among the search's own cosines of this query (an IVF pass's `Spread`
    holds it among its rescored rows), or None."""
    from query.score.vector import Spread

    last = index.snapshot.cache.get("last_scores")
    kept = last[1][1].get("cosine") if last is not None and last[0][1] == query else None
    if isinstance(kept, Spread) and len(kept.exact):
        return float(np.max(kept.exact))
    kept = _kept(index, query, "cosine")
    return None if kept is None else float(np.max(kept))


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


def _headings(index: Reader) -> tuple[list[str], np.ndarray]:
    """Up to PROBES section headings of two words or more, spread over the index, and their
    sections' files."""
    snap = index.snapshot
    n = int(snap.chunk_file_ids.shape[0])
    table = snap.table("chunks")
    if n == 0 or table is None or "heading" not in table.column_names:
        return [], np.zeros(0, dtype=np.int64)  # (a sharded index keeps no chunk table)
    rows = np.unique(np.linspace(0, n - 1, min(n, 4 * PROBES)).astype(np.int64))
    column = table.column("heading")  # by row, not `take`: that would import pyarrow.compute
    found = [column[int(row)].as_py() for row in rows]
    picked = [i for i, h in enumerate(found) if h and len(h.split()) >= 2][:PROBES]
    files = np.asarray(snap.chunk_file_ids)[rows[picked]]
    return [found[i] for i in picked], files


def _references(index: Reader) -> tuple[float, float, float]:
    """Once per snapshot: the mean best cosine of the letter probes and of the headings, and the
    letters' largest."""
    snap = index.snapshot
    found = snap.cache.get("no_match_references")
    if found is None:
        headings, files = _headings(index)
        best = _best_cosines(index, probe_queries() + headings, files)
        letters, text = best[:PROBES], best[PROBES:]
        nonsense = float(letters.mean())
        span = max(float(text.mean()) - nonsense if len(text) else 0.0, SPREAD * letters.std())
        top = nonsense + max(span, 1e-6)
        found = snap.cache["no_match_references"] = (nonsense, top, float(letters.max()))
    return found


def _best_cosines(index: Reader, texts: list[str], files: np.ndarray | None = None) -> np.ndarray:
    """Each text's best first-pass cosine over every section (no feedback moved it); the
    last len(files) texts leave out the sections of their own file."""
    from query.score.vector import row_dots

    snap = index.snapshot
    vectors = snap.vectors
    if vectors.shape[0] == 0 or not texts:
        return np.full(len(texts), -1.0)
    asked = _query_vectors(index, texts).astype(np.float32, copy=False)
    own = np.full(len(texts), -1, dtype=np.int64)  # the file each text leaves out (-1: none)
    if files is not None and len(files):
        own[len(texts) - len(files) :] = files
    file_ids = np.asarray(snap.chunk_file_ids)
    best = np.full(len(texts), -1.0)
    if not isinstance(vectors, np.ndarray):  # a sharded index's rows answer one vector a call
        for at, vector in enumerate(asked):
            scores = np.where(file_ids == own[at], -1.0, row_dots(vectors, vector))
            best[at] = float(np.max(scores))
        return best
    for first in range(0, vectors.shape[0], BLOCK_ROWS):  # one product per block of rows
        block = np.asarray(vectors[first : first + BLOCK_ROWS], dtype=np.float32) @ asked.T
        if not np.isfinite(block).all():  # a damaged row scores nothing
            np.nan_to_num(block, copy=False, nan=-1.0, posinf=-1.0, neginf=-1.0)
        block[file_ids[first : first + BLOCK_ROWS, None] == own[None, :]] = -1.0
        best = np.maximum(best, block.max(axis=0))
    return best


def _query_vectors(index: Reader, texts: list[str]) -> np.ndarray:
    """The texts embedded as a query is (query.rank.search.query_vector): one by one through a
    local model's quick query path, in one request to a remote provider."""
    from query.rank.search import query_vector

    if index.config.embedding_provider != "local":
        return np.asarray(index.provider().embed(texts))
    return np.stack([query_vector(index, text, asked=False) for text in texts])
