"""Lexical postings: field-weighted tf per (term, chunk) over three fields (title with aliases,
heading path, text), built or updated at pack time into the `lexical` tables; readers compute
the BM25F weights (`query.score.lexical`; docs/architecture.md,
"The pipeline: doit tasks, one per stage")."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from kernel import index_format
from kernel.text_analysis import chunk_language, language_marker, term_hashes, tokens_of
from pipeline.pack.splice import rows_of, runs, splice
from pipeline.pack.versions import (  # noqa: F401 - declared there, used here and by name
    FIELDS,
    LENGTHS_TABLE,
    PARAMS,
    TF_TABLE,
    Bm25fParams,
    lexical_meta,
)

if TYPE_CHECKING:
    from pipeline.plan import Plan


def store_of(keys: np.ndarray, chunks: list[tuple[str, list[str], str]]) -> Store:
    """The analyses of chunks given as (title, heading field, text): each chunk's distinct
    terms with their tf per field, and its three field lengths, in a few NumPy calls over
    every chunk's terms (tests/test_analysis_cache.py holds the plain per-chunk form)."""
    parts: list[np.ndarray] = []
    last_title: str | None = None
    title_tokens: list = []
    title_ids: dict[str, np.ndarray] = {}
    markers: set[int] = set()
    for title, headings, text in chunks:
        if title != last_title:
            last_title, title_tokens, title_ids = title, tokens_of(title), {}
        head_tokens, body_tokens = tokens_of(" ".join(headings)), tokens_of(text)
        language = chunk_language(title_tokens, head_tokens, body_tokens)
        found = title_ids.get(language)
        if found is None:
            found = title_ids[language] = term_hashes(title_tokens, language)
        body = term_hashes(body_tokens, language)
        if language != "en":
            marker = language_marker(language)
            markers.add(marker)
            body = np.append(body, np.uint64(marker))
        parts += [found, term_hashes(head_tokens, language), body]
    store = _store_of_parts(np.asarray(keys, dtype=np.uint64), parts)
    if markers:
        _weigh_nothing(store, np.array(sorted(markers), dtype=np.uint64))
    return store


def _weigh_nothing(store: Store, markers: np.ndarray) -> None:
    """The language markers' postings hold no weight: tf 0, not counted in the body length."""
    rows = np.flatnonzero(np.isin(store.terms, markers))
    chunks = np.searchsorted(store.starts, rows, side="right") - 1
    store.counts[rows] = 0
    store.lengths[chunks, 2] -= 1


def _store_of_parts(keys: np.ndarray, parts: list[np.ndarray]) -> Store:
    """The Store of chunks whose term hashes per field are parts[3 i : 3 i + 3]."""
    n = len(parts) // 3
    if not n:
        return Store.empty()
    sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts)).reshape(n, 3)
    every = np.concatenate(parts).astype(np.uint64, copy=False)
    field = np.repeat(np.tile(np.arange(3, dtype=np.int64), n), sizes.ravel())
    chunk = np.repeat(np.arange(n, dtype=np.int64), sizes.sum(axis=1))
    order = np.lexsort((every, chunk))  # by chunk, then term
    every, chunk, field = every[order], chunk[order], field[order]
    first = np.ones(len(every), dtype=bool)
    first[1:] = (every[1:] != every[:-1]) | (chunk[1:] != chunk[:-1])
    group = np.cumsum(first) - 1
    groups = int(group[-1]) + 1 if len(group) else 0
    counts = np.bincount(group * 3 + field, minlength=groups * 3).reshape(groups, 3)
    per_chunk = np.bincount(chunk[first], minlength=n)
    return Store(
        keys=keys,
        starts=np.r_[0, np.cumsum(per_chunk)].astype(np.int64),
        lengths=sizes.astype(np.float32),
        terms=every[first],
        counts=counts.astype(np.float32),
    )


def title_field(title: str, aliases: list[str] | None) -> str:
    """The title field's text: the file's title, then its aliases, one a line."""
    return "\n".join([title, *aliases]) if aliases else title


def title_fields(files: pa.Table) -> list[str]:
    """`title_field` of every row of a `files` table."""
    titles = files.column("title").to_pylist()
    aliases = files.column("aliases").to_pylist()
    return [title_field(t or "", a) for t, a in zip(titles, aliases, strict=True)]


def chunk_fields(title: str, heading_path: list[str]) -> list[str]:
    """The heading field: the path minus headings that repeat the title field."""
    names = {line.strip() for line in title.split("\n")} if "\n" in title else {title.strip()}
    return [h for h in heading_path if h.strip() not in names]


