"""Lexical scoring: BM25F over the postings of the mapped index (`kernel.index_format`'s
`lexical` table, CSC-like), in NumPy with no Python loop over postings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernel import index_format, text_analysis
from kernel.index_format import IndexFormatError

# Terms whose page-level postings a long-lived reader keeps (then it starts over).
PAGE_TERMS = 4096


class LexicalUnavailable(IndexFormatError):
    """The index has no usable lexical postings (missing, or of another analyzer)."""


@dataclass(eq=False, repr=False)
class LexicalIndex:
    """BM25F over the index's postings: zero-copy views of its lexical tables."""

    terms: np.ndarray  # uint64, sorted
    offsets: np.ndarray  # int32 or int64, len(terms) + 1
    chunk_ids: np.ndarray  # int32
    tf: np.ndarray  # float32: each posting's field-weighted tf
    lengths: np.ndarray  # float32: each chunk's field-weighted length
    n_chunks: int
    # Forward view (chunk -> positions of its postings) for pseudo-relevance feedback.
    forward_offsets: np.ndarray
    forward_postings: np.ndarray
    k1: float = 1.2
    b: float = 0.75
    # Page level (`page_scores`): each chunk's file.
    chunk_files: np.ndarray | None = None

    def __post_init__(self) -> None:
        # BM25's length norm per chunk, once per snapshot, as packs computed the stored weights.
        avg = float(self.lengths.mean()) if len(self.lengths) else 0.0
        self.norm = self.k1 * (1.0 - self.b + self.b * self.lengths / (avg or 1.0))
        # Every posting's BM25F weight, built from this view's second query (a one-shot
        # search never builds it): later queries slice it.
        self.weights: np.ndarray | None = None
        self.queries = 0

    def all_weights(self) -> np.ndarray:
        """`term_weights` of every term at once: the same operations per posting in the
        same order and dtypes, so the same bits (4 bytes a posting, once per view)."""
        if self.weights is None:
            df = np.diff(self.offsets)
            # idf per distinct df through the scalar path `term_weights` takes (a vector
            # log1p may round differently from the scalar one); few distinct values
            values, inverse = np.unique(df, return_inverse=True)
            per_value = np.array([self.idf(int(v)) for v in values.tolist()], np.float32)
            idf = np.repeat(per_value[inverse], df)
            out = saturated(self.tf, self.norm[self.chunk_ids], self.k1)
            out *= idf
            self.weights = out
        return self.weights

    @classmethod
    def from_snapshot(cls, snapshot) -> LexicalIndex:
        """Zero-copy views over the mapped lexical tables; refuses other analyzers."""
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
        names = ("lexical_forward", "lexical_tf", "lexical_lengths")
        tables = {name: snapshot.table(name) for name in names}
        missing = [n for n, t in tables.items() if t is None]
        if missing:
            raise LexicalUnavailable(f"{path} has no {missing[0]} table: run `mdvdb ingest`")
        offsets, chunk_ids = index_format.list_parts(table, "chunk_ids")
        forward_offsets, forward_postings = index_format.list_parts(
            tables["lexical_forward"], "postings"
        )
        return cls(
            terms=_values(table, "term", np.uint64),
            offsets=offsets,
            chunk_ids=chunk_ids,
            tf=_values(tables["lexical_tf"], "tf", np.float32),
            lengths=_values(tables["lexical_lengths"], "length", np.float32),
            n_chunks=snapshot.table("chunks").num_rows,
            forward_offsets=forward_offsets,
            forward_postings=forward_postings,
            k1=float(meta.get("k1", 1.2)),
            b=float(meta.get("b", 0.75)),
            chunk_files=snapshot.chunk_file_ids,
        )

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Row of each term hash, -1 where the index does not have it."""
        if len(self.terms) == 0:
            return np.full(len(hashes), -1, dtype=np.int64)
        rows = np.searchsorted(self.terms, hashes)
        rows = np.minimum(rows, len(self.terms) - 1)
        return np.where(self.terms[rows] == hashes, rows, -1)

    def term_chunks(self, hashes: np.ndarray) -> list[np.ndarray | None]:
        """The chunk ids of each term's postings (None: a term the index lacks)."""
        out: list[np.ndarray | None] = []
        for row in self.lookup(hashes).tolist():
            a, b = (int(self.offsets[row]), int(self.offsets[row + 1])) if row >= 0 else (0, 0)
            out.append(self.chunk_ids[a:b] if row >= 0 else None)
        return out

    def document_frequency(self, hashes: np.ndarray) -> np.ndarray:
        """Chunks holding each term (0: a term the index lacks)."""
        rows = self.lookup(hashes)
        found = np.maximum(rows, 0)
        df = self.offsets[found + 1] - self.offsets[found] if len(self.terms) else rows * 0
        return np.where(rows >= 0, df, 0)

    def chunk_terms(self, chunks: np.ndarray) -> list[np.ndarray]:
        """The term hashes of each chunk (its forward postings)."""
        out = []
        for chunk in np.asarray(chunks).tolist():
            a, b = int(self.forward_offsets[chunk]), int(self.forward_offsets[chunk + 1])
            rows = np.searchsorted(self.offsets, self.forward_postings[a:b], side="right") - 1
            out.append(self.terms[rows])
        return out

    def idf(self, df: np.ndarray | int) -> np.ndarray:
        return bm25_idf(self.n_chunks, df).astype(np.float32)

    def term_weights(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, BM25F weights) of one term's postings, in format 3's order of operations:
        the same bits."""
        a, b = int(self.offsets[row]), int(self.offsets[row + 1])
        if self.weights is not None:
            return self.chunk_ids[a:b], self.weights[a:b]
        ids = self.chunk_ids[a:b]
        out = saturated(self.tf[a:b], self.norm[ids], self.k1)
        out *= self.idf(b - a)
        return ids, out

    def add_terms(
        self, out: np.ndarray, rows: np.ndarray, weights: np.ndarray, zero: bool = False
    ) -> np.ndarray:
        """out += sum of weight * postings(row) over query terms; `zero`: `out` is all zeros, so the
        first term is written. One thread: `np.add.at` holds the GIL."""
        for row, weight in zip(rows.tolist(), weights.tolist(), strict=True):
            if row < 0:
                continue
            ids, term = self.term_weights(row)
            if weight != 1.0:
                term = term * np.float32(weight)
            if len(ids) and int(ids[-1]) - int(ids[0]) + 1 == len(ids):
                # a run of rows (a term in every chunk): ascending distinct ids, so the
                # slice is the same rows in the same order, without a scatter
                span = out[int(ids[0]) : int(ids[-1]) + 1]
                if zero:
                    span[:] = term
                else:
                    span += term
                zero = False
            elif zero:
                out[ids] = term
                zero = False
            else:
                # the same float32 sums as `out[ids] += term` (a term's ids are distinct),
                # ~10x faster with int32 ids (that form's in-place path is a slow one)
                np.add.at(out, ids, term)
        return out

    def feedback_terms(self, chunks: np.ndarray, scores: np.ndarray, count: int):
        """RM3 expansion: the `count` heaviest terms of the feedback chunks by sum of
        p(term | chunk) * the chunk's share of the scores, as (rows, weights)."""
        begin, end = self.forward_offsets[chunks], self.forward_offsets[chunks + 1]
        sizes = end - begin
        if sizes.sum() == 0 or scores.sum() <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        starts = np.concatenate(([0], np.cumsum(sizes)))
        gather = np.repeat(begin - starts[:-1], sizes) + np.arange(starts[-1])
        positions = self.forward_postings[gather]
        rows = np.searchsorted(self.offsets, positions, side="right") - 1
        best, weights = feedback_best(
            rows, self.tf[positions], sizes, self.lengths[chunks], scores, count
        )
        return best.astype(np.int64), weights

    def page_scores(self, query: str, k1: float = 1.2, b: float = 0.75) -> np.ndarray | None:
        """BM25 of every page (file) as one document, from the chunk postings: a page's tf and
        length sum its chunks', df counts pages (docs/search-quality.md, "What each mode does").
        None without chunk files."""
        if self.chunk_files is None:
            return None
        out, unique, counts, corpus = page_query(self, query)
        for row, count in zip(self.lookup(unique).tolist(), counts.tolist(), strict=True):
            if row < 0:
                continue
            pages, tf = self.page_tf(row)
            n_files, page_len, avg = corpus
            weight = count * bm25_idf(n_files, len(pages))
            add_page_term(out, pages, tf, weight, (page_len, avg), k1, b)
        return out

    def page_tf(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """One term's pages (ascending) and its tf summed over each page's chunks (one `reduceat`),
        kept per term by a long-lived reader."""
        cache = self.__dict__.setdefault("_page_terms", {})
        found = cache.get(row)
        if found is None:
            a, b = int(self.offsets[row]), int(self.offsets[row + 1])
            files = np.take(self.chunk_files, self.chunk_ids[a:b])
            starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]])
            found = (files[starts], np.add.reduceat(self.tf[a:b], starts))
            if self.weights is not None:
                if len(cache) >= PAGE_TERMS:
                    cache.clear()
                cache[row] = found
        return found

    def page_lengths(self) -> np.ndarray | None:
        """Each page's indexed (field-weighted) length; None without the tf tables."""
        if self.lengths is None or self.chunk_files is None or not len(self.chunk_files):
            return None
        return page_lengths_of(self, int(self.chunk_files[-1]) + 1)[0]

    def rescored(self, k1: float, b: float) -> LexicalIndex:
        """The same postings scored with another k1 / b (the weights are computed from the
        stored tf at query time, so this is only another length norm)."""
        from dataclasses import replace

        return replace(self, k1=float(k1), b=float(b))

    def scores(self, query: str) -> np.ndarray:
        """BM25F score of every chunk (0 where no query term occurs)."""
        hashes = text_analysis.term_ids(query)
        self.queries += 1
        if self.queries == 2:  # a long-lived reader: worth the one pass
            self.all_weights()
        out = np.zeros(self.n_chunks, dtype=np.float32)
        if len(hashes) == 0:
            return out
        from query.score.vector import distinct

        unique, counts = distinct(hashes, counts=True)
        return self.add_terms(out, self.lookup(unique), counts.astype(np.float32), zero=True)


