"""Lexical postings: BM25F weights per (term, chunk), built at pack time into the `lexical` table.

Each chunk has three fields: the file's title, its heading path (headings equal to the title
left out, since the title field already holds them) and its text. A term's field-weighted
frequency is `sum(weight_f * tf_f)` and the chunk length is `sum(weight_f * len_f)` (BM25F with
one length normalisation), so a word in a heading counts like several in the body. The weights
were chosen by measurement (docs/search-quality.md).

Speed: analysing text is the slow part (~1.7 µs a word), so each chunk's analysed form (distinct
term hashes, per-field counts, field lengths) is cached in the state folder (`Store`, one .npz),
keyed by the chunk's SHA-256 (which covers the text and the parent headings) mixed with its
heading and its file's title. A re-ingest analyses only new chunks; the postings for the whole
corpus are then rebuilt from the cache with NumPy (one gather, one stable sort by term), which
keeps them exact (idf and the average length change with every edit).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from mdvdb import index_format
from mdvdb.text_analysis import ANALYZER_VERSION, term_ids

FIELDS = ("title", "headings", "body")


@dataclass(frozen=True)
class Bm25fParams:
    k1: float = 1.2
    b: float = 0.75
    title: float = 2.0
    headings: float = 2.0
    body: float = 1.0

    def weights(self) -> np.ndarray:
        return np.array([self.title, self.headings, self.body], dtype=np.float32)

    def to_json(self) -> dict:
        return {
            "k1": self.k1,
            "b": self.b,
            "field_weights": dict(zip(FIELDS, self.weights().tolist(), strict=True)),
        }


PARAMS = Bm25fParams()

CACHE_FILE = "lexical-cache.npz"
# What the cache holds depends on the analyzer and on how chunk keys are made.
CACHE_VERSION = f"{ANALYZER_VERSION}/keys-2"


@dataclass
class Analysed:
    """One chunk's distinct terms with per-field counts and its field lengths."""

    terms: np.ndarray  # uint64, sorted, distinct
    counts: np.ndarray  # (len(terms), 3) float32: tf in title, headings, body
    lengths: np.ndarray  # (3,) float32: words in title, headings, body


def analyse(title: str, headings: list[str], text: str) -> Analysed:
    parts = [term_ids(title), term_ids(" ".join(headings)), term_ids(text)]
    every = np.concatenate(parts)
    field = np.repeat(np.arange(3), [len(p) for p in parts])
    terms, inverse = np.unique(every, return_inverse=True)
    counts = np.zeros((len(terms), 3), dtype=np.float32)
    np.add.at(counts, (inverse, field), 1.0)
    return Analysed(terms, counts, np.array([len(p) for p in parts], dtype=np.float32))


def chunk_fields(title: str, heading_path: list[str]) -> list[str]:
    """The heading field: the path minus headings that repeat the title."""
    return [h for h in heading_path if h.strip() != title.strip()]


@dataclass
class Store:
    """Analysed chunks, chunk-major and flat: chunk i's terms are terms[starts[i]:starts[i+1]].
    This is also the form of the on-disk cache (one .npz in the state folder), so a pack reads
    the analyses of 40k unchanged chunks with one file read and a vectorised gather."""

    keys: np.ndarray  # uint64 per chunk: hash of (title, heading, chunk sha)
    starts: np.ndarray  # int64, chunks + 1
    lengths: np.ndarray  # (chunks, 3) float32
    terms: np.ndarray  # uint64 per (chunk, term)
    counts: np.ndarray  # (postings, 3) float32

    @classmethod
    def of(cls, keys: np.ndarray, analysed: list[Analysed]) -> Store:
        sizes = np.fromiter((len(a.terms) for a in analysed), dtype=np.int64, count=len(analysed))
        return cls(
            keys=np.asarray(keys, dtype=np.uint64),
            starts=np.r_[0, np.cumsum(sizes)].astype(np.int64),
            lengths=np.stack([a.lengths for a in analysed]).astype(np.float32)
            if analysed
            else np.zeros((0, 3), np.float32),
            terms=np.concatenate([a.terms for a in analysed]) if analysed else _U64,
            counts=np.concatenate([a.counts for a in analysed]) if analysed else _COUNTS,
        )

    @classmethod
    def load(cls, path: Path) -> Store | None:
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["version"]) != CACHE_VERSION:
                    return None
                return cls(*(data[name] for name in _STORE_FIELDS))
        except (OSError, KeyError, ValueError):
            return None  # no cache, or a torn one: only costs a re-analysis

    def save(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, version=np.str_(CACHE_VERSION), **self.__dict__)
        os.replace(tmp, path)

    def take(self, rows: np.ndarray) -> Store:
        """The chunks at `rows` (any order, repeats allowed), without a Python loop."""
        rows = np.asarray(rows, dtype=np.int64)
        begin, end = self.starts[rows], self.starts[rows + 1]
        sizes = end - begin
        out_starts = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        gather = np.repeat(begin - out_starts[:-1], sizes) + np.arange(out_starts[-1])
        return Store(
            self.keys[rows], out_starts, self.lengths[rows], self.terms[gather], self.counts[gather]
        )

    @staticmethod
    def concat(a: Store, b: Store) -> Store:
        return Store(
            np.r_[a.keys, b.keys],
            np.r_[a.starts[:-1], b.starts + a.starts[-1]],
            np.concatenate([a.lengths, b.lengths]),
            np.r_[a.terms, b.terms],
            np.concatenate([a.counts, b.counts]),
        )