@dataclass
class Store:
    """Analysed chunks, chunk-major and flat: chunk i's terms are terms[starts[i]:starts[i+1]]."""

    keys: np.ndarray  # uint64 per chunk: hash of (title, heading, chunk sha)
    starts: np.ndarray  # int64, chunks + 1
    lengths: np.ndarray  # (chunks, 3) float32
    terms: np.ndarray  # uint64 per (chunk, term)
    counts: np.ndarray  # (postings, 3) float32

    @classmethod
    def empty(cls) -> Store:
        return cls(_U64, np.zeros(1, np.int64), np.zeros((0, 3), np.float32), _U64, _COUNTS)

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
    def join(parts: list[Store]) -> Store:
        """The stores one after the other, with one copy of each array."""
        if not parts:
            return Store.empty()
        sizes = np.array([len(p.terms) for p in parts], dtype=np.int64)
        shift = np.r_[0, np.cumsum(sizes)[:-1]]
        return Store(
            np.concatenate([p.keys for p in parts]).astype(np.uint64, copy=False),
            np.concatenate(
                [p.starts[:-1] + s for p, s in zip(parts, shift, strict=True)]
                + [np.array([sizes.sum()], np.int64)]
            ).astype(np.int64),
            np.concatenate([p.lengths for p in parts]).astype(np.float32, copy=False),
            np.concatenate([p.terms for p in parts]).astype(np.uint64, copy=False),
            np.concatenate([p.counts for p in parts]).astype(np.float32, copy=False),
        )

    def rows_for(self, keys: np.ndarray) -> np.ndarray:
        """The row holding each of `keys`, or -1 where this store has none."""
        rows = np.full(len(keys), -1, dtype=np.int64)
        if not len(self.keys) or not len(keys):
            return rows
        sorter = np.argsort(self.keys, kind="stable")
        at = np.minimum(np.searchsorted(self.keys, keys, sorter=sorter), len(sorter) - 1)
        hit = self.keys[sorter[at]] == keys
        rows[hit] = sorter[at[hit]]
        return rows


class Handed:
    """Analyses given to pack once: `update` takes them, so their memory goes with the
    postings built (docs/benchmarks.md, "Ingest memory (issue 37)")."""

    def __init__(self, store: Store) -> None:
        self._store: Store | None = store

    def take(self) -> Store | None:
        store, self._store = self._store, None
        return store


_U64 = np.zeros(0, np.uint64)
_COUNTS = np.zeros((0, 3), np.float32)


def _crc(texts: list[str]) -> np.ndarray:
    return np.fromiter(
        (zlib.crc32(t.encode()) if t else 0 for t in texts), dtype=np.uint64, count=len(texts)
    )


def chunk_keys(file_titles: list[str], file_ids: np.ndarray, headings: list[str], shas: list[str]):
    """One uint64 per chunk naming what its analysis depends on: 64 bits of its SHA-256 mixed
    with CRC-32s of its heading and its file's title."""
    sha = np.fromiter((int(s[:16], 16) for s in shas), dtype=np.uint64, count=len(shas))
    title = _crc(file_titles)[file_ids] * np.uint64(0x9E3779B97F4A7C15)
    heading = _crc(headings) * np.uint64(0xC2B2AE3D27D4EB4F)
    return sha ^ title ^ heading


def _fields(titles: list[str], paths: list, texts: list) -> list[tuple[str, list[str], str]]:
    """`store_of`'s (title, heading field, text) of chunks read from the tables."""
    return [
        (title, chunk_fields(title, path or []), text or "")
        for title, path, text in zip(titles, paths, texts, strict=True)
    ]


def analysed_store(files: pa.Table, chunks: pa.Table, analysed: Store | None = None) -> Store:
    """Every chunk analysed, in chunk order (`analyses_of`, gathered in chunk order)."""
    store, rows = analyses_of(files, chunks, analysed)
    return store.take(rows)


def analyses_of(
    files: pa.Table, chunks: pa.Table, analysed: Store | None = None
) -> tuple[Store, np.ndarray]:
    """A store holding every chunk's analysis, and the row of each chunk in it: `analysed`
    (the ingest workers'), with only the chunks it lacks analysed here."""
    all_titles = title_fields(files)
    file_ids = chunks.column("file_id").to_numpy()
    keys = chunk_keys(
        all_titles,
        file_ids,
        chunks.column("heading").to_pylist(),
        chunks.column("sha256").to_pylist(),
    )
    old = analysed if analysed is not None and len(analysed.keys) else None
    rows = old.rows_for(keys) if old is not None else np.full(len(keys), -1, dtype=np.int64)
    missing = np.flatnonzero(rows < 0)
    if len(missing):
        take = pa.array(missing)
        paths = chunks.column("heading_path").take(take).to_pylist()
        texts = chunks.column("text").take(take).to_pylist()
        titles = [all_titles[i] for i in file_ids[missing].tolist()]
        fresh = store_of(keys[missing], _fields(titles, paths, texts))
        base = old if old is not None else Store.empty()
        rows[missing] = len(base.keys) + np.arange(len(missing))
        old = Store.join([base, fresh]) if len(base.keys) else fresh
    if old is None:  # nothing given and nothing to analyse: no chunks at all
        return Store.empty(), rows
    return old, rows


@dataclass
class Postings:
    """The postings as the index stores them (no BM25F weights: readers compute them)."""

    terms: np.ndarray  # uint64, sorted distinct
    df: np.ndarray  # int32
    offsets: np.ndarray  # int32, len(terms) + 1
    chunk_ids: np.ndarray  # int32, grouped by term, ascending inside a term
    tf: np.ndarray  # float32, field-weighted term frequency of each posting (same order)
    lengths: np.ndarray  # float32 per chunk: field-weighted length
    forward: pa.ListArray