# -- the BM25 arithmetic the one-file index and the sharded one (query.shards.reader) share -------


def saturated(tf: np.ndarray, norm: np.ndarray, k1: float) -> np.ndarray:
    """BM25's saturated tf, tf * (k1 + 1) / (norm + tf), in float32 and this order (shared with
    the shards: the same bits); `norm` is overwritten."""
    out = tf * np.float32(k1 + 1.0)
    norm += tf
    out /= norm
    return out


def bm25_idf(n: int | float, df: np.ndarray | int) -> np.ndarray:
    """BM25's idf of a term in `df` of `n` chunks (or pages), in the caller's dtype."""
    return np.log1p((n - df + 0.5) / (df + 0.5))


def page_lengths_of(lexical, n_files: int) -> tuple[np.ndarray, float]:
    """Each page's length (its chunks' `lengths` summed by `chunk_files`) and the mean over
    pages with text, kept on `lexical` (once per snapshot)."""
    found = getattr(lexical, "_page_len", None)
    if found is None or len(found[0]) != n_files:
        lengths = np.bincount(lexical.chunk_files, weights=lexical.lengths, minlength=n_files)
        filled = lengths[lengths > 0]
        found = (lengths.astype(np.float32), float(filled.mean()) if len(filled) else 1.0)
        lexical._page_len = found
    return found


