"""One shard's share of a query (`ShardPart`): plain arrays in and out in the shard's own
numbering, with the one-file float32 operations (docs/scale-out.md, "What is built")."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kernel import index_format
from query.score.lexical import LexicalIndex, saturated
from query.score.vector import best_rows, multi_section_pages, page_vectors_of, row_dots, union_rows
from query.shards import stages as shard_stages

# The calls a remote shard answers (query.shards.serve refuses anything else).
CALLS = frozenset(
    {
        "info",
        "term_scores",
        "term_chunks",
        "page_tf",
        "feedback_postings",
        "dots",
        "dots_rows",
        "rows",
        "page_files",
        "page_dots",
        "dense",
        "term_df",
        "stage",
    }
)
SESSIONS = 16  # staged queries a shard keeps the arrays of (then the oldest goes)
SESSION_ROWS = 5_000_000  # ... and at most this many rows' worth of them


@dataclass
class ShardFile:
    """A shard file mapped with its tables opened on first use; what `LexicalIndex` and
    the dense calls read (it quacks like `query.snapshot.Snapshot`)."""

    file: index_format.IndexFile
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | str) -> ShardFile:
        return cls(index_format.read_index(path, lazy=True))

    @property
    def meta(self) -> dict[str, Any]:
        return self.file.meta

    def table(self, name: str):
        return self.file.tables.get(name)

    @cached_property
    def chunk_file_ids(self) -> np.ndarray:
        return index_format.column_array(self.file.tables["chunks"], "file_id").to_numpy()

    @cached_property
    def paths(self) -> list[str]:
        return self.file.tables["files"].column("path").to_pylist()

    @cached_property
    def vectors(self) -> np.ndarray:
        """(chunks, dims) float32 view over the map: no copy (as `Snapshot.load`)."""
        return index_format.vector_matrix(self.file)


class ShardPart:
    """The per-shard calls (module docstring) over one `ShardFile`."""

    def __init__(self, shard: ShardFile):
        self.shard = shard
        self._lexical: LexicalIndex | None = None
        self._norms: dict[tuple, np.ndarray] = {}
        self._pages: tuple[np.ndarray, np.ndarray] | None = None
        self._sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path | str) -> ShardPart:
        return cls(ShardFile.load(path))

    @property
    def lexical(self) -> LexicalIndex:
        if self._lexical is None:
            self._lexical = LexicalIndex.from_snapshot(self.shard)
        return self._lexical

    def call(self, name: str, *args):
        """A named call, as a shard group dispatches it."""
        if name not in CALLS:
            raise ValueError(f"unknown shard call {name!r}")
        return getattr(self, name)(*args)

    # -- lexical ---------------------------------------------------------------------------
    def info(self, lengths: bool = False) -> dict[str, Any]:
        """The shard's chunk count and packed BM25 parameters (and, `lengths`, each
        chunk's length: what a reader needs of a shard to open it, in one round)."""
        lexical = self.lexical
        out = {"chunks": int(lexical.n_chunks), "k1": lexical.k1, "b": lexical.b}
        if lengths:  # (the router needs them all, once, for the mean length in the one-file
            out["lengths"] = lexical.lengths  # order: float32 means are order-sensitive)
        return out

    def norm(self, k1: float, b: float, avg: float) -> np.ndarray:
        """This shard's slice of the global length norm, from the global mean length: the
        expression of `LexicalIndex` element by element, so each chunk gets the same bits."""
        key = (k1, b, avg)
        found = self._norms.get(key)
        if found is None:
            lengths = self.lexical.lengths
            found = k1 * (1.0 - b + b * lengths / (avg or 1.0))
            if len(self._norms) > 4:
                self._norms.clear()
            self._norms[key] = found
        return found

    def term_scores(
        self,
        hashes: np.ndarray,
        weights: np.ndarray,
        idf: np.ndarray,
        norm: tuple[float, float, float],
        start: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """BM25F of this shard's chunks for the terms with the global idf and norm, added to
        `start` (local rows, scores): only the scoring chunks come back, or (None, every score)
        when most do."""
        lexical = self.lexical
        out = np.zeros(lexical.n_chunks, np.float32)
        if start is not None:
            out[np.asarray(start[0], dtype=np.int64)] = start[1]
        k1 = float(norm[0])
        shard_term_scores(lexical, hashes, weights, idf, self.norm(*norm), out, k1)
        rows = np.flatnonzero(out)
        if 2 * len(rows) > len(out):  # most chunks score: the array is smaller than its pairs
            return None, out
        return rows.astype(np.int32), out[rows]

    def term_chunks(self, hashes: np.ndarray) -> list[np.ndarray | None]:
        return self.lexical.term_chunks(hashes)

    def page_tf(self, hashes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """For each term, the local files holding it and their summed tf (a file's chunks
        all live in one shard): what page-level BM25 adds up over the shards."""
        part = self.lexical
        out: list[tuple[np.ndarray, np.ndarray] | None] = []
        for row in part.lookup(hashes).tolist():
            if row < 0:
                out.append(None)
                continue
            pages, tf = part.page_tf(row)
            out.append((pages.astype(np.int32), tf))
        return out

    def term_df(self, hashes: np.ndarray, pages: bool = False) -> dict[str, np.ndarray]:
        """`df` and, with `pages`, `page_df` (files holding each term) of the terms: a
        query's global statistics gathered in one round."""
        out = {"df": self.lexical.document_frequency(hashes).astype(np.int64)}
        if pages:
            found = self.page_tf(hashes)
            out["page_df"] = np.asarray([0 if f is None else len(f[0]) for f in found], np.int64)
        return out

    def feedback_postings(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term hashes, tf, postings per chunk) of the given local chunks, chunk by chunk."""
        part = self.lexical
        hashes, tfs, sizes = [], [], []
        for local in np.asarray(chunks).tolist():
            a, b = int(part.forward_offsets[local]), int(part.forward_offsets[local + 1])
            positions = part.forward_postings[a:b]
            rows = np.searchsorted(part.offsets, positions, side="right") - 1
            hashes.append(part.terms[rows])
            tfs.append(part.tf[positions])
            sizes.append(b - a)
        return (
            np.concatenate(hashes) if hashes else np.zeros(0, np.uint64),
            np.concatenate(tfs) if tfs else np.zeros(0, np.float32),
            np.asarray(sizes, dtype=np.int64),
        )

    # -- dense -----------------------------------------------------------------------------
    def dots(self, vector: np.ndarray) -> np.ndarray:
        """The cosine of every row of this shard (rows and query are unit length)."""
        return row_dots(self.shard.vectors, vector)

    def dots_rows(self, rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
        return row_dots(self.shard.vectors[rows], vector)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.shard.vectors[rows])

    def page_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(local file ids, unit mean vectors) of this shard's pages of several sections: the
        one-file bits, a page's sum being its own."""
        if self._pages is None:
            files = self.shard.chunk_file_ids
            vectors = self.shard.vectors
            dims = vectors.shape[1]
            found = (np.zeros(0, np.int64), np.zeros((0, dims), np.float32))
            pages = multi_section_pages(files, vectors)
            if pages is not None:
                first, _, _, unit = pages
                found = (files[first].astype(np.int64), unit)
            self._pages = found
        return self._pages

    def page_files(self) -> np.ndarray:
        """The local file ids of this shard's multi-section pages (`page_vectors` order)."""
        return self.page_vectors()[0]

    def page_dots(self, vector: np.ndarray) -> np.ndarray:
        """Cosines of this shard's multi-section pages (in `page_vectors` order)."""
        return row_dots(self.page_vectors()[1], vector)

    def dense(
        self,
        query: np.ndarray,
        direction: np.ndarray | None,
        beta: float,
        keep: int,
        rho: float,
        first_pass: str,
        top: int = 0,
        depth: int = 0,
        also: np.ndarray | None = None,
    ) -> dict[str, Any]:
        """The dense side of a hybrid query on this shard: the one-file scorer over its rows
        (`first_pass`), page evidence and the feedback direction, as `DenseScorer.mixed`'s arrays.
        With `top` > 0, only the rows among the `top` best and a `fill` for the rest, which fuses to
        the one-file bits when top >= pool. `depth`: rows rescored (0: the one-file depth); `also`:
        local rows scored exactly."""
        arrays = self._dense_arrays(query, direction, beta, keep, rho, first_pass, depth, also)
        return _dense_answer(*arrays, top)

    def _dense_arrays(self, query, direction, beta, keep, rho, first_pass, depth, also):
        """(raw, cosine, moved) of every row of this shard (`dense`)."""
        from query.score.vector import dense_scorer

        pages = self.page_side() if rho > 0 else None
        scorer = dense_scorer(_ShardReader(self.shard, first_pass), pages, rho)
        if depth and getattr(scorer, "lists", None) is None:  # IVF lists keep their own
            scorer.depth = int(depth)
        if getattr(scorer, "lists", None) is not None and also is not None and len(also):
            return scorer.mixed(query, direction, beta, keep, rho, also=also)
        return scorer.mixed(query, direction, beta, keep, rho)

    # -- a staged query (query.rank.shard_search) ------------------------------------------------
    def add_term_scores(self, out, hashes, weights, idf, spec: tuple) -> np.ndarray:
        """out += BM25F of the terms (global idf, the global norm's parameters `spec`)."""
        return shard_term_scores(self.lexical, hashes, weights, idf, self.norm(*spec), out, spec[0])

    @staticmethod
    def dense_answer(raw, cosine, moved, top: int) -> dict[str, Any]:
        return _dense_answer(raw, cosine, moved, top)

    def stage(
        self, session: str, step: str, args: dict[str, Any], replay: list | None = None
    ) -> dict[str, Any]:
        """One round of a staged query: the shard's arrays stay here by `session`, the answer is a
        few best rows and maxima. `replay`: earlier rounds run afresh first (a lost session)."""
        with self._lock:
            state = self._sessions.get(session)
            if state is None or replay is not None:
                if state is None and step != "bm25" and replay is None:
                    raise ValueError(f"shard session {session!r} is gone: start again")
                state = self._sessions[session] = {}
                # ~12 float32 arrays of the shard's rows a query: fewer kept for a big
                # shard; a lost one is replayed by the router
                keep = max(2, min(SESSIONS, SESSION_ROWS // max(1, self.lexical.n_chunks)))
                while len(self._sessions) > keep:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(session)
        for done, given in replay or ():
            shard_stages.run(self, state, done, given)
        return shard_stages.run(self, state, step, args)

    def page_side(self):
        """This shard's multi-section pages as `query.score.vector.PageVectors` (local rows)."""
        found = self.shard.cache.get("page_vectors")
        if found is None:
            found = page_vectors_of(self.shard.chunk_file_ids, self.shard.vectors)
            self.shard.cache["page_vectors"] = found
        return found


def _dense_answer(raw, cosine, moved, top: int) -> dict[str, Any]:
    """`ShardPart.dense`'s answer from the full arrays: with `top` > 0 the best rows only."""
    n = len(cosine)
    if not top or n <= top:
        return {"raw": raw, "cosine": cosine, "moved": moved}
    rows = best_rows(cosine, top)
    if moved is not cosine:
        rows = union_rows(rows, best_rows(moved, top))
    fills = [float(np.partition(a, n - top)[n - top]) for a in (cosine, moved)]
    return {
        "rows": rows.astype(np.int32),
        "raw": raw[rows],
        "cosine": cosine[rows],
        "moved": moved[rows],
        # The raw cosine is only shown (`explain`): the cosine's fill stands in for it.
        "fill": [fills[0], fills[0], fills[1]],
    }


@dataclass
class _ShardConfig:
    search_first_pass: str


@dataclass
class _ShardReader:
    """What `query.score.vector.dense_scorer` reads of a reader (its snapshot and its first-pass
    setting), for one shard: the int8 copies it builds stay in the shard file's cache."""

    snapshot: ShardFile
    first_pass: str

    @property
    def config(self) -> _ShardConfig:
        return _ShardConfig(self.first_pass)


def shard_term_scores(
    lexical: LexicalIndex,
    hashes: np.ndarray,
    weights: np.ndarray,
    idf: np.ndarray,
    norm: np.ndarray,
    out: np.ndarray,
    k1: float | None = None,
) -> np.ndarray:
    """One shard's part of a BM25F query: `out` += weight * idf * saturated tf, term by term,
    with `LexicalIndex.add_terms`' float32 operations (the one-file bits). `k1`: the norm's."""
    k1 = lexical.k1 if k1 is None else k1
    for row, weight, term_idf in zip(
        lexical.lookup(hashes).tolist(), weights.tolist(), idf.tolist(), strict=True
    ):
        if row < 0:
            continue
        a, b = int(lexical.offsets[row]), int(lexical.offsets[row + 1])
        ids = lexical.chunk_ids[a:b]
        term = saturated(lexical.tf[a:b], norm[ids], k1)
        term *= np.float32(term_idf)
        term *= np.float32(weight)
        out[ids] += term
    return out