def weighted(values: np.ndarray, params: Bm25fParams = PARAMS) -> np.ndarray:
    """Field-weighted sums of (n, 3) per-field values, elementwise: the same bits whatever
    the size (a full and an incremental pack must agree to the bit)."""
    if not len(values):
        return np.zeros(0, dtype=np.float32)
    fw = params.weights()
    return values[:, 0] * fw[0] + values[:, 1] * fw[1] + values[:, 2] * fw[2]


# Postings per block where `build_postings` and `transpose` go a block at a time.
POSTINGS_BLOCK = 1 << 18


def transpose(chunk_ids: np.ndarray, n: int) -> pa.ListArray:
    """The forward view of term-major postings: for each of the `n` chunks, the positions of
    its postings, ascending; a counting sort `POSTINGS_BLOCK` postings at a time."""
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(chunk_ids, minlength=n), out=offsets[1:])
    values = np.empty(len(chunk_ids), np.int32)
    fill = offsets[:-1].astype(np.int64)  # each chunk's next free place
    for start in range(0, len(chunk_ids), POSTINGS_BLOCK):
        block = chunk_ids[start : start + POSTINGS_BLOCK]
        order = np.argsort(block.astype(np.uint16) if n <= 1 << 16 else block, kind="stable")
        ids = block[order]
        first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])  # each run of one chunk
        rank = np.arange(len(ids)) - np.repeat(first, np.diff(np.r_[first, len(ids)]))
        values[fill[ids] + rank] = order + start
        fill += np.bincount(block, minlength=n)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _empty_postings(n: int) -> Postings:
    empty = np.zeros(0, dtype=np.int32)
    none = empty.astype(np.float32)
    lengths = np.zeros(n, np.float32)
    return Postings(_U64, empty, np.zeros(1, np.int32), empty, none, lengths, transpose(empty, n))


def build_postings(
    store: Store, params: Bm25fParams = PARAMS, rows: np.ndarray | None = None
) -> Postings:
    """Every (term, chunk) posting with its field-weighted tf, grouped by term, chunk ids
    ascending inside a term. `rows`: chunk i's analysis is the store's row rows[i] (None:
    row i)."""
    n = len(store.keys) if rows is None else len(rows)
    if n == 0 or len(store.terms) == 0:
        return _empty_postings(n)
    order, chunk_ids, repeats = _term_order(store, rows)
    if not len(order):  # no chunk has a row with terms
        return _empty_postings(n)
    tf = np.empty(len(order), np.float32)
    for start in range(0, len(order), POSTINGS_BLOCK):  # elementwise: the same bits
        tf[start : start + POSTINGS_BLOCK] = weighted(
            store.counts[order[start : start + POSTINGS_BLOCK]], params
        )
    distinct, df = _term_runs(store.terms, order)
    del order
    if repeats is not None and len(repeats):
        extra = store.take(rows[repeats])
        chunk_ids, tf, df = _with_repeats(extra, repeats, distinct, chunk_ids, tf, df, params)
    lengths = store.lengths if rows is None else store.lengths[rows]
    return Postings(
        terms=distinct,
        df=df,
        offsets=np.r_[0, np.cumsum(df)].astype(np.int32),
        chunk_ids=chunk_ids,
        tf=tf,
        lengths=weighted(lengths, params),
        forward=transpose(chunk_ids, n),
    )


def _term_order(store: Store, rows: np.ndarray | None):
    """(the postings in (term, chunk) order, their chunk ids, the repeated chunks or None)."""
    if rows is None:  # stable: chunk ids ascend inside a term
        order = np.argsort(store.terms, kind="stable")
        chunks = np.repeat(np.arange(len(store.keys), dtype=np.int32), np.diff(store.starts))
        return order, chunks[order], None
    n = len(rows)
    chunk, repeats = _posting_chunks(store, rows)
    unused = chunk == n  # rows no chunk has: sorted after every other posting, cut off
    count = int(np.count_nonzero(unused))
    order = np.lexsort((chunk, store.terms, unused) if count else (chunk, store.terms))
    del unused
    order = order[: len(order) - count]
    return order, chunk[order], repeats