_U64 = np.zeros(0, np.uint64)
_COUNTS = np.zeros((0, 3), np.float32)
_STORE_FIELDS = ("keys", "starts", "lengths", "terms", "counts")


def _crc(texts: list[str]) -> np.ndarray:
    return np.fromiter(
        (zlib.crc32(t.encode()) if t else 0 for t in texts), dtype=np.uint64, count=len(texts)
    )


def chunk_keys(file_titles: list[str], file_ids: np.ndarray, headings: list[str], shas: list[str]):
    """One uint64 per chunk naming what its analysis depends on: the chunk's SHA-256 (its text
    and parent headings), its own heading and its file's title. Mixed from 64 bits of the
    SHA-256 and CRC-32s of the strings with NumPy (~40 ms for 40k chunks, a third of a
    per-chunk BLAKE2b); two chunks collide only if their texts' SHA-256 prefixes already match
    and the CRCs do too."""
    sha = np.fromiter((int(s[:16], 16) for s in shas), dtype=np.uint64, count=len(shas))
    title = _crc(file_titles)[file_ids] * np.uint64(0x9E3779B97F4A7C15)
    heading = _crc(headings) * np.uint64(0xC2B2AE3D27D4EB4F)
    return sha ^ title ^ heading


def analysed_store(files: pa.Table, chunks: pa.Table, cache: Path | None) -> Store:
    """Every chunk analysed, in chunk order; only chunks missing from the cache are analysed,
    and the cache is rewritten when the set of chunks changed."""
    all_titles = [t or "" for t in files.column("title").to_pylist()]
    file_ids = chunks.column("file_id").to_numpy()
    keys = chunk_keys(
        all_titles,
        file_ids,
        chunks.column("heading").to_pylist(),
        chunks.column("sha256").to_pylist(),
    )
    old = Store.load(cache) if cache is not None and cache.is_file() else None
    rows = np.full(len(keys), -1, dtype=np.int64)
    if old is not None and len(old.keys):
        sorter = np.argsort(old.keys)
        at = np.minimum(np.searchsorted(old.keys, keys, sorter=sorter), len(sorter) - 1)
        hit = old.keys[sorter[at]] == keys
        rows[hit] = sorter[at[hit]]
    missing = np.flatnonzero(rows < 0)
    if len(missing):
        take = pa.array(missing)
        paths = chunks.column("heading_path").take(take).to_pylist()
        texts = chunks.column("text").take(take).to_pylist()
        titles = [all_titles[i] for i in file_ids[missing].tolist()]
        fresh = Store.of(
            keys[missing],
            [
                analyse(title, chunk_fields(title, path or []), text)
                for title, path, text in zip(titles, paths, texts, strict=True)
            ],
        )
        base = old if old is not None else Store.of(_U64, [])
        rows[missing] = len(base.keys) + np.arange(len(missing))
        old = Store.concat(base, fresh)
    if old is None:  # nothing cached and nothing to analyse: no chunks at all
        return Store.of(_U64, [])
    store = old.take(rows)
    if cache is not None and (len(missing) or len(np.unique(rows)) != len(old.keys)):
        store.save(cache)
    return store


