"""A sharded index (`MDVDB_SHARDS` > 1; kernel/shards.py) read as one index in the one-file
order, each score computed in its shard with the corpus-wide statistics: the one-file answers
(docs/scale-out.md, "What is built" and "Exactness")."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernel import index_format, shards, text_analysis
from query.score.lexical import add_page_term, bm25_idf, feedback_best, page_lengths_of, page_query
from query.score.vector import page_layout
from query.shards.part import ShardFile, ShardPart, shard_term_scores

__all__ = [
    "ShardedDense",
    "ShardedLexical",
    "ShardedSnapshot",
    "ShardedVectors",
    "shard_term_scores",
]

_POOLS: dict[bool, ThreadPoolExecutor] = {}
GLOBAL_TABLES = ("near_duplicates", "clusters", "schema", "schema_problems")
DF_CACHE = 1_000_000  # terms whose corpus-wide df a reader keeps (then starts over)


def fan_out(function, items: Sequence, parts: Sequence = ()) -> list:
    """`function` over every item (a shard, or a group of rows of one) in threads; remote shards
    only wait, so they get a wider pool (`parts`: the shards, when the items are not them)."""
    if len(items) <= 1:
        return [function(item) for item in items]
    remote = bool(getattr((parts or items)[0], "remote", False))
    pool = _POOLS.get(remote)
    if pool is None:
        cores = os.cpu_count() or 2
        width = min(64, 8 * cores) if remote else max(4, min(32, 2 * cores))
        pool = _POOLS[remote] = ThreadPoolExecutor(max_workers=width)
    return list(pool.map(function, items))


def call_each(parts: Sequence, name: str, args: Sequence[Sequence] | None = None) -> list:
    """`name` on each part with its own arguments (default: none), all at once: in threads, or
    one round trip per shard group on Ray Serve (`ServePart.call_each`)."""
    if not parts:
        return []
    given = [()] * len(parts) if args is None else args
    batched = getattr(parts[0], "call_each", None)
    if batched is not None:
        return batched(parts, name, given)
    return fan_out(lambda i: parts[i].call(name, *given[i]), list(range(len(parts))), parts)


class _GatheredTables(Mapping):
    """The one-file view's tables: `files` and `chunks` gathered from the shards on first use,
    the corpus-wide tables from the global file."""

    def __init__(self, snapshot: ShardedSnapshot, extra: index_format.IndexFile):
        self._snapshot = snapshot
        self._extra = extra
        self._names = ["files", "chunks", *(n for n in GLOBAL_TABLES if n in extra.tables)]
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str):
        found = self._built.get(name)
        if found is None:
            if name == "files":
                found = self._snapshot._gather_files()
            elif name == "chunks":
                found = _ShardChunks(self._snapshot)
            elif name in self._names:
                found = self._extra.tables[name]
            else:
                raise KeyError(name)
            self._built[name] = found
        return found

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass
class ShardedSnapshot:
    """A generation of shard files seen as one index, with what `query.snapshot.Snapshot` has
    (that module opens this one, so this one does not import it)."""

    file: index_format.IndexFile
    vectors: ShardedVectors
    chunk_file_ids: np.ndarray
    parts: list  # per shard: what answers its calls (a ShardPart, or a remote one)
    files: list[ShardFile]  # per shard: the mapped file (metadata tables)
    order: shards.GlobalOrder
    manifest: shards.Manifest
    route: tuple[str, ...] = ()  # (Ray address, Serve app) answering `parts`, if any
    _path_ids: dict[str, int] | None = field(default=None, repr=False)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        found = self.cache.get("paths")
        if found is None:
            every = [p for shard in self.files for p in shard.paths]
            found = self.cache["paths"] = [every[i] for i in self.order.file_order.tolist()]
        return found

    @property
    def meta(self) -> dict[str, Any]:
        return self.file.meta

    def table(self, name: str):
        return self.file.tables.get(name)

    @classmethod
    def load(cls, path: Path, route: Sequence[str] = ()) -> ShardedSnapshot:
        """`path`: the manifest; `route`: the (Ray address, Serve app) answering the per-shard
        calls. A pack may remove a file the manifest names meanwhile: then it is read again."""
        folder = path.parent
        for attempt in range(5):
            manifest = shards.read_manifest(folder)
            if manifest is None:
                raise index_format.IndexFormatError(f"no index at {path}: run `mdvdb ingest` first")
            try:
                st = os.stat(path)
                files = [ShardFile.load(folder / e.name) for e in manifest.entries]
                extra = index_format.read_index(folder / manifest.global_file, lazy=True)
            except index_format.IndexFormatError:
                if attempt == 4:
                    raise
                continue
            return cls._opened(path, st, manifest, files, extra, route)
        raise AssertionError("unreachable")

    @classmethod
    def _opened(cls, path, st, manifest, files, extra, route) -> ShardedSnapshot:
        order = _stored_order(extra, files) or shards.global_order(
            [f.paths for f in files], [f.chunk_file_ids for f in files]
        )
        chunk_file_ids = _stored_chunk_files(extra, len(order.chunk_order), len(order.file_order))
        if chunk_file_ids is None:
            chunk_file_ids = np.empty(len(order.chunk_order), dtype=np.int32)
            for ids, chunk_ids, f in zip(order.file_ids, order.chunk_ids, files, strict=True):
                chunk_file_ids[chunk_ids] = ids[f.chunk_file_ids]
        if route:
            from query.shards.serve import serve_parts

            parts = serve_parts(*route, manifest)
        else:
            parts = [ShardPart(f) for f in files]
        dims = int(manifest.meta.get("dimensions") or 0)
        meta = {**manifest.meta, "chunks": len(chunk_file_ids)}
        meta["files"] = sum(len(ids) for ids in order.file_ids)
        file = index_format.IndexFile(
            path=path,
            meta=meta,
            tables={},
            size=sum(f.file.size for f in files) + extra.size,
            mtime_ns=st.st_mtime_ns,
            inode=st.st_ino,
        )
        snap = cls(
            file=file,
            vectors=ShardedVectors(parts, order.chunk_ids, len(chunk_file_ids), dims),
            chunk_file_ids=chunk_file_ids,
            parts=parts,
            files=files,
            order=order,
            manifest=manifest,
            route=tuple(route),
        )
        file.tables = _GatheredTables(snap, extra)
        return snap

    def _gather_files(self):
        import pyarrow as pa

        files = pa.concat_tables(
            [f.file.tables["files"] for f in self.files], promote_options="permissive"
        ).take(pa.array(self.order.file_order))
        ids = pa.array(np.arange(files.num_rows, dtype=np.int32))
        return files.set_column(0, "file_id", ids)

    def _gather_column(self, name: str):
        """One column of the one-file `chunks` view, gathered whole (ChunkedArray)."""
        import pyarrow as pa

        if name == "chunk_id":
            return pa.chunked_array([pa.array(np.arange(len(self.chunk_file_ids), dtype=np.int32))])
        if name == "file_id":
            return pa.chunked_array([pa.array(self.chunk_file_ids)])
        pieces = [f.file.tables["chunks"].column(name) for f in self.files]
        whole = pa.chunked_array([c for piece in pieces for c in piece.chunks], pieces[0].type)
        return whole.take(pa.array(self.order.chunk_order))

    def _take_chunks(self, names: list[str], rows: np.ndarray):
        """Some rows of the one-file `chunks` view (these columns), read shard by shard."""
        import pyarrow as pa

        rows = np.asarray(rows, dtype=np.int64)
        out: dict[str, Any] = {}
        pieces, positions = [], []
        own = [n for n in names if n not in ("chunk_id", "file_id")]
        for shard, at, local in shard_groups(self.vectors.where, rows):
            table = self.files[shard].file.tables["chunks"].select(own)
            pieces.append(table.take(pa.array(local)))
            positions.append(at)
        placed = np.empty(len(rows), dtype=np.int64)
        if positions:
            placed[np.concatenate(positions)] = np.arange(len(rows))
        for name in names:
            if name == "chunk_id":
                out[name] = pa.array(rows.astype(np.int32))
            elif name == "file_id":
                out[name] = pa.array(self.chunk_file_ids[rows])
            elif pieces:
                column = pa.concat_tables([p.select([name]) for p in pieces]).column(0)
                out[name] = column.take(pa.array(placed))
            else:
                kind = self.files[0].file.tables["chunks"].schema.field(name).type
                out[name] = pa.array([], kind)
        return pa.table(out)

    def build_lexical(self) -> ShardedLexical:
        return ShardedLexical.of(self)

    def page_vectors(self) -> tuple[ShardedPageVectors, np.ndarray, np.ndarray]:
        """(page vectors, chunks, rows) as `PageVectors` has them; each page's mean vector stays
        in its shard (`ShardedPageVectors.row_dots`)."""
        files = self.chunk_file_ids
        empty = np.zeros(0, dtype=np.int64)
        if not len(files):
            return ShardedPageVectors(self.parts, [empty] * len(self.parts), 0, 0), empty, empty
        first, _, _, chunks, rows = page_layout(files)
        row_of_file = np.full(len(self.order.file_order), -1, dtype=np.int64)
        row_of_file[files[first]] = np.arange(len(first))
        local_files = call_each(self.parts, "page_files")
        where = [
            row_of_file[ids[local]]
            for ids, local in zip(self.order.file_ids, local_files, strict=True)
        ]
        dims = self.vectors.shape[1]
        return ShardedPageVectors(self.parts, where, len(first), dims), chunks, rows


class _ShardColumn:
    """One column of the one-file `chunks` view: a row (`column[i]`) is read in its shard;
    anything else gathers the whole column once (`ShardedSnapshot._gather_column`)."""

    def __init__(self, snapshot: ShardedSnapshot, name: str):
        self._snapshot = snapshot
        self._name = name
        self._whole = None

    def __len__(self) -> int:
        return len(self._snapshot.chunk_file_ids)

    def __getitem__(self, i):
        import pyarrow as pa

        if isinstance(i, int | np.integer):
            snap, name = self._snapshot, self._name
            if name == "chunk_id":
                return pa.scalar(int(i), pa.int32())
            if name == "file_id":
                return pa.scalar(int(snap.chunk_file_ids[i]), pa.int32())
            shard_of, local_of = snap.vectors.where
            chunks = snap.files[int(shard_of[i])].file.tables["chunks"]
            return chunks.column(name)[int(local_of[i])]
        return self.whole()[i]

    def whole(self):
        if self._whole is None:
            self._whole = self._snapshot._gather_column(self._name)
        return self._whole

    def __getattr__(self, attr: str):
        return getattr(self.whole(), attr)


class _ShardChunks:
    """The one-file `chunks` table, vectors aside, read where it lies: a row from its shard, a
    whole column only when a query reads one."""

    def __init__(self, snapshot: ShardedSnapshot):
        self._snapshot = snapshot
        first = snapshot.files[0].file.tables["chunks"] if snapshot.files else None
        # `is not None`: an empty shard's table is falsy (no rows) but has every column
        found = first is not None
        self.schema = first.schema.remove(first.schema.get_field_index("vector")) if found else None
        self.column_names = list(self.schema.names) if found else []
        self.num_rows = len(snapshot.chunk_file_ids)
        self._columns: dict[str, _ShardColumn] = {}

    def column(self, name: str) -> _ShardColumn:
        if name not in self.column_names:
            raise KeyError(f'Field "{name}" does not exist in schema')
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = _ShardColumn(self._snapshot, name)
        return found

    def select(self, names: list[str]) -> _SelectedChunks:
        return _SelectedChunks(self._snapshot, list(names))


class _SelectedChunks:
    def __init__(self, snapshot: ShardedSnapshot, names: list[str]):
        self._snapshot = snapshot
        self._names = names

    def take(self, rows):
        import pyarrow as pa

        if isinstance(rows, pa.Array | pa.ChunkedArray):
            rows = rows.to_numpy()
        return self._snapshot._take_chunks(self._names, np.asarray(rows))


def _stored_order(extra: index_format.IndexFile, files: list[ShardFile]):
    """The one-file order the pack stored in the global file, checked against the shards' row
    counts; None when absent (packed before it was stored)."""
    tables = extra.tables
    if "shard_files" not in tables or "shard_chunks" not in tables:
        return None
    file_ids = index_format.column_array(tables["shard_files"], "file_id").to_numpy()
    chunk_ids = index_format.column_array(tables["shard_chunks"], "chunk_id").to_numpy()
    # row counts from the footers: opening `files` and `chunks` would check every column
    # (text offsets included), most of the cost of a sharded open
    file_counts = [int(f.file.layouts["files"]["rows"]) for f in files]
    chunk_counts = [int(f.file.layouts["chunks"]["rows"]) for f in files]
    try:
        return shards.order_from_ids(file_ids, file_counts, chunk_ids, chunk_counts)
    except ValueError as exc:
        raise index_format.IndexDamaged(extra.path, str(exc)) from None


def order_problems(folder: Path, manifest: shards.Manifest) -> list[str]:
    """`status --verify`: the one-file order the global file stores is the one the shards'
    paths give (a reader trusts it to number rows)."""
    files = [ShardFile.load(folder / e.name) for e in manifest.entries]
    extra = index_format.read_index(folder / manifest.global_file, lazy=True)
    try:
        stored = _stored_order(extra, files)
        chunk_files = _stored_chunk_files(
            extra, sum(len(f.chunk_file_ids) for f in files), sum(len(f.paths) for f in files)
        )
    except index_format.IndexFormatError as exc:
        return [str(exc)]
    if stored is None:
        return []  # packed before the order was stored: readers compute it
    computed = shards.global_order([f.paths for f in files], [f.chunk_file_ids for f in files])
    name = manifest.global_file
    if not (
        np.array_equal(stored.file_order, computed.file_order)
        and np.array_equal(stored.chunk_order, computed.chunk_order)
    ):
        return [f"{name}: the stored row order is not the shards' path order"]
    if chunk_files is not None:
        expected = np.empty(len(computed.chunk_order), dtype=np.int64)
        for ids, chunk_ids, f in zip(computed.file_ids, computed.chunk_ids, files, strict=True):
            expected[chunk_ids] = ids[f.chunk_file_ids]
        if not np.array_equal(expected, chunk_files):
            return [f"{name}: the stored chunk files are not the shards' own"]
    return []


def _stored_chunk_files(extra: index_format.IndexFile, chunks: int, files: int):
    """Each chunk's global file id in the one-file order, as the pack stored it (so no
    shard's `chunks` table is opened to open the index); None when absent."""
    table = extra.tables.get("chunk_files")
    if table is None:
        return None
    ids = index_format.column_array(table, "file_id").to_numpy()
    if len(ids) != chunks or (len(ids) and (ids.min() < 0 or ids.max() >= files)):
        raise index_format.IndexDamaged(extra.path, "the stored chunk files do not fit")
    if len(ids) > 1 and (np.diff(ids) < 0).any():
        raise index_format.IndexDamaged(extra.path, "the stored chunk files are not in order")
    return ids