def _term_runs(terms: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct terms of postings ordered by term, and their df, a block at a time."""
    firsts = []
    for start in range(0, len(order), POSTINGS_BLOCK):
        block = terms[order[max(start - 1, 0) : start + POSTINGS_BLOCK]]
        changes = block[1:] != block[:-1]
        firsts.append(np.flatnonzero(np.r_[True, changes] if start == 0 else changes) + start)
    starts = np.concatenate(firsts)
    return terms[order[starts]], np.diff(np.r_[starts, len(order)]).astype(np.int32)


def _posting_chunks(store: Store, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chunk of each posting (len(rows) for a row no chunk has), and the chunks whose
    row an earlier chunk has (`_with_repeats`)."""
    n = len(rows)
    used, first = np.unique(rows, return_index=True)
    owner = np.full(len(store.keys), n, dtype=np.int32)
    owner[used] = first
    repeats = np.ones(n, dtype=bool)
    repeats[first] = False
    return np.repeat(owner, np.diff(store.starts)), np.flatnonzero(repeats)


def _with_repeats(extra: Store, repeats, distinct, chunk_ids, tf, df, params):
    """(chunk_ids, tf, df) with the postings of the `repeats` chunks (analysed in `extra`)
    put in at their places, by one vectorised bisection."""
    extra_chunk = np.repeat(repeats.astype(np.int32), np.diff(extra.starts))
    order = np.lexsort((extra_chunk, extra.terms))
    extra_chunk, extra_tf = extra_chunk[order], weighted(extra.counts, params)[order]
    offsets = np.r_[0, np.cumsum(df)]
    term = np.searchsorted(distinct, extra.terms[order])
    lo, hi = offsets[term], offsets[term + 1]
    while (open_ := lo < hi).any():  # the first posting of the term not before the chunk
        mid = (lo + hi) // 2
        before = open_ & (chunk_ids[np.minimum(mid, len(chunk_ids) - 1)] < extra_chunk)
        lo, hi = np.where(before, mid + 1, lo), np.where(open_ & ~before, mid, hi)
    df = df + np.bincount(term, minlength=len(df)).astype(np.int32)
    return np.insert(chunk_ids, lo, extra_chunk), np.insert(tf, lo, extra_tf), df


# -- incremental update: drop the departed chunks' postings, renumber the rest, merge the
# fresh ones in, in linear passes (docs/benchmarks.md, "A one-file edit at 100k files,
# session 6 (issue 18 item 3)").
# Up to this many fresh postings of known terms are placed by a search each.
SEARCH_EACH_MAX = 2000


def _analyse_rows(
    files: pa.Table, chunks: pa.Table, rows: np.ndarray, made: Store | None = None
) -> Store:
    """Analyses of the chunks at `rows`, in that order, from `made` where it has them."""
    if not len(rows):
        return Store.empty()
    picked = rows_of(chunks.select(["file_id", "heading", "heading_path", "text", "sha256"]), rows)
    file_ids = picked.column("file_id").to_numpy()
    if len(rows) > 1000:
        every = title_fields(files)
        titles = [every[i] for i in file_ids.tolist()]
    else:
        titles = [
            title_field(
                files.column("title")[int(i)].as_py() or "", files.column("aliases")[int(i)].as_py()
            )
            for i in file_ids
        ]
    found = np.full(len(rows), -1, dtype=np.int64)
    if made is not None and len(made.keys):
        keys = chunk_keys(
            titles,
            np.arange(len(rows)),
            picked.column("heading").to_pylist(),
            picked.column("sha256").to_pylist(),
        )
        found = made.rows_for(keys)
    missing = np.flatnonzero(found < 0)
    if not len(missing):
        return made.take(found)  # type: ignore[union-attr]
    take = pa.array(missing)
    paths = picked.column("heading_path").take(take).to_pylist()
    texts = picked.column("text").take(take).to_pylist()
    chosen = [titles[i] for i in missing]
    fresh = store_of(np.zeros(len(missing), np.uint64), _fields(chosen, paths, texts))
    if len(missing) == len(rows):
        return fresh
    base = made if made is not None else Store.empty()
    found[missing] = len(base.keys) + np.arange(len(missing))
    return Store.join([base, fresh]).take(found)


def _previous_lexical(previous) -> dict | None:
    if previous is None or previous.meta.get("lexical") != lexical_meta():
        return None
    tables = {name: previous.tables.get(name) for name in ("lexical", TF_TABLE, LENGTHS_TABLE)}
    if any(t is None for t in tables.values()):
        return None
    forward = previous.tables.get("lexical_forward")
    if forward is not None and forward.num_rows == previous.tables["chunks"].num_rows:
        tables["lexical_forward"] = forward
    return tables


def update_postings(
    old: dict,
    files: pa.Table,
    chunks: pa.Table,
    source: np.ndarray,
    params=PARAMS,
    analysed: Store | None = None,
) -> Postings:
    """The postings of the new chunks from the previous index's and the fresh chunks'."""
    n = len(source)
    old_lengths = index_format.column_array(old[LENGTHS_TABLE], "length").to_numpy()
    kept = np.flatnonzero(source >= 0)
    fresh_rows = np.flatnonzero(source < 0)
    new_of_old = np.full(len(old_lengths), -1, dtype=np.int32)
    new_of_old[source[kept]] = kept
    old_terms = old["lexical"].column("term").to_numpy()
    old_offsets, old_chunks = index_format.list_parts(old["lexical"], "chunk_ids")
    tf = index_format.column_array(old[TF_TABLE], "tf").to_numpy()
    old_df = np.diff(old_offsets)
    chunk_ids = new_of_old[old_chunks]
    alive = np.ones(len(chunk_ids), dtype=bool)
    if len(kept) < len(old_lengths):
        alive = chunk_ids >= 0
        # Each departed posting's term by a search in the offsets (an edit drops a few).
        dead = np.flatnonzero(~alive)
        dead_terms = np.searchsorted(old_offsets, dead, side="right") - 1
        old_df = old_df - np.bincount(dead_terms, minlength=len(old_terms))
        chunk_ids, tf = chunk_ids[alive], tf[alive]
    store = _analyse_rows(files, chunks, fresh_rows, analysed)
    fresh_chunk = np.repeat(fresh_rows, np.diff(store.starts)).astype(np.int32)
    fresh_tf = weighted(store.counts, params)
    lengths = np.zeros(n, dtype=np.float32)
    lengths[kept] = old_lengths[source[kept]]
    lengths[fresh_rows] = weighted(store.lengths, params)
    if n == 0 or (not len(chunk_ids) and not len(store.terms)):
        return _empty_postings(n)
    order = np.lexsort((fresh_chunk, store.terms))
    fresh_terms, fresh_chunk, fresh_tf = store.terms[order], fresh_chunk[order], fresh_tf[order]
    # Where each fresh posting goes among the old ones: its term's place, then by chunk.
    starts = np.r_[0, np.cumsum(old_df)]
    row = np.searchsorted(old_terms, fresh_terms)
    known = row < len(old_terms)
    known[known] = old_terms[row[known]] == fresh_terms[known]
    at = starts[row]
    inside = np.flatnonzero(known)
    if len(inside) <= SEARCH_EACH_MAX:  # an edit: a search in each term's own postings
        for i in inside.tolist():
            a, b = starts[row[i]], starts[row[i] + 1]
            at[i] = a + np.searchsorted(chunk_ids[a:b], fresh_chunk[i])
    else:  # many: one search over (term, chunk) keys of every old posting
        width = np.int64(n + 1)
        keys = np.repeat(np.arange(len(old_terms), dtype=np.int64), old_df) * width + chunk_ids
        at[inside] = np.searchsorted(keys, row[inside] * width + fresh_chunk[inside])
    forward = None
    if "lexical_forward" in old:
        forward = update_forward(old["lexical_forward"], source, new_of_old, alive, at, fresh_chunk)
    chunk_ids = np.insert(chunk_ids, at, fresh_chunk)
    tf = np.insert(tf, at, fresh_tf)
    # The old terms with the fresh ones they lack put in at their places (no hashing again).
    new_terms = np.unique(fresh_terms[~known]).astype(old_terms.dtype, copy=False)
    every = np.insert(old_terms, np.searchsorted(old_terms, new_terms), new_terms)
    df_all = np.zeros(len(every), dtype=np.int64)
    df_all[np.searchsorted(every, old_terms)] += old_df
    np.add.at(df_all, np.searchsorted(every, fresh_terms), 1)
    present = df_all > 0
    df = df_all[present].astype(np.int32)
    return Postings(
        terms=every[present],
        df=df,
        offsets=np.r_[0, np.cumsum(df)].astype(np.int32),
        chunk_ids=chunk_ids,
        tf=tf,
        lengths=lengths,
        forward=forward if forward is not None else transpose(chunk_ids, n),
    )


def update_forward(
    old_forward: pa.Table,
    source: np.ndarray,
    new_of_old: np.ndarray,
    posting_alive: np.ndarray,
    at: np.ndarray,
    fresh_chunk: np.ndarray,
) -> pa.ListArray | None:
    """The forward view of the updated postings from the previous one, equal to `transpose`
    of them without sorting every posting: each survivor moves by the fresh postings
    inserted at or before it. None (the caller transposes) when `at` is not ascending or the
    kept chunks changed order."""
    at = np.asarray(at, dtype=np.int64)
    kept = source >= 0
    if (len(at) > 1 and np.any(np.diff(at) < 0)) or np.any(np.diff(source[kept]) <= 0):
        return None
    offsets, positions = index_format.list_parts(old_forward, "postings")
    old_counts = np.diff(offsets)
    n = len(source)
    # New position of every surviving old posting: its rank plus the insertions before it.
    survivors = int(np.count_nonzero(posting_alive))
    inserted = np.bincount(at, minlength=survivors + 1)[: survivors + 1] if len(at) else None
    moved = np.arange(survivors, dtype=np.int32)
    if inserted is not None:
        moved += np.cumsum(inserted[:survivors], dtype=np.int32)
    if survivors == len(posting_alive):
        new_position = moved
    else:
        new_position = np.full(len(posting_alive), -1, dtype=np.int32)
        new_position[posting_alive] = moved
    counts = np.bincount(fresh_chunk, minlength=n).astype(np.int64)
    counts[kept] = old_counts[source[kept]]
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    if len(kept) and kept.all() and n == len(old_counts) and not len(at):
        values = new_position[positions]  # nothing came or left: the same view
    else:
        mapped = new_position[positions]
        gone = new_of_old < 0
        if gone.any():
            mapped = mapped[~np.repeat(gone, old_counts)]
        # Fresh postings: the i-th inserted (in `at` order) lands at at[i] + i.
        fresh_positions = at + np.arange(len(at), dtype=np.int64)
        fresh_positions = fresh_positions[np.lexsort((fresh_positions, fresh_chunk))]
        values = np.empty(int(new_offsets[-1]), dtype=np.int32)
        if len(fresh_positions):
            entry_fresh = np.repeat(~kept, counts)
            values[~entry_fresh] = mapped
            values[entry_fresh] = fresh_positions
        else:
            values[:] = mapped
    return pa.ListArray.from_arrays(
        pa.array(new_offsets.astype(np.int32)), pa.array(values, pa.int32())
    )


def forward_table(postings: Postings) -> pa.Table:
    return pa.Table.from_arrays([postings.forward], schema=index_format.LEXICAL_FORWARD_SCHEMA)


def postings_table(postings: Postings) -> pa.Table:
    offsets = pa.array(postings.offsets, pa.int32())
    return pa.Table.from_arrays(
        [
            pa.array(postings.terms, pa.uint64()),
            pa.array(postings.df, pa.int32()),
            pa.ListArray.from_arrays(offsets, pa.array(postings.chunk_ids, pa.int32())),
        ],
        schema=index_format.LEXICAL_SCHEMA,
    )


@dataclass(frozen=True)
class LexicalTables:
    """pack's `lexical` step: the postings tables and what a reader must know of them."""

    tables: dict[str, pa.Table]
    meta: dict


# -- an edit's update as runs of the previous index's rows (docs/benchmarks.md, "A one-file
# edit at 100k files, session 10 (issue 18 item 3)"), fresh rows only for touched terms.
FRESH_CHUNKS_MAX = 200  # past this many fresh chunks, `update_postings` is the better way


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Every index of the half-open ranges [starts[i], ends[i]), concatenated."""
    sizes = ends - starts
    total = int(sizes.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    out_starts = np.r_[0, np.cumsum(sizes)[:-1]]
    return np.repeat(starts - out_starts, sizes) + np.arange(total, dtype=np.int64)


def spliced_tables(
    old: dict,
    files: pa.Table,
    chunks: pa.Table,
    source: np.ndarray,
    params: Bm25fParams = PARAMS,
    analysed: Store | None = None,
) -> dict[str, pa.Table] | None:
    """The four lexical tables `update_postings` gives (tests/test_incremental_pack.py), as
    runs of the previous index's rows plus the rows of the terms this edit touched; None
    when there is no forward view or too many fresh postings."""
    n = len(source)
    if old.get("lexical_forward") is None or n == 0:
        return None
    kept = np.flatnonzero(source >= 0)
    fresh_rows = np.flatnonzero(source < 0)
    if not len(kept) or len(fresh_rows) > FRESH_CHUNKS_MAX or np.any(np.diff(source[kept]) <= 0):
        return None  # nothing kept, many fresh chunks, or kept rows out of order
    store = _analyse_rows(files, chunks, fresh_rows, analysed)
    if len(store.terms) > SEARCH_EACH_MAX:
        return None
    prev = _Previous.of(old, source, kept)
    fresh = _fresh_postings(prev, store, fresh_rows, kept, source, params)
    rows = _term_rows(prev, fresh)
    chunk_ids, fresh_offsets, fresh_tfs = _rebuilt_postings(prev, fresh, rows)
    tf_parts = _tf_runs(prev, rows.row_source, fresh_offsets, fresh_tfs)
    forward = _forward(prev, fresh, fresh_rows, n, source)
    lengths = splice(prev.lengths, pa.array(weighted(store.lengths, params), pa.float32()), source)
    terms = rows.every[rows.present]
    df = rows.df[rows.present].astype(np.int32)
    return {
        "lexical": pa.Table.from_arrays(
            [pa.array(terms, pa.uint64()), pa.array(df, pa.int32()), chunk_ids],
            schema=index_format.LEXICAL_SCHEMA,
        ),
        "lexical_forward": pa.Table.from_arrays(
            [forward], schema=index_format.LEXICAL_FORWARD_SCHEMA
        ),
        TF_TABLE: pa.table({"tf": pa.chunked_array(tf_parts, pa.float32())}),
        LENGTHS_TABLE: pa.table({"length": lengths}),
    }


@dataclass
class _Previous:
    """The previous index's lexical tables as NumPy views, and what the edit removes."""

    lengths: pa.Array
    terms: np.ndarray
    chunk_list: pa.Array
    offsets: np.ndarray  # int64, per term
    chunks: np.ndarray  # the postings' chunk ids, term-major
    tf_array: pa.Array
    tf: np.ndarray
    fwd_offsets: np.ndarray
    fwd_values: np.ndarray
    new_of_old: np.ndarray  # each previous chunk's new id, -1 when it left
    moved: bool  # the kept chunks' ids changed
    dead: np.ndarray  # positions of the postings of the chunks that left, sorted
    dead_terms: np.ndarray  # the term of each

    @classmethod
    def of(cls, old: dict, source: np.ndarray, kept: np.ndarray) -> _Previous:
        lengths = index_format.column_array(old[LENGTHS_TABLE], "length")
        new_of_old = np.full(len(lengths), -1, dtype=np.int32)
        new_of_old[source[kept]] = kept
        offsets, chunks = index_format.list_parts(old["lexical"], "chunk_ids")
        offsets = offsets.astype(np.int64)
        tf_array = index_format.column_array(old[TF_TABLE], "tf")
        fwd_offsets, fwd_values = index_format.list_parts(old["lexical_forward"], "postings")
        gone = np.flatnonzero(new_of_old < 0)
        dead = np.sort(fwd_values[_ranges(fwd_offsets[gone], fwd_offsets[gone + 1])])
        dead = dead.astype(np.int64)
        return cls(
            lengths=lengths,
            terms=old["lexical"].column("term").to_numpy(),
            chunk_list=index_format.column_array(old["lexical"], "chunk_ids"),
            offsets=offsets,
            chunks=chunks,
            tf_array=tf_array,
            tf=tf_array.to_numpy(),
            fwd_offsets=fwd_offsets,
            fwd_values=fwd_values,
            new_of_old=new_of_old,
            moved=bool(np.any(source[kept] != kept)),
            dead=dead,
            dead_terms=np.searchsorted(offsets, dead, side="right") - 1,
        )


@dataclass
class _Fresh:
    """The fresh postings by (term, chunk), with the previous position each goes before
    (`at`) and whether its term is a previous one (`known`)."""

    terms: np.ndarray
    chunk: np.ndarray
    tf: np.ndarray
    at: np.ndarray
    known: np.ndarray


def _fresh_postings(prev: _Previous, store: Store, fresh_rows, kept, source, params) -> _Fresh:
    """Each fresh posting goes before the first kept chunk after it in its term's postings."""
    fresh_chunk = np.repeat(fresh_rows, np.diff(store.starts)).astype(np.int32)
    fresh_tf = weighted(store.counts, params)
    order = np.lexsort((fresh_chunk, store.terms))
    fresh_terms, fresh_chunk, fresh_tf = store.terms[order], fresh_chunk[order], fresh_tf[order]
    old_terms, old_offsets = prev.terms, prev.offsets
    row = np.searchsorted(old_terms, fresh_terms)
    known = row < len(old_terms)
    known[known] = old_terms[row[known]] == fresh_terms[known]
    at = old_offsets[row]
    next_kept = np.searchsorted(kept, fresh_chunk)
    n_old = len(prev.lengths)
    bound = np.where(
        next_kept < len(kept), source[kept[np.minimum(next_kept, len(kept) - 1)]], n_old
    )
    for i in np.flatnonzero(known).tolist():
        a, b = old_offsets[row[i]], old_offsets[row[i] + 1]
        at[i] = a + np.searchsorted(prev.chunks[a:b], bound[i])
    return _Fresh(fresh_terms, fresh_chunk, fresh_tf, at, known)


@dataclass
class _TermRows:
    """The rows of the new `lexical` table among every term, previous and new."""

    every: np.ndarray  # the previous terms with the new ones put in at their places
    df: np.ndarray  # per term of `every`
    present: np.ndarray  # the terms of `every` that still have a posting
    source_all: np.ndarray  # per term of `every`: its previous row, or -1 (a new term)
    row_source: np.ndarray  # per row of the new table: the previous row it repeats, or -1
    rebuilt: np.ndarray  # the rows of `every` whose postings changed


def _term_rows(prev: _Previous, fresh: _Fresh) -> _TermRows:
    old_terms = prev.terms
    new_terms = np.unique(fresh.terms[~fresh.known]).astype(old_terms.dtype, copy=False)
    every = np.insert(old_terms, np.searchsorted(old_terms, new_terms), new_terms)
    # Each previous term's row among `every`: moved down by the new terms before it.
    place = np.arange(len(old_terms), dtype=np.int64)
    if len(new_terms):
        place += np.searchsorted(new_terms, old_terms)
    df = np.zeros(len(every), dtype=np.int64)
    df[place] = np.diff(prev.offsets)
    np.subtract.at(df, place[prev.dead_terms], 1)
    np.add.at(df, np.searchsorted(every, fresh.terms), 1)
    touched = np.zeros(len(every), dtype=bool)
    touched[place[prev.dead_terms]] = True
    touched[np.searchsorted(every, fresh.terms)] = True
    present = df > 0
    source_all = np.full(len(every), -1, dtype=np.int64)
    source_all[place] = np.arange(len(old_terms))
    return _TermRows(
        every=every,
        df=df,
        present=present,
        source_all=source_all,
        row_source=np.where(touched, -1, source_all)[present],
        rebuilt=np.flatnonzero(touched & present),
    )


def _rebuilt_postings(prev: _Previous, fresh: _Fresh, rows: _TermRows):
    """(the `chunk_ids` column, the rebuilt rows' offsets and tf): rebuilt terms merge their
    surviving and fresh postings; every other row is a run of the previous column."""
    old_offsets, dead = prev.offsets, prev.dead
    ids_source = prev.new_of_old[prev.chunks] if prev.moved else prev.chunks  # one pass
    fresh_row = np.searchsorted(rows.every, fresh.terms)  # ascending: postings are by term
    old_row = rows.source_all[rows.rebuilt]
    mine_from = np.searchsorted(fresh_row, rows.rebuilt)
    mine_to = np.searchsorted(fresh_row, rows.rebuilt, side="right")
    a_all = np.where(old_row >= 0, old_offsets[np.maximum(old_row, 0)], 0)
    b_all = np.where(old_row >= 0, old_offsets[np.maximum(old_row, 0) + 1], 0)
    gone_from, gone_to = np.searchsorted(dead, a_all), np.searchsorted(dead, b_all)
    parts_ids, parts_tf, sizes = [], [], []
    for k in range(len(rows.rebuilt)):
        ids = fresh.chunk[mine_from[k] : mine_to[k]]
        tfs = fresh.tf[mine_from[k] : mine_to[k]]
        if old_row[k] >= 0:
            a, b = int(a_all[k]), int(b_all[k])
            gone = dead[gone_from[k] : gone_to[k]] - a
            stay_ids, stay_tf = ids_source[a:b], prev.tf[a:b]
            if len(gone):
                stay_ids, stay_tf = np.delete(stay_ids, gone), np.delete(stay_tf, gone)
            if len(ids):
                where = np.searchsorted(stay_ids, ids)
                ids, tfs = np.insert(stay_ids, where, ids), np.insert(stay_tf, where, tfs)
            else:
                ids, tfs = stay_ids, stay_tf
        parts_ids.append(ids.astype(np.int32, copy=False))
        parts_tf.append(tfs.astype(np.float32, copy=False))
        sizes.append(len(ids))
    fresh_offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=fresh_offsets[1:])
    fresh_ids = np.concatenate(parts_ids) if parts_ids else np.zeros(0, np.int32)
    fresh_tfs = np.concatenate(parts_tf) if parts_tf else np.zeros(0, np.float32)
    fresh_list = pa.ListArray.from_arrays(pa.array(fresh_offsets), pa.array(fresh_ids, pa.int32()))
    kept_list = prev.chunk_list
    if prev.moved:  # the kept chunks after a change moved: their ids are the renumbered ones
        kept_list = pa.ListArray.from_arrays(
            pa.array(old_offsets.astype(np.int32)), pa.array(ids_source, pa.int32())
        )
    return splice(kept_list, fresh_list, rows.row_source), fresh_offsets, fresh_tfs