@dataclass
class Postings:
    terms: np.ndarray  # uint64, sorted distinct
    df: np.ndarray  # int32
    offsets: np.ndarray  # int32, len(terms) + 1
    chunk_ids: np.ndarray  # int32, grouped by term, ascending inside a term
    weights: np.ndarray  # float32
    # Forward view, chunk-major (same order as the store): term row and p(term | chunk).
    forward_starts: np.ndarray  # int64, chunks + 1
    forward_rows: np.ndarray  # int32
    forward_shares: np.ndarray  # float32


def build_postings(store: Store, params: Bm25fParams = PARAMS) -> Postings:
    """BM25F weights for every (term, chunk), grouped by term."""
    n = len(store.keys)
    if n == 0 or len(store.terms) == 0:
        empty = np.zeros(0, dtype=np.int32)
        none = empty.astype(np.float32)
        starts = np.zeros(n + 1, np.int64)
        return Postings(_U64, empty, np.zeros(1, np.int32), empty, none, starts, empty, none)
    fw = params.weights()
    chunk_of = np.repeat(np.arange(n, dtype=np.int32), np.diff(store.starts))
    lengths = store.lengths @ fw
    tf = store.counts @ fw
    avg = float(lengths.mean()) or 1.0
    norm = params.k1 * (1.0 - params.b + params.b * lengths / avg)
    saturated = tf * (params.k1 + 1.0) / (tf + norm[chunk_of])
    order = np.argsort(store.terms, kind="stable")  # stable: chunk ids ascend inside a term
    terms = store.terms[order]
    starts = np.flatnonzero(np.r_[True, terms[1:] != terms[:-1]])
    df = np.diff(np.r_[starts, len(terms)]).astype(np.int32)
    idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
    weights = (saturated[order] * np.repeat(idf, df)).astype(np.float32)
    rows = np.empty(len(terms), dtype=np.int32)
    rows[order] = np.repeat(np.arange(len(starts), dtype=np.int32), df)
    return Postings(
        terms=terms[starts],
        df=df,
        offsets=np.r_[starts, len(terms)].astype(np.int32),
        chunk_ids=chunk_of[order],
        weights=weights,
        forward_starts=store.starts,
        forward_rows=rows,
        forward_shares=(tf / np.maximum(lengths, 1.0)[chunk_of]).astype(np.float32),
    )


def forward_table(postings: Postings) -> pa.Table:
    offsets = pa.array(postings.forward_starts.astype(np.int32), pa.int32())
    return pa.Table.from_arrays(
        [
            pa.ListArray.from_arrays(offsets, pa.array(postings.forward_rows, pa.int32())),
            pa.ListArray.from_arrays(offsets, pa.array(postings.forward_shares, pa.float32())),
        ],
        schema=index_format.LEXICAL_FORWARD_SCHEMA,
    )


def postings_table(postings: Postings) -> pa.Table:
    offsets = pa.array(postings.offsets, pa.int32())
    return pa.Table.from_arrays(
        [
            pa.array(postings.terms, pa.uint64()),
            pa.array(postings.df, pa.int32()),
            pa.ListArray.from_arrays(offsets, pa.array(postings.chunk_ids, pa.int32())),
            pa.ListArray.from_arrays(offsets, pa.array(postings.weights, pa.float32())),
        ],
        schema=index_format.LEXICAL_SCHEMA,
    )


def lexical_meta(params: Bm25fParams = PARAMS) -> dict:
    return {
        "analyzer": ANALYZER_VERSION,
        "tables": ["lexical", "lexical_forward"],
        **params.to_json(),
    }


def build_lexical_tables(files: pa.Table, chunks: pa.Table, inp) -> dict[str, pa.Table]:
    """The pack builder (see `pipeline.pack.EXTRA_TABLES`): reads titles, heading paths and
    texts from the packed tables, records the analyzer and parameters in the index meta."""
    cache = Path(inp.state.folder) / CACHE_FILE if inp.state is not None else None
    postings = build_postings(analysed_store(files, chunks, cache))
    inp.meta["lexical"] = lexical_meta()
    return {"lexical": postings_table(postings), "lexical_forward": forward_table(postings)}
