"""Lexical scoring: BM25F over the postings in the mapped index, with NumPy only.

The `lexical` table (see `mdvdb.index_format.LEXICAL_SCHEMA`) is CSC-like: sorted term hashes,
one offsets buffer, flat chunk ids and precomputed weights. A query is analysed with the same
`mdvdb.text_analysis` as the index, its terms found by `searchsorted`, and each term's weights
added into a dense score vector: no per-query allocation beyond that vector, no Python loop over
postings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdvdb import index_format, text_analysis
from mdvdb.index_format import IndexFormatError


class LexicalUnavailable(IndexFormatError):
    """The index has no usable lexical postings (missing, or of another analyzer)."""


@dataclass
class LexicalIndex:
    terms: np.ndarray  # uint64, sorted
    offsets: np.ndarray  # int32 or int64, len(terms) + 1
    chunk_ids: np.ndarray  # int32
    weights: np.ndarray  # float32
    n_chunks: int
    # Forward view (chunk -> its term rows and p(term | chunk)) for pseudo-relevance feedback.
    forward_offsets: np.ndarray
    forward_rows: np.ndarray
    forward_shares: np.ndarray
    # Page level (`page_scores`): each posting's field-weighted tf, each chunk's length and
    # file; None in an index without the tf tables.
    tf: np.ndarray | None = None
    lengths: np.ndarray | None = None
    chunk_files: np.ndarray | None = None

    @classmethod
    def from_snapshot(cls, snapshot) -> LexicalIndex:
        """Zero-copy views over the mapped `lexical` table; refuses other analyzers."""
        meta = snapshot.meta.get("lexical") or {}
        table = snapshot.table("lexical")
        path = snapshot.file.path
        if table is None or not meta:
            raise LexicalUnavailable(
                f"{path} has no lexical postings (built by an older mdvdb): run `mdvdb ingest`"
            )
        if meta.get("analyzer") != text_analysis.ANALYZER_VERSION:
            raise LexicalUnavailable(
                f"{path} holds lexical postings of analyzer {meta.get('analyzer')!r}; this mdvdb "
                f"reads {text_analysis.ANALYZER_VERSION!r}: run `mdvdb ingest` to rebuild them"
            )
        forward = snapshot.table("lexical_forward")
        if forward is None:
            raise LexicalUnavailable(f"{path} has no lexical_forward table: run `mdvdb ingest`")
        n_chunks = snapshot.table("chunks").num_rows
        ids, weights = _lists(table, "chunk_ids"), _lists(table, "weights")
        rows, shares = _lists(forward, "term_rows"), _lists(forward, "shares")
        tf_table, lengths_table = snapshot.table("lexical_tf"), snapshot.table("lexical_lengths")
        page = tf_table is not None and lengths_table is not None
        return cls(
            terms=_values(table, "term", np.uint64),
            offsets=ids[0],
            chunk_ids=ids[1],
            weights=weights[1],
            n_chunks=n_chunks,
            forward_offsets=rows[0],
            forward_rows=rows[1],
            forward_shares=shares[1],
            tf=_values(tf_table, "tf", np.float32) if page else None,
            lengths=_values(lengths_table, "length", np.float32) if page else None,
            chunk_files=snapshot.chunk_file_ids if page else None,
        )

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Row of each term hash, -1 where the index does not have it."""
        if len(self.terms) == 0:
            return np.full(len(hashes), -1, dtype=np.int64)
        rows = np.searchsorted(self.terms, hashes)
        rows = np.minimum(rows, len(self.terms) - 1)
        return np.where(self.terms[rows] == hashes, rows, -1)

    def add_terms(self, out: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """out += sum of weight * postings(row): the one scoring loop, over query terms."""
        for row, weight in zip(rows.tolist(), weights.tolist(), strict=True):
            if row < 0:
                continue
            a, b = int(self.offsets[row]), int(self.offsets[row + 1])
            out[self.chunk_ids[a:b]] += self.weights[a:b] * np.float32(weight)
        return out

    def feedback_terms(
        self, chunks: np.ndarray, scores: np.ndarray, count: int, by_idf: bool = False
    ):
        """RM3-style expansion: terms of the feedback chunks weighted by sum over chunks of
        p(term | chunk) * the chunk's share of the feedback scores; the `count` heaviest as
        (rows, weights). `by_idf` picks the terms by weight * idf instead (keeping their RM3
        weights): boilerplate that fills short chunks (a journal name, a year) is frequent
        in them but in every chunk, so it does not tell the feedback chunks apart."""
        begin, end = self.forward_offsets[chunks], self.forward_offsets[chunks + 1]
        sizes = end - begin
        if sizes.sum() == 0 or scores.sum() <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        starts = np.r_[0, np.cumsum(sizes)]
        gather = np.repeat(begin - starts[:-1], sizes) + np.arange(starts[-1])
        rows = self.forward_rows[gather]
        mass = self.forward_shares[gather] * np.repeat(scores / scores.sum(), sizes)
        unique, inverse = np.unique(rows, return_inverse=True)
        totals = np.bincount(inverse, weights=mass)
        rank = totals
        if by_idf:
            df = (self.offsets[unique + 1] - self.offsets[unique]).astype(np.float64)
            rank = totals * np.log1p((self.n_chunks - df + 0.5) / (df + 0.5))
        best = np.argsort(-rank, kind="stable")[:count]
        return unique[best].astype(np.int64), totals[best].astype(np.float32)

    def page_scores(self, query: str, k1: float = 1.2, b: float = 0.75) -> np.ndarray | None:
        """BM25 of every page (file) as one document: a section that does not repeat its
        page's topic words still belongs to a page that has them. Built at query time from
        the chunk postings: a page's tf is the sum of its chunks' field-weighted tf (so the
        title, in every chunk, saturates), its length the sum of their lengths, and df counts
        pages. Chunks of a file are contiguous and a term's chunk ids ascend, so a term's
        pages come sorted and one `reduceat` per term does it. None without the tf tables."""
        if self.tf is None or self.lengths is None or self.chunk_files is None:
            return None
        n_files = int(self.chunk_files[-1]) + 1 if len(self.chunk_files) else 0
        out = np.zeros(n_files, dtype=np.float32)
        hashes = text_analysis.term_ids(query)
        if len(hashes) == 0 or n_files == 0:
            return out
        page_len, avg = self._page_lengths(n_files)
        unique, counts = np.unique(hashes, return_counts=True)
        for row, count in zip(self.lookup(unique).tolist(), counts.tolist(), strict=True):
            if row < 0:
                continue
            a, b_ = int(self.offsets[row]), int(self.offsets[row + 1])
            files = self.chunk_files[self.chunk_ids[a:b_]]
            starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]])
            pages = files[starts]
            tf = np.add.reduceat(self.tf[a:b_], starts)
            df = len(pages)
            idf = np.log1p((n_files - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * page_len[pages] / avg)
            out[pages] += np.float32(count * idf) * (tf * (k1 + 1.0) / (tf + norm))
        return out

    def _page_lengths(self, n_files: int) -> tuple[np.ndarray, float]:
        """Each page's length and the mean over pages with text, once per snapshot."""
        found = getattr(self, "_page_len", None)
        if found is None or len(found[0]) != n_files:
            lengths = np.bincount(self.chunk_files, weights=self.lengths, minlength=n_files)
            filled = lengths[lengths > 0]
            found = (lengths.astype(np.float32), float(filled.mean()) if len(filled) else 1.0)
            self._page_len = found
        return found

    def scores(self, query: str) -> np.ndarray:
        """BM25F score of every chunk (0 where no query term occurs)."""
        hashes = text_analysis.term_ids(query)
        out = np.zeros(self.n_chunks, dtype=np.float32)
        if len(hashes) == 0:
            return out
        unique, counts = np.unique(hashes, return_counts=True)
        return self.add_terms(out, self.lookup(unique), counts.astype(np.float32))


def _lists(table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a list column, zero-copy over the map."""
    if table.num_rows == 0:
        value_type = table.column(name).type.value_type.to_pandas_dtype()
        return np.zeros(1, np.int32), np.zeros(0, value_type)
    array = index_format.column_array(table, name)
    offsets = array.offsets.to_numpy(zero_copy_only=True)
    values = array.values.to_numpy(zero_copy_only=True)
    if offsets[0]:  # a sliced array: rebase (a copy of the small offsets only)
        return offsets - offsets[0], values[offsets[0] : offsets[-1]]
    return offsets, values


def _values(table, name: str, dtype) -> np.ndarray:
    if table.num_rows == 0:
        return np.zeros(0, dtype)
    return index_format.column_array(table, name).to_numpy(zero_copy_only=True)


def lexical_index(index) -> LexicalIndex:
    """The current snapshot's lexical index, built once per snapshot."""
    snap = index.snapshot
    found = snap.cache.get("lexical")
    if found is None:
        found = LexicalIndex.from_snapshot(snap)
        snap.cache["lexical"] = found
    return found