def shard_groups(where: tuple[np.ndarray, np.ndarray], rows: np.ndarray) -> list[tuple]:
    """(shard, positions in `rows`, its local rows) per shard holding some of `rows`."""
    shard_of, local_of = where
    owners = shard_of[rows]
    out = []
    for shard in np.unique(owners).tolist():
        at = np.flatnonzero(owners == shard)
        out.append((shard, at, local_of[rows[at]]))
    return out


def local_rows(where: tuple[np.ndarray, np.ndarray], rows, parts: int) -> list[np.ndarray]:
    """Global rows as each of `parts` shards' local rows (`where`: `by_shard`'s)."""
    shard_of, local_of = where
    rows = np.asarray(rows, dtype=np.int64)
    owners = shard_of[rows]
    return [local_of[rows[owners == i]].astype(np.int32) for i in range(parts)]


def split_postings(chunks: np.ndarray, answer) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """A `feedback_postings` answer (hashes, tf, sizes) as chunk -> (hashes, tf)."""
    hashes, tf, sizes = answer
    bounds = np.r_[0, np.cumsum(np.asarray(sizes, dtype=np.int64))].tolist()
    return {
        chunk: (hashes[bounds[i] : bounds[i + 1]], tf[bounds[i] : bounds[i + 1]])
        for i, chunk in enumerate(np.asarray(chunks).tolist())
    }


