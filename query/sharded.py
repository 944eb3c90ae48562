"""Reading a sharded index (`MDVDB_SHARDS` > 1; kernel/shards.py): one consistent set of
shard files, presented in the one-file order, with BM25 computed by fan-out.

`ShardedSnapshot` reads the manifest once and maps every file it names, so a query pins one
generation (a pack publishes the next by renaming the manifest). It reads as a `Snapshot`: the
`files` and `chunks` tables (vectors aside) are the shards' rows gathered into the order the
one-file index has (files by path, chunks by file), so filters, facets, tiers, clusters, `get`,
collapse and the results read it unchanged, and row ids mean the same in both layouts.

The lexical side is not gathered: `ShardedLexical` keeps each shard's postings where they are
mapped and scores them shard by shard (in threads here; `shard_term_scores` takes only arrays,
so the same call runs in another process or on another node) with GLOBAL statistics: the
chunk count, each term's document frequency summed over the shards, the length norm from the
mean length over every chunk. Each chunk's score is then the same float32 operations in the
same order as the one-file index's, so a sharded search ranks exactly as the unsharded one
(tests/test_shards.py compares them through the CLI). Page-level BM25 (files) and feedback
(RM3) are merged the same way: a file's chunks are all in one shard, and the feedback terms
are gathered in the one-file order before they are summed.

What is gathered rather than fanned out (docs/scale-out.md): the vectors (one matrix in the
global order, a copy made when the snapshot opens; the dense side's cosines are per row, so a
per-shard product would give the same values), the corpus-wide tables from the `global` file
(near-duplicate groups, clusters, and the schema: counts summed over the shards at pack time).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernel import index_format, shards, text_analysis
from query.lexical import LexicalIndex

__all__ = ["ShardedLexical", "ShardedSnapshot", "score_shard_file", "shard_term_scores"]

_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)))
    return _POOL


def fan_out(function, items: list) -> list:
    """`function` over every shard, in threads (NumPy drops the GIL in the heavy parts)."""
    if len(items) <= 1:
        return [function(item) for item in items]
    return list(_pool().map(function, items))


@dataclass
class ShardedSnapshot:
    """A generation of shard files seen as one index (see the module docstring). It has
    what `query.snapshot.Snapshot` has (file, vectors, chunk_file_ids, cache, paths, meta,
    table), so every query module reads it as one; it does not import that module (which
    opens it), to keep query/ free of import cycles."""

    file: index_format.IndexFile
    vectors: np.ndarray
    chunk_file_ids: np.ndarray
    parts: list = field(default_factory=list)  # each shard's Snapshot
    order: shards.GlobalOrder | None = None
    manifest: shards.Manifest | None = None
    _path_ids: dict[str, int] | None = field(default=None, repr=False)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return self.cache["paths"]

    @property
    def meta(self) -> dict[str, Any]:
        return self.file.meta

    def table(self, name: str):
        return self.file.table(name)

    @classmethod
    def load(cls, path: Path, load_part: Callable[[Path], Any]) -> ShardedSnapshot:
        """`path`: the manifest; `load_part` maps one shard file (`Snapshot.load`). A file
        the manifest names may be removed by a pack that published two generations since
        the manifest was read: read it again."""
        folder = path.parent
        for attempt in range(5):
            manifest = shards.read_manifest(folder)
            if manifest is None:
                raise index_format.IndexFormatError(f"no index at {path}: run `mdvdb ingest` first")
            try:
                st = os.stat(path)
                parts = [load_part(folder / e.name) for e in manifest.entries]
                extra = index_format.read_index(folder / manifest.global_file)
            except index_format.IndexFormatError:
                if attempt == 4:
                    raise
                continue
            return cls._merged(path, st, manifest, parts, extra)
        raise AssertionError("unreachable")

    @classmethod
    def _merged(cls, path, st, manifest, parts, extra) -> ShardedSnapshot:
        import pyarrow as pa

        paths = [p.paths for p in parts]
        order = shards.global_order(paths, [p.chunk_file_ids for p in parts])
        files = pa.concat_tables(
            [p.table("files") for p in parts], promote_options="permissive"
        ).take(pa.array(order.file_order))
        files = files.set_column(0, "file_id", pa.array(np.arange(files.num_rows, dtype=np.int32)))
        chunk_tables = [p.table("chunks").drop_columns(["vector"]) for p in parts]
        chunk_file_ids = np.concatenate(
            [ids[p.chunk_file_ids] for ids, p in zip(order.file_ids, parts, strict=True)]
            or [np.zeros(0, np.int64)]
        )[order.chunk_order].astype(np.int32)
        chunks = pa.concat_tables(chunk_tables).take(pa.array(order.chunk_order))
        chunks = chunks.set_column(
            0, "chunk_id", pa.array(np.arange(chunks.num_rows, dtype=np.int32))
        )
        chunks = chunks.set_column(1, "file_id", pa.array(chunk_file_ids))
        dims = int(manifest.meta.get("dimensions") or 0)
        vectors = np.concatenate([p.vectors for p in parts] or [np.zeros((0, dims), np.float32)])
        vectors = vectors[order.chunk_order]
        tables = {"files": files, "chunks": chunks}
        for name in ("near_duplicates", "clusters", "schema", "schema_problems"):
            if extra.tables.get(name) is not None:
                tables[name] = extra.tables[name]
        file = index_format.IndexFile(
            path=path,
            meta={**manifest.meta, "files": files.num_rows, "chunks": chunks.num_rows},
            tables=tables,
            size=sum(p.file.size for p in parts) + extra.size,
            mtime_ns=st.st_mtime_ns,
            inode=st.st_ino,
        )
        snap = cls(
            file=file,
            vectors=vectors,
            chunk_file_ids=chunk_file_ids,
            parts=parts,
            order=order,
            manifest=manifest,
        )
        snap.cache["paths"] = [p for shard in paths for p in shard]
        snap.cache["paths"] = [snap.cache["paths"][i] for i in order.file_order]
        return snap

    def build_lexical(self) -> ShardedLexical:
        return ShardedLexical.of(self)


def shard_term_scores(
    lexical: LexicalIndex,
    hashes: np.ndarray,
    weights: np.ndarray,
    idf: np.ndarray,
    norm: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """One shard's part of a BM25F query: `out` (this shard's chunks, local order) += the sum
    over terms of weight * idf * saturated tf, term by term in the given order. `idf` and
    `norm` (this shard's chunks' length norms) come from the global statistics. Arrays in,
    an array out: the function a shard server runs. The float32 operations are those of
    `LexicalIndex.term_weights` / `add_terms`, so each chunk gets the one-file bits."""
    k1 = np.float32(lexical.k1 + 1.0)
    for row, weight, term_idf in zip(
        lexical.lookup(hashes).tolist(), weights.tolist(), idf.tolist(), strict=True
    ):
        if row < 0:
            continue
        a, b = int(lexical.offsets[row]), int(lexical.offsets[row + 1])
        ids, tf = lexical.chunk_ids[a:b], lexical.tf[a:b]
        term = tf * k1
        denominator = norm[ids]
        denominator += tf
        term /= denominator
        term *= np.float32(term_idf)
        term *= np.float32(weight)
        out[ids] += term
    return out


def score_shard_file(
    path: str, hashes: np.ndarray, weights: np.ndarray, idf: np.ndarray, norm: np.ndarray
) -> np.ndarray:
    """`shard_term_scores` as another process (or node) runs it: map the shard file, score
    its chunks with the global `idf` and `norm` the caller sends, return the local scores."""
    from types import SimpleNamespace

    file = index_format.read_index(path)
    chunk_files = index_format.column_array(file.tables["chunks"], "file_id").to_numpy()
    view = SimpleNamespace(meta=file.meta, table=file.table, file=file, chunk_file_ids=chunk_files)
    lexical = LexicalIndex.from_snapshot(view)
    out = np.zeros(lexical.n_chunks, dtype=np.float32)
    return shard_term_scores(lexical, hashes, weights, idf, norm, out)


@dataclass
class ShardedLexical:
    """The `LexicalIndex` interface the query modules use, over shards (module docstring).
    Term "rows" here are the term hashes themselves: a row number means nothing across
    shards."""

    parts: list[LexicalIndex]
    chunk_ids: list[np.ndarray]  # per shard: local chunk -> global chunk
    file_ids: list[np.ndarray]  # per shard: local file -> global file
    lengths: np.ndarray  # global order
    chunk_files: np.ndarray  # global order
    n_chunks: int
    k1: float = 1.2
    b: float = 0.75
    norm: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.norm is None:
            avg = float(self.lengths.mean()) if len(self.lengths) else 0.0
            self.norm = self.k1 * (1.0 - self.b + self.b * self.lengths / (avg or 1.0))

    @classmethod
    def of(cls, snapshot: ShardedSnapshot) -> ShardedLexical:
        parts = [LexicalIndex.from_snapshot(p) for p in snapshot.parts]
        order = snapshot.order
        lengths = np.concatenate([p.lengths for p in parts] or [np.zeros(0, np.float32)])
        return cls(
            parts=parts,
            chunk_ids=order.chunk_ids,
            file_ids=order.file_ids,
            lengths=lengths[order.chunk_order],
            chunk_files=snapshot.chunk_file_ids,
            n_chunks=len(snapshot.chunk_file_ids),
            k1=parts[0].k1 if parts else 1.2,
            b=parts[0].b if parts else 0.75,
        )

    # -- global statistics ----------------------------------------------------------------
    def document_frequency(self, hashes: np.ndarray) -> np.ndarray:
        """Chunks holding each term, summed over the shards."""
        df = np.zeros(len(hashes), dtype=np.int64)
        for part in self.parts:
            rows = part.lookup(hashes)
            found = rows >= 0
            safe = np.maximum(rows, 0)
            df += np.where(found, part.offsets[safe + 1] - part.offsets[safe], 0)
        return df

    def idf(self, df: np.ndarray | int) -> np.ndarray:
        return np.log1p((self.n_chunks - df + 0.5) / (df + 0.5)).astype(np.float32)

    def term_idf(self, hashes: np.ndarray) -> np.ndarray:
        return self.idf(self.document_frequency(hashes))

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Present for the interface; the sharded "row" of a term is its hash."""
        return np.asarray(hashes)

    def term_chunks(self, hashes: np.ndarray) -> list[np.ndarray | None]:
        """The global chunk ids of each term's postings (None: in no shard)."""
        out: list[np.ndarray | None] = []
        per_shard = [part.term_chunks(hashes) for part in self.parts]
        for i in range(len(hashes)):
            found = [
                ids[chunks[i]]
                for chunks, ids in zip(per_shard, self.chunk_ids, strict=True)
                if chunks[i] is not None
            ]
            out.append(np.sort(np.concatenate(found)) if found else None)
        return out

    # -- scoring --------------------------------------------------------------------------
    def add_terms(self, out: np.ndarray, hashes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """out += sum of weight * postings(term), fanned out over the shards."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        weights = np.asarray(weights, dtype=np.float32)
        if len(hashes) == 0:
            return out
        # The one-file index skips a term it lacks; so do the shards (no posting anywhere).
        idf = self.idf(self.document_frequency(hashes))

        def one(shard: int) -> tuple[int, np.ndarray]:
            ids = self.chunk_ids[shard]
            local = shard_term_scores(
                self.parts[shard], hashes, weights, idf, self.norm[ids], out[ids].copy()
            )
            return shard, local

        for shard, local in fan_out(one, list(range(len(self.parts)))):
            out[self.chunk_ids[shard]] = local
        return out

    def scores(self, query: str) -> np.ndarray:
        hashes = text_analysis.term_ids(query)
        out = np.zeros(self.n_chunks, dtype=np.float32)
        if len(hashes) == 0:
            return out
        unique, counts = np.unique(hashes, return_counts=True)
        return self.add_terms(out, unique, counts.astype(np.float32))

    def rescored(self, k1: float, b: float, floor: float = 0.0) -> ShardedLexical:
        out = replace(self, k1=float(k1), b=float(b), norm=None)
        if floor and len(self.lengths):
            avg = float(self.lengths.mean()) or 1.0
            lengths = np.maximum(self.lengths, np.float32(floor * avg))
            out.norm = out.k1 * (1.0 - out.b + out.b * lengths / avg)
        return out

    def feedback_terms(
        self, chunks: np.ndarray, scores: np.ndarray, count: int, by_idf: bool = False
    ):
        """`LexicalIndex.feedback_terms` over shards: each feedback chunk's postings are
        read from its shard and laid out in the given chunk order, so the per-term sums run
        in the order the one-file index sums them."""
        shard_of = np.empty(self.n_chunks, dtype=np.int64)
        local_of = np.empty(self.n_chunks, dtype=np.int64)
        for shard, ids in enumerate(self.chunk_ids):
            shard_of[ids] = shard
            local_of[ids] = np.arange(len(ids))
        hashes, tfs, sizes = [], [], []
        for chunk in np.asarray(chunks).tolist():
            part = self.parts[shard_of[chunk]]
            local = local_of[chunk]
            a, b = int(part.forward_offsets[local]), int(part.forward_offsets[local + 1])
            positions = part.forward_postings[a:b]
            rows = np.searchsorted(part.offsets, positions, side="right") - 1
            hashes.append(part.terms[rows])
            tfs.append(part.tf[positions])
            sizes.append(b - a)
        size = np.asarray(sizes, dtype=np.int64)
        if size.sum() == 0 or scores.sum() <= 0:
            return np.zeros(0, np.uint64), np.zeros(0, np.float32)
        terms = np.concatenate(hashes)
        lengths = np.repeat(np.maximum(self.lengths[chunks], np.float32(1.0)), size)
        shares = np.concatenate(tfs) / lengths
        mass = shares * np.repeat(scores / scores.sum(), size)
        unique, inverse = np.unique(terms, return_inverse=True)
        totals = np.bincount(inverse, weights=mass)
        rank = totals
        if by_idf:
            df = self.document_frequency(unique).astype(np.float64)
            rank = totals * np.log1p((self.n_chunks - df + 0.5) / (df + 0.5))
        best = np.argsort(-rank, kind="stable")[:count]
        return unique[best], totals[best].astype(np.float32)

    # -- pages ----------------------------------------------------------------------------
    def _page_lengths(self, n_files: int) -> tuple[np.ndarray, float]:
        found = getattr(self, "_page_len", None)
        if found is None or len(found[0]) != n_files:
            lengths = np.bincount(self.chunk_files, weights=self.lengths, minlength=n_files)
            filled = lengths[lengths > 0]
            found = (lengths.astype(np.float32), float(filled.mean()) if len(filled) else 1.0)
            self._page_len = found
        return found

    def page_lengths(self) -> np.ndarray | None:
        if not len(self.chunk_files):
            return None
        return self._page_lengths(int(self.chunk_files[-1]) + 1)[0]

    def page_scores(self, query: str, k1: float = 1.2, b: float = 0.75) -> np.ndarray | None:
        """`LexicalIndex.page_scores` over shards: a file's chunks all live in one shard, so
        each shard sums its pages' tf; df counts pages over every shard."""
        n_files = int(self.chunk_files[-1]) + 1 if len(self.chunk_files) else 0
        out = np.zeros(n_files, dtype=np.float32)
        hashes = text_analysis.term_ids(query)
        if len(hashes) == 0 or n_files == 0:
            return out
        page_len, avg = self._page_lengths(n_files)
        unique, counts = np.unique(hashes, return_counts=True)
        for h, count in zip(unique.tolist(), counts.tolist(), strict=True):
            found = []
            for part, files in zip(self.parts, self.file_ids, strict=True):
                row = int(part.lookup(np.array([h], np.uint64))[0])
                if row < 0:
                    continue
                a, b_ = int(part.offsets[row]), int(part.offsets[row + 1])
                local = part.chunk_files[part.chunk_ids[a:b_]]
                starts = np.flatnonzero(np.r_[True, local[1:] != local[:-1]])
                found.append((files[local[starts]], np.add.reduceat(part.tf[a:b_], starts)))
            if not found:
                continue
            pages = np.concatenate([p for p, _ in found])
            tf = np.concatenate([t for _, t in found])
            df = len(pages)
            idf = np.log1p((n_files - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * page_len[pages] / avg)
            out[pages] += np.float32(count * idf) * (tf * (k1 + 1.0) / (tf + norm))
        return out