def _tf_runs(prev: _Previous, row_source, fresh_offsets, fresh_tfs) -> list[pa.Array]:
    """tf, term-major like the postings: the same runs, at the level of postings."""
    parts, taken = [], 0
    for first, length in runs(row_source):
        if first >= 0:
            a, b = int(prev.offsets[first]), int(prev.offsets[first + length])
            parts.append(prev.tf_array.slice(a, b - a))
        else:
            a, b = int(fresh_offsets[taken]), int(fresh_offsets[taken + length])
            parts.append(pa.array(fresh_tfs[a:b], pa.float32()))
            taken += length
    return parts


def _forward(prev: _Previous, fresh: _Fresh, fresh_rows, n: int, source) -> pa.Array:
    """The forward view: each surviving posting moves by the insertions at or before it less
    the removals before it; fresh chunks' postings are where they were inserted."""
    dead, at = prev.dead, fresh.at
    events = np.concatenate([dead + 1, at])
    steps = np.concatenate([np.full(len(dead), -1), np.ones(len(at), dtype=np.int64)])
    by_place = np.argsort(events, kind="stable")
    events, levels = events[by_place], np.cumsum(steps[by_place])
    lengths_between = np.diff(np.r_[0, events, len(prev.chunks) + 1])
    levels = np.r_[0, levels]
    # The narrowest table that holds every step: one random read per posting, kept in cache.
    reach = int(np.abs(levels).max())
    wide = np.int8 if reach < 1 << 7 else np.int16 if reach < 1 << 15 else np.int32
    shift = np.repeat(levels.astype(wide), lengths_between)
    moved_by = np.take(shift, prev.fwd_values, mode="clip")  # `clip`: no bounds check per read
    mapped = np.add(prev.fwd_values, moved_by, dtype=np.int32)
    inserted = at - np.searchsorted(dead, at) + np.arange(len(at))
    by_chunk = np.lexsort((inserted, fresh.chunk))
    counts = np.bincount(fresh.chunk, minlength=n)[fresh_rows]
    fwd_fresh_offsets = np.zeros(len(fresh_rows) + 1, dtype=np.int32)
    np.cumsum(counts, out=fwd_fresh_offsets[1:])
    fresh_forward = pa.ListArray.from_arrays(
        pa.array(fwd_fresh_offsets), pa.array(inserted[by_chunk].astype(np.int32), pa.int32())
    )
    old_forward = pa.ListArray.from_arrays(
        pa.array(prev.fwd_offsets.astype(np.int32, copy=False)),
        pa.array(mapped.astype(np.int32, copy=False), pa.int32()),
    )
    return splice(old_forward, fresh_forward, source)