def by_shard(chunk_ids: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of `n` global rows (chunks, or files): its shard and its local row."""
    shard_of = np.empty(n, dtype=np.int32)
    local_of = np.empty(n, dtype=np.int64)
    for shard, ids in enumerate(chunk_ids):
        shard_of[ids] = shard
        local_of[ids] = np.arange(len(ids))
    return shard_of, local_of


class ShardedVectors:
    """The (chunks, dims) float32 matrix of a sharded index, left in its shards: products run per
    shard, `matrix[rows]` is a `ShardRows`, `np.asarray` gathers it all (the cluster map only)."""

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, parts: list, chunk_ids: list[np.ndarray], n: int, dims: int):
        self.parts = parts
        self.chunk_ids = chunk_ids
        self.shape = (n, dims)
        self._where: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def where(self) -> tuple[np.ndarray, np.ndarray]:
        if self._where is None:
            self._where = by_shard(self.chunk_ids, self.shape[0])
        return self._where

    def row_dots(self, vector: np.ndarray) -> np.ndarray:
        """Every row's cosine: each shard's product over its own rows, merged."""
        vector = np.asarray(vector, dtype=np.float32)
        out = np.empty(self.shape[0], dtype=np.float32)
        answers = call_each(self.parts, "dots", [(vector,)] * len(self.parts))
        for ids, local in zip(self.chunk_ids, answers, strict=True):
            out[ids] = local
        return out

    def scorer(self, first_pass: str) -> ShardedDense:
        """`dense_scorer` for this matrix: each shard runs the one-file scorer on its rows with the
        `first_pass` ("exact", "int8", "ivf") decided for the whole index."""
        return ShardedDense(self, first_pass)

    def __getitem__(self, rows) -> ShardRows:
        rows = np.arange(self.shape[0])[rows] if isinstance(rows, slice) else rows
        return ShardRows(self, np.asarray(rows, dtype=np.int64).reshape(-1))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return ShardRows(self, np.arange(self.shape[0])).__array__(dtype)


class ShardedDense:
    """`DenseScorer`'s interface over shards: one `dense` call per shard runs the one-file
    scorer there. Given `keep`, a shard sends only its best `keep` rows and a fill for the rest,
    which fuses to the same bits (the fill is never above the `pool`-th best cosine)."""

    pages = "in shards"  # `query.score.fusion.hybrid` adds a page side only to a scorer without

    def __init__(self, vectors: ShardedVectors, first_pass: str):
        self.vectors = vectors
        self.first_pass = first_pass
        # An IVF pass may run in the shards: fusion then hands them the lexical side's best.
        self.lists = "in shards" if first_pass == "ivf" else None

    def mixed(
        self,
        query,
        direction=None,
        beta: float = 0.0,
        keep: int = 0,
        rho: float = 0.0,
        also: np.ndarray | None = None,
    ):
        query = np.asarray(query, dtype=np.float32)
        if direction is not None:
            direction = np.asarray(direction, dtype=np.float32)
        args = (query, direction, float(beta), int(keep), float(rho), self.first_pass, int(keep))
        parts = self.vectors.parts
        n = self.vectors.shape[0]
        depths = [shard_depth(len(ids), n, keep) for ids in self.vectors.chunk_ids]
        local: list[np.ndarray | None] = [None] * len(parts)
        if also is not None and len(also):
            local = local_rows(self.vectors.where, also, len(parts))
        answers = call_each(
            parts, "dense", [(*args, depths[i], local[i]) for i in range(len(parts))]
        )
        names = ("raw", "cosine", "moved")
        # Each chunk starts as its shard's fill, then every answered row gets its exact value.
        fills = np.zeros((3, len(parts)), dtype=np.float32)
        for i, answer in enumerate(answers):
            fills[:, i] = answer.get("fill") or (0.0, 0.0, 0.0)
        shard_of = self.vectors.where[0]
        out = {name: fills[k][shard_of] for k, name in enumerate(names)}
        for ids, answer in zip(self.vectors.chunk_ids, answers, strict=True):
            rows = answer.get("rows")
            at = ids if rows is None else ids[rows]
            for name in names:
                out[name][at] = answer[name]
        moved = out["cosine"] if direction is None else out["moved"]
        return out["raw"], out["cosine"], moved


def shard_depth(rows: int, total: int, keep: int) -> int:
    """How many of a shard's rows its int8 pass rescores: twice its share of RESCORE_DEPTH, and
    at least `keep` (docs/scale-out.md, "What is built")."""
    from query.score.vector import RESCORE_DEPTH

    share = -(-2 * RESCORE_DEPTH * rows // max(total, 1))
    return max(int(keep), share, 1)


class ShardRows:
    """Some rows of a `ShardedVectors`, in the given order, still in their shards."""

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, matrix: ShardedVectors, rows: np.ndarray):
        self.matrix = matrix
        self.rows = rows
        self.shape = (len(rows), matrix.shape[1])

    def __len__(self) -> int:
        return len(self.rows)

    def row_dots(self, vector: np.ndarray) -> np.ndarray:
        vector = np.asarray(vector, dtype=np.float32)
        out = np.empty(len(self.rows), dtype=np.float32)
        parts = self.matrix.parts
        groups = shard_groups(self.matrix.where, self.rows)
        answers = call_each(
            [parts[g[0]] for g in groups], "dots_rows", [(g[2], vector) for g in groups]
        )
        for (_, at, _), local in zip(groups, answers, strict=True):
            out[at] = local
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.empty(self.shape, dtype=np.float32)
        parts = self.matrix.parts
        groups = shard_groups(self.matrix.where, self.rows)
        for (_, at, _), rows in zip(
            groups,
            call_each([parts[g[0]] for g in groups], "rows", [(g[2],) for g in groups]),
            strict=True,
        ):
            out[at] = rows
        return out if dtype is None else out.astype(dtype, copy=False)

    def mean(self, axis=None, **kwargs):
        return np.asarray(self).mean(axis=axis, **kwargs)


class ShardedPageVectors:
    """The pages' mean vectors, each in the shard holding the page: `row_dots` gives every
    page's cosine in the one-file page order (`ShardedSnapshot.page_vectors`)."""

    def __init__(self, parts: list, where: list[np.ndarray], n: int, dims: int):
        self.parts = parts
        self.where = where  # per shard: the page row of each of its pages
        self.shape = (n, dims)

    def __len__(self) -> int:
        return self.shape[0]

    def row_dots(self, vector: np.ndarray) -> np.ndarray:
        vector = np.asarray(vector, dtype=np.float32)
        out = np.zeros(self.shape[0], dtype=np.float32)
        answers = call_each(self.parts, "page_dots", [(vector,)] * len(self.parts))
        for rows, local in zip(self.where, answers, strict=True):
            out[rows] = local
        return out


@dataclass
class ShardedLexical:
    """The `LexicalIndex` interface over shards; a term's "row" is its hash."""

    parts: list  # per shard: what answers its calls
    chunk_ids: list[np.ndarray]  # per shard: local chunk -> global chunk
    file_ids: list[np.ndarray]  # per shard: local file -> global file
    lengths: np.ndarray  # global order
    chunk_files: np.ndarray  # global order
    n_chunks: int
    k1: float = 1.2
    b: float = 0.75
    # term hash -> chunks holding it, over every shard: kept for the generation (the
    # snapshot), shared by the rescored views, so a term's df costs a round trip once
    df_cache: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    page_df_cache: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def avg(self) -> float:
        """The mean length, over every chunk in the one-file order (the same bits)."""
        found = getattr(self, "_avg", None)
        if found is None:
            found = float(self.lengths.mean()) if len(self.lengths) else 0.0
            self._avg = found
        return found

    @property
    def where(self) -> tuple[np.ndarray, np.ndarray]:
        """For each global chunk: its shard and its local row (built once, then kept)."""
        found = getattr(self, "_where", None)
        if found is None:
            found = self._where = by_shard(self.chunk_ids, self.n_chunks)
        return found

    def norm_spec(self) -> tuple[float, float, float]:
        """What a shard needs to build its slice of the global length norm."""
        return (self.k1, self.b, self.avg)

    @classmethod
    def of(cls, snapshot: ShardedSnapshot) -> ShardedLexical:
        parts = snapshot.parts
        order = snapshot.order
        infos = call_each(parts, "info", [(True,)] * len(parts))  # the lengths with them
        lengths = [info["lengths"] for info in infos]
        gathered = np.concatenate(lengths or [np.zeros(0, np.float32)])[order.chunk_order]
        return cls(
            parts=parts,
            chunk_ids=order.chunk_ids,
            file_ids=order.file_ids,
            lengths=np.asarray(gathered, dtype=np.float32),
            chunk_files=snapshot.chunk_file_ids,
            n_chunks=len(snapshot.chunk_file_ids),
            k1=float(infos[0]["k1"]) if infos else 1.2,
            b=float(infos[0]["b"]) if infos else 0.75,
        )

    # -- global statistics ----------------------------------------------------------------
    def document_frequency(self, hashes: np.ndarray) -> np.ndarray:
        """Chunks holding each term, summed over the shards."""
        return self.term_statistics(hashes)[0]

    def term_statistics(
        self, hashes: np.ndarray, pages: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(df, page df: None unless `pages`) of the terms, summed over the shards, kept for the
        generation; the terms not known yet are asked for in one round."""
        keys = np.asarray(hashes, dtype=np.uint64).tolist()
        caches = [self.df_cache, self.page_df_cache][: 1 + pages]
        # what is known now (another thread may start a cache over meanwhile)
        known = [{h: found for h in keys if (found := c.get(h)) is not None} for c in caches]
        missing = sorted(set().union(*(set(keys).difference(k) for k in known)))
        if missing:
            asked = np.asarray(missing, dtype=np.uint64)
            answers = call_each(self.parts, "term_df", [(asked, pages)] * len(self.parts))
            for name, cache, held in zip(("df", "page_df"), caches, known, strict=False):
                total = np.zeros(len(missing), dtype=np.int64)
                for answer in answers:
                    total += answer[name]
                fetched = dict(zip(missing, total.tolist(), strict=True))
                held.update(fetched)
                if len(cache) > DF_CACHE:
                    cache.clear()
                cache.update(fetched)
        out = [np.asarray([k[h] for h in keys], dtype=np.int64) for k in known]
        return out[0], (out[1] if pages else None)

    def idf(self, df: np.ndarray | int) -> np.ndarray:
        return bm25_idf(self.n_chunks, df).astype(np.float32)

    def term_chunks(self, hashes: np.ndarray) -> list[np.ndarray | None]:
        """The global chunk ids of each term's postings (None: in no shard)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        out: list[np.ndarray | None] = []
        per_shard = call_each(self.parts, "term_chunks", [(hashes,)] * len(self.parts))
        for i in range(len(hashes)):
            found = [
                ids[chunks[i]]
                for chunks, ids in zip(per_shard, self.chunk_ids, strict=True)
                if chunks[i] is not None
            ]
            out.append(np.sort(np.concatenate(found)) if found else None)
        return out

    # -- scoring --------------------------------------------------------------------------
    def add_terms(
        self, out: np.ndarray, hashes: np.ndarray, weights: np.ndarray, zero: bool = False
    ) -> np.ndarray:
        """out += sum of weight * postings(term), fanned out over the shards (`zero`: `out` is
        all zeros)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        weights = np.asarray(weights, dtype=np.float32)
        if len(hashes) == 0:
            return out
        # The one-file index skips a term it lacks; so do the shards (no posting anywhere).
        idf = self.idf(self.document_frequency(hashes))
        spec = self.norm_spec()
        started = not zero and out.any()

        def one(shard: int):
            start = None
            if started:  # what `out` holds already, as the shard's nonzero rows
                local = out[self.chunk_ids[shard]]
                held = np.flatnonzero(local)
                start = (held, local[held])
            return (hashes, weights, idf, spec, start)

        answers = call_each(self.parts, "term_scores", [one(i) for i in range(len(self.parts))])
        for ids, (rows, values) in zip(self.chunk_ids, answers, strict=True):
            if rows is None:
                out[ids] = values
                continue
            if started:
                out[ids] = 0.0
            out[ids[rows]] = values
        return out

    def scores(self, query: str) -> np.ndarray:
        hashes = text_analysis.term_ids(query)
        out = np.zeros(self.n_chunks, dtype=np.float32)
        if len(hashes) == 0:
            return out
        unique, counts = np.unique(hashes, return_counts=True)
        return self.add_terms(out, unique, counts.astype(np.float32))

    def rescored(self, k1: float, b: float) -> ShardedLexical:
        out = replace(self, k1=float(k1), b=float(b))
        out._avg = self.avg
        out._where = getattr(self, "_where", None)
        return out

    def chunk_terms(self, chunks: np.ndarray) -> list[np.ndarray]:
        """`LexicalIndex.chunk_terms` over shards: one message per shard holding some."""
        return [h for h, _ in self._chunk_postings(np.asarray(chunks, dtype=np.int64))]

    def _chunk_postings(self, chunks: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(hashes, tf) of each chunk, read from its shard."""
        groups = shard_groups(self.where, chunks)
        answers = call_each(
            [self.parts[g[0]] for g in groups], "feedback_postings", [(g[2],) for g in groups]
        )
        postings: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for (_, at, _), answer in zip(groups, answers, strict=True):
            postings.update(split_postings(chunks[at], answer))
        return [postings[c] for c in chunks.tolist()]

    def feedback_terms(
        self,
        chunks: np.ndarray,
        scores: np.ndarray,
        count: int,
        postings: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    ):
        """`LexicalIndex.feedback_terms` over shards: the chunks' postings (from their shards, or
        `postings`) laid out in chunk order, so the sums run as the one-file index's."""
        chunks = np.asarray(chunks, dtype=np.int64)
        if postings is None:
            per_chunk = self._chunk_postings(chunks)
        else:
            per_chunk = [postings[c] for c in chunks.tolist()]
        size = np.asarray([len(h) for h, _ in per_chunk], dtype=np.int64)
        if size.sum() == 0 or scores.sum() <= 0:
            return np.zeros(0, np.uint64), np.zeros(0, np.float32)
        terms = np.concatenate([h for h, _ in per_chunk])
        tf = np.concatenate([t for _, t in per_chunk])
        return feedback_best(terms, tf, size, self.lengths[chunks], scores, count)

    # -- pages ----------------------------------------------------------------------------
    def page_lengths(self) -> np.ndarray | None:
        if not len(self.chunk_files):
            return None
        return page_lengths_of(self, int(self.chunk_files[-1]) + 1)[0]

    def page_scores(self, query: str, k1: float = 1.2, b: float = 0.75) -> np.ndarray | None:
        """`LexicalIndex.page_scores` over shards: a file's chunks all live in one shard, so
        each shard sums its pages' tf; df counts pages over every shard."""
        out, unique, counts, corpus = page_query(self, query)
        if not len(unique):
            return out
        per_shard = call_each(self.parts, "page_tf", [(unique,)] * len(self.parts))
        for i, count in enumerate(counts.tolist()):
            found = [
                (files[got[i][0]], got[i][1])
                for got, files in zip(per_shard, self.file_ids, strict=True)
                if got[i] is not None
            ]
            if not found:
                continue
            pages = np.concatenate([p for p, _ in found])
            tf = np.concatenate([t for _, t in found])
            n_files, page_len, avg = corpus
            weight = count * bm25_idf(n_files, len(pages))
            add_page_term(out, pages, tf, weight, (page_len, avg), k1, b)
        return out