def page_query(lexical, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """Page BM25's start: a zero score per page, the query's distinct terms and their counts,
    and the corpus (pages, their lengths, the mean)."""
    n_files = int(lexical.chunk_files[-1]) + 1 if len(lexical.chunk_files) else 0
    out = np.zeros(n_files, dtype=np.float32)
    hashes = text_analysis.term_ids(query)
    if len(hashes) == 0 or n_files == 0:
        none = np.zeros(0, dtype=np.uint64)
        return out, none, none.astype(np.int64), (n_files, None, 1.0)
    page_len, avg = page_lengths_of(lexical, n_files)
    from query.score.vector import distinct

    unique, counts = distinct(hashes, counts=True)
    return out, unique, counts, (n_files, page_len, avg)


def add_page_term(
    out: np.ndarray,
    pages: np.ndarray,
    tf: np.ndarray,
    weight: float,
    lengths: tuple[np.ndarray, float],
    k1: float,
    b: float,
) -> None:
    """out[pages] += one query term's page BM25 (`weight`: query count times page idf); the one
    formula of the one-file index, the sharded one and a shard's staged query."""
    page_len, avg = lengths
    norm = k1 * (1.0 - b + b * page_len[pages] / avg)
    out[pages] += np.float32(weight) * (tf * (k1 + 1.0) / (tf + norm))


def feedback_best(
    terms: np.ndarray,
    tf: np.ndarray,
    sizes: np.ndarray,
    chunk_lengths: np.ndarray,
    scores: np.ndarray,
    count: int,
) -> tuple[np.ndarray, np.ndarray]:
    """RM3's `count` heaviest expansion terms from the feedback chunks' postings laid out chunk
    by chunk, as (terms, weights)."""
    lengths = np.repeat(np.maximum(chunk_lengths, np.float32(1.0)), sizes)
    shares = tf / lengths
    mass = shares * np.repeat(scores / scores.sum(), sizes)
    from query.score.vector import distinct

    unique, inverse = distinct(terms, inverse=True)
    totals = np.bincount(inverse, weights=mass)
    best = np.argsort(-totals, kind="stable")[:count]
    return unique[best], totals[best].astype(np.float32)


def _values(table, name: str, dtype) -> np.ndarray:
    if table.num_rows == 0:
        return np.zeros(0, dtype)
    return index_format.column_array(table, name).to_numpy(zero_copy_only=True)


def lexical_index(index) -> LexicalIndex:
    """The current snapshot's lexical index, built once per snapshot."""
    return snapshot_lexical(index.snapshot)


def section_lexical(index, k1: float):
    """The lexical index hybrid BM25F scores by: the packed k1, or (`k1` > 0) a view rescored
    with it, kept per snapshot."""
    lexical = lexical_index(index)
    if not k1 > 0:
        return lexical
    key = ("lexical_rescored", k1)
    if key not in index.snapshot.cache:
        index.snapshot.cache[key] = lexical.rescored(k1, 0.75)
    return index.snapshot.cache[key]


def snapshot_lexical(snap) -> LexicalIndex:
    """`lexical_index` of a snapshot itself (what a query's `QueryLexicon` counts in)."""
    found = snap.cache.get("lexical")
    if found is None:
        # A sharded index scores its shards' postings where they are (query.shards.reader).
        build = getattr(snap, "build_lexical", None)
        found = build() if build is not None else LexicalIndex.from_snapshot(snap)
        snap.cache["lexical"] = found
    return found