def update(plan: Plan, analysed: Store | Handed | None = None) -> LexicalTables:
    """The previous index's postings updated for the plan's fresh and departed chunks or,
    without a usable previous index, built from every chunk's analysis."""
    if isinstance(analysed, Handed):
        analysed = analysed.take()
    files, chunks, source = plan.files, plan.chunks, plan.chunk_source
    old = _previous_lexical(plan.previous)
    if old is not None:
        spliced = spliced_tables(old, files, chunks, source, analysed=analysed)
        if spliced is not None:
            return LexicalTables(spliced, lexical_meta())
        postings = update_postings(old, files, chunks, source, analysed=analysed)
    else:
        store, rows = analyses_of(files, chunks, analysed)
        del analysed  # now only in `store`: gone with it once the postings are built
        in_order = len(rows) == len(store.keys) and np.array_equal(rows, np.arange(len(rows)))
        postings = build_postings(store, rows=None if in_order else rows)
        del store, rows
    tables = {
        "lexical": postings_table(postings),
        "lexical_forward": forward_table(postings),
        TF_TABLE: pa.table({"tf": pa.array(postings.tf, pa.float32())}),
        LENGTHS_TABLE: pa.table({"length": pa.array(postings.lengths, pa.float32())}),
    }
    return LexicalTables(tables, lexical_meta())
