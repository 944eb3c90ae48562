"""Pack: assemble every table and publish ONE index file atomically. Rows of files whose
path, SHA-256 and mtime are unchanged are reused from the previous index as runs of rows
(`pipeline.pack.splice`), the rest read from the caches, in path order either way, so an
incremental pack writes the tables a full one does (docs/architecture.md,
"The pipeline: doit tasks, one per stage")."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kernel import index_format
from pipeline import state as records_state
from pipeline.cluster import topics as cluster
from pipeline.cluster.topics import ClusterAssignment
from pipeline.memory import release_freed
from pipeline.pack import duplicates, ivf, lexical
from pipeline.pack import links as link_pack
from pipeline.pack import schema as schema_pack
from pipeline.pack.lexical import LexicalTables
from pipeline.pack.splice import splice
from pipeline.plan import Delta, Plan
from pipeline.state import ManifestEntry, State


@dataclass(frozen=True)
class PackSources:
    """What pack reads: the current files and where their fresh rows come from."""

    entries: Collection[ManifestEntry]  # every current file; read only when `delta` cannot plan
    dimensions: int
    build_key: str  # model key + chunking key: what makes old rows reusable
    # sha -> {"title", "metadata", "error", "aliases", "tags", "chunks"} of the fresh files
    load_documents: Callable[[set[str]], dict[str, dict[str, Any]]]
    # chunk sha bytes (in order) -> (n, dimensions) float32
    load_vectors: Callable[[list[bytes]], np.ndarray]
    # The overlay and the clusters the schema and cluster stages stored (None: neither).
    state: State | None
    delta: Delta | None = None  # the changes since the previous pack (None: diff every file)


@dataclass(frozen=True)
class Written:
    bytes: int
    chunks: int
    reused_files: int
    damaged: tuple[str, ...]


def _files_rows(entries: list[ManifestEntry], docs: dict[str, dict[str, Any]]) -> pa.Table:
    rows = [docs[e.sha256] for e in entries]
    n = len(entries)
    return pa.Table.from_arrays(
        [
            pa.array(np.zeros(n, dtype=np.int32)),
            pa.array([e.path for e in entries], pa.string()),
            pa.array([e.sha256 for e in entries], pa.string()),
            pa.array([e.size for e in entries], pa.int64()),
            pa.array([e.mtime_ns / 1e9 for e in entries], pa.float64()),
            pa.array([d["title"] for d in rows], pa.string()),
            pa.array([json.dumps(d["metadata"], ensure_ascii=False) for d in rows], pa.string()),
            pa.array([d["error"] for d in rows], pa.string()),
            pa.array(np.full(n, -1, dtype=np.int32)),
            pa.array([d.get("aliases") or [] for d in rows], pa.list_(pa.string())),
            pa.array([d.get("tags") or [] for d in rows], pa.list_(pa.string())),
        ],
        schema=index_format.FILES_SCHEMA,
    )


def _chunk_columns(
    entries: list[ManifestEntry], docs: dict[str, dict[str, Any]], first_file_id: int
) -> list[pa.Array]:
    """The chunks' columns from `file_id` to `sha256`, from the records of `entries`."""
    file_ids, headings, paths, starts, ends, texts, tokens, shas = ([] for _ in range(8))
    for offset, entry in enumerate(entries):
        for c in docs[entry.sha256]["chunks"]:
            file_ids.append(first_file_id + offset)
            headings.append(c["heading"])
            paths.append(c["heading_path"])
            starts.append(c["start_line"])
            ends.append(c["end_line"])
            texts.append(c["text"])
            tokens.append(c["token_count"])
            shas.append(c["sha256"])
    return [
        pa.array(file_ids, pa.int32()),
        pa.array(headings, pa.string()),
        pa.array(paths, pa.list_(pa.string())),
        pa.array(starts, pa.int32()),
        pa.array(ends, pa.int32()),
        pa.array(texts, pa.string()),
        pa.array(tokens, pa.int32()),
        pa.array(shas, pa.string()),
    ]


def _with_vectors(
    columns: list[pa.Array], load_vectors: Callable[[list[bytes]], np.ndarray], dimensions: int
) -> pa.Table:
    """The chunks table of `_chunk_columns`' columns, with each chunk's vector."""
    shas = columns[-1].to_pylist()
    vectors = np.ascontiguousarray(load_vectors([bytes.fromhex(s) for s in shas]), np.float32)
    # A zero row: no usable vector (never cached), a null vector searched by keywords only.
    missing = ~vectors.any(axis=1) if len(vectors) else np.zeros(0, dtype=bool)
    flat = pa.array(vectors.reshape(-1))
    return pa.Table.from_arrays(
        [
            pa.array(np.zeros(len(shas), dtype=np.int32)),
            *columns,
            pa.FixedSizeListArray.from_arrays(
                flat, dimensions, mask=pa.array(missing) if missing.any() else None
            ),
        ],
        schema=index_format.chunks_schema(dimensions),
    )


@dataclass(frozen=True)
class _Fresh:
    files: pa.Table
    chunks: pa.Table
    counts: np.ndarray  # chunks per fresh file
    links: list  # each fresh file's raw links


def _fresh_rows(fresh: list[ManifestEntry], sources: PackSources) -> _Fresh:
    """The rows of the fresh files, from their records `RECORDS_BATCH` files at a time (each
    batch's Python objects dropped); the vectors read once, after the records."""
    step = records_state.RECORDS_BATCH
    files: list[pa.Table] = []
    columns: list[list[pa.Array]] = []
    counts: list[int] = []
    links: list = []
    for start in range(0, max(len(fresh), 1), step):
        batch = fresh[start : start + step]
        docs = sources.load_documents({e.sha256 for e in batch})
        files.append(_files_rows(batch, docs))
        columns.append(_chunk_columns(batch, docs, start))
        counts += [len(docs[e.sha256]["chunks"]) for e in batch]
        links += [docs[e.sha256].get("links", ()) for e in batch]
        del docs
        release_freed()  # the batch's Python objects: Arrow and NumPy allocate elsewhere
    joined = [_joined([part[i] for part in columns]) for i in range(len(columns[0]))]
    del columns
    chunks = _with_vectors(joined, sources.load_vectors, sources.dimensions)
    release_freed()  # the workers' batches of held vectors, now rows of the chunks table
    files_table = pa.concat_tables(files).combine_chunks()
    return _Fresh(files_table, chunks, np.array(counts, dtype=np.int64), links)


def _joined(parts: list[pa.Array]) -> pa.Array:
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _previous(
    index_path: Path, build_key: str, damaged: list[str]
) -> index_format.IndexFile | None:
    try:
        previous = index_format.read_index(index_path)
    except index_format.IndexDamaged:
        damaged.append(str(index_path))
        return None
    except index_format.IndexFormatError:
        return None
    if previous.meta.get("build_key") != build_key:
        return None
    # Rows are reused only from an index whose checksums hold: reused bytes get fresh
    # checksums in the new file (the verdict is shared with the write side's cache).
    if index_format.checksum_problems(previous):
        damaged.append(str(index_path))
        return None
    # Reuse slices runs of rows: chunks must be grouped by file in file order.
    file_ids = previous.tables["chunks"].column("file_id").to_numpy()
    if len(file_ids) and (np.any(np.diff(file_ids) < 0) or file_ids[-1] >= previous_rows(previous)):
        return None
    return previous


def previous_rows(previous: index_format.IndexFile) -> int:
    return previous.tables["files"].num_rows


def _file_source(entries: list[ManifestEntry], previous: index_format.IndexFile | None):
    """Per new file row, the row of the previous index with the same path, content and mtime,
    or -1."""
    import pyarrow.compute as pc

    source = np.full(len(entries), -1, dtype=np.int64)
    old = previous.tables["files"] if previous is not None else None
    if old is None or not old.num_rows or not entries:
        return source
    paths = [e.path for e in entries]
    shas = [e.sha256 for e in entries]
    mtimes = np.array([e.mtime_ns for e in entries], dtype=np.int64) / 1e9
    at = pc.index_in(pa.array(paths, pa.string()), value_set=old.column("path"))
    found = at.is_valid().to_numpy(zero_copy_only=False)
    rows = at.fill_null(0).to_numpy().astype(np.int64)
    same = pc.equal(old.column("sha256").take(pa.array(rows)), pa.array(shas, pa.string()))
    same = same.to_numpy(zero_copy_only=False)
    same &= old.column("mtime").to_numpy()[rows] == mtimes
    keep = found & same
    source[keep] = rows[keep]
    return source


def _delta_source(
    previous: index_format.IndexFile, delta: Delta, files: int
) -> tuple[list[ManifestEntry], np.ndarray] | None:
    """`_file_source` from the delta alone: the previous rows kept but those that left or
    are rebuilt, the rebuilt entries put in at their places in path order. None when the
    result would not hold `files` rows (then the whole manifest is diffed)."""
    old = previous.tables["files"]
    n = old.num_rows
    paths = index_format.column_array(old, "path")
    shas = index_format.column_array(old, "sha256")
    mtimes = index_format.column_array(old, "mtime").to_numpy()

    def row_of(path: str) -> tuple[int, bool]:
        lo, hi = 0, n
        while lo < hi:  # bisect over the Arrow column, one scalar per step
            mid = (lo + hi) // 2
            if paths[mid].as_py() < path:
                lo = mid + 1
            else:
                hi = mid
        return lo, lo < n and paths[lo].as_py() == path

    keep = np.ones(n, dtype=bool)
    for path in delta.removed:
        at, found = row_of(path)
        if found:
            keep[at] = False
    fresh: list[ManifestEntry] = []
    places: list[int] = []
    for entry in sorted(delta.fresh, key=itemgetter(0)):
        at, found = row_of(entry.path)
        if found:
            if shas[at].as_py() == entry.sha256 and mtimes[at] == entry.mtime_ns / 1e9:
                continue  # the previous row is the one a full diff would keep
            keep[at] = False
        fresh.append(entry)
        places.append(at)
    kept = np.flatnonzero(keep)
    if len(kept) + len(fresh) != files:
        return None
    # Fresh entry j goes after the kept rows sorting before it and the fresh ones before it.
    before = np.r_[0, np.cumsum(keep)][np.array(places, dtype=np.int64)] if fresh else []
    source = np.empty(len(kept) + len(fresh), dtype=np.int64)
    at_fresh = np.asarray(before, dtype=np.int64) + np.arange(len(fresh), dtype=np.int64)
    mask = np.zeros(len(source), dtype=bool)
    mask[at_fresh] = True
    source[mask] = -1
    source[~mask] = kept
    return fresh, source


def _chunk_source(previous, file_source: np.ndarray, fresh_counts: np.ndarray):
    """Per new chunk row, the previous index's chunk row it repeats or -1; and the new file
    id of every chunk."""
    kept = file_source >= 0
    counts = np.zeros(len(file_source), dtype=np.int64)
    counts[~kept] = fresh_counts
    old_start = np.zeros(1, dtype=np.int64)
    if previous is not None:
        old_ids = previous.tables["chunks"].column("file_id").to_numpy()
        old_start = np.searchsorted(old_ids, np.arange(previous_rows(previous) + 1))
        counts[kept] = np.diff(old_start)[file_source[kept]]
    file_of = np.repeat(np.arange(len(file_source), dtype=np.int32), counts)
    starts = np.r_[0, np.cumsum(counts)][:-1]
    within = np.arange(len(file_of), dtype=np.int64) - np.repeat(starts, counts)
    source = np.full(len(file_of), -1, dtype=np.int64)
    from_old = kept[file_of]
    source[from_old] = old_start[file_source[file_of[from_old]]] + within[from_old]
    return source, file_of


def plan(index_path: Path, sources: PackSources) -> Plan:
    """Runs of rows of the previous index, spliced with the new or changed files read from
    the caches; files in path order."""
    damaged: list[str] = []
    previous = _previous(index_path, sources.build_key, damaged)
    planned = None
    if previous is not None and sources.delta is not None:
        planned = _delta_source(previous, sources.delta, len(sources.entries))
    if planned is not None:
        fresh, file_source = planned
    else:
        entries = sorted(sources.entries, key=itemgetter(0))  # ManifestEntry.path
        file_source = _file_source(entries, previous)
        fresh = [e for e, src in zip(entries, file_source.tolist(), strict=True) if src < 0]
    rows = _fresh_rows(fresh, sources)
    fresh_files, fresh_chunks = rows.files, rows.chunks
    chunk_source, file_of = _chunk_source(previous, file_source, rows.counts)
    old_files = old_chunks = None
    if previous is not None:
        # A cast only where the schemas differ (`cast` imports pyarrow.compute).
        old_files = _as(
            previous.tables["files"].select(index_format.FILES_SCHEMA.names),
            index_format.FILES_SCHEMA,
        )
        old_chunks = _as(previous.tables["chunks"], fresh_chunks.schema)
    files = splice(old_files, fresh_files, file_source)
    chunks = splice(old_chunks, fresh_chunks, chunk_source)
    files = files.set_column(0, "file_id", pa.array(np.arange(files.num_rows, dtype=np.int32)))
    chunks = chunks.set_column(0, "chunk_id", pa.array(np.arange(chunks.num_rows, dtype=np.int32)))
    chunks = chunks.set_column(1, "file_id", pa.array(file_of, pa.int32()))
    links = link_pack.raw_links(previous, file_source, rows.links)
    return Plan(previous, files, chunks, file_source, chunk_source, tuple(damaged), links)


def _as(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table if table.schema.equals(schema, check_metadata=True) else table.cast(schema)


def assemble(
    plan: Plan,
    schema: schema_pack.SchemaUpdate,
    lexical: LexicalTables,
    clusters: ClusterAssignment,
    near_duplicates: pa.Table,
    meta: Mapping[str, Any],
    lists: ivf.IvfPart | None = None,
    resolve_links: bool = True,
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """Every table of the new index and its meta. `resolve_links`: False for a shard (it holds
    only some of the paths)."""
    files = plan.files.set_column(
        plan.files.schema.get_field_index("cluster_id"), "cluster_id", clusters.cluster_ids
    )
    files = schema.with_typed_columns(files)
    tables = {"files": files, "chunks": plan.chunks, **lexical.tables}
    if clusters.table is not None:
        tables["clusters"] = clusters.table
    if clusters.similarity is not None:
        tables[cluster.SIMILARITY_TABLE] = clusters.similarity
    tables.update(schema.tables)
    tables["near_duplicates"] = near_duplicates
    if lists is not None and lists.table is not None:
        tables[ivf.ivf_format.TABLE] = lists.table
    meta = {
        **meta,
        "lexical": lexical.meta,
        "schema_overlay": schema.overlay_meta,
        duplicates.META_KEY: duplicates.near_duplicates_meta(),
        "build_key": meta["build_key"],
        "files": files.num_rows,
        "chunks": plan.chunks.num_rows,
    }
    if lists is not None and lists.meta is not None:
        meta[ivf.ivf_format.META_KEY] = lists.meta
    _add_links(plan, tables, meta, resolve_links)
    return tables, meta


def _add_links(
    plan: Plan, tables: dict[str, pa.Table], meta: dict[str, Any], resolve: bool
) -> None:
    """The link graph and the document ids' collisions (`kernel.doc_ids`)."""
    from kernel import doc_ids

    raw = plan.links if plan.links is not None else link_pack.raw_links(None, np.zeros(0), [])
    if not resolve:
        tables[index_format.LINKS_TABLE] = link_pack.unresolved(raw)
        return
    same = link_pack.same_paths(plan.previous, plan.files)
    fresh = index_format.column_array(raw, "fresh").to_numpy(zero_copy_only=False).any()
    paths = [] if same and not fresh else index_format.column_array(plan.files, "path").to_pylist()
    links = tables[index_format.LINKS_TABLE] = link_pack.resolved(raw, paths, only_fresh=same)
    broken = int(np.count_nonzero(index_format.column_array(links, "broken").to_numpy(False)))
    meta[index_format.LINKS_META_KEY] = {
        "resolution": link_pack.RESOLUTION_VERSION,
        "broken": broken,
    }
    kept = plan.previous.meta.get(index_format.DOC_IDS_META_KEY) if same else None
    meta[index_format.DOC_IDS_META_KEY] = kept if kept is not None else doc_ids.lengthened(paths)


def publish(
    index_path: Path,
    sources: PackSources,
    meta: Mapping[str, Any],
    rows: Plan | None = None,
    schema: schema_pack.SchemaUpdate | None = None,
    analysed: lexical.Store | lexical.Handed | None = None,
    ivf_min_rows: int | None = None,
    writer: index_format.IndexWriter | None = None,
) -> Written:
    """pack in its named steps (`plan`, `schema_pack.update`, `cluster.assign`,
    `build_tables`), each table written as soon as it is final. `rows`, `schema`, `writer`:
    what the `schema` stage already made in this run; `ivf_min_rows`: from this many chunks
    on, the IVF lists (None: never)."""
    if rows is None:
        rows = plan(index_path, sources)
    if schema is None:
        schema = schema_pack.update(rows, sources.state)
    if writer is None:
        writer = start_writing(index_path, rows)
    try:
        meta = {**meta, "build_key": sources.build_key}
        tables, full_meta = build_tables(
            rows,
            schema,
            lambda: cluster.assign(rows, sources.state),
            meta,
            sources.dimensions,
            ivf_min_rows,
            analysed,
            early=writer.put,
        )
        written = writer.finish(tables, full_meta)
    except BaseException:
        writer.abort()
        raise
    return Written(written, rows.chunks.num_rows, rows.reused_files, rows.damaged)


def start_writing(index_path: Path, rows: Plan) -> index_format.IndexWriter:
    """The writer of the next index, begun as soon as its rows are planned: the chunks table
    is written on the writer's thread while the later steps run."""
    writer = index_format.IndexWriter(index_path, source=rows.previous)
    try:
        writer.put("chunks", rows.chunks)
    except BaseException:
        writer.abort()
        raise
    return writer


def build_tables(
    rows: Plan,
    schema: schema_pack.SchemaUpdate,
    clusters: ClusterAssignment | Callable[[], ClusterAssignment],
    meta: Mapping[str, Any],
    dimensions: int,
    ivf_min_rows: int | None,
    analysed: lexical.Store | lexical.Handed | None = None,
    ivf_reuse: bool = True,
    early: Callable[[str, pa.Table], None] | None = None,
    resolve_links: bool = True,
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The steps after `plan`, `schema_pack.update` and `cluster.assign`, for one index file
    (or a shard: pipeline/pack/sharded.py), then `assemble`. `ivf_reuse=False`: lists trained
    on these rows even when the previous index has lists. `early`: given each table once
    final. `clusters` as a function is called last: its fit may still be running."""
    postings = lexical.update(rows, analysed)
    if early is not None:
        for name, table in postings.tables.items():
            early(name, table)
    near = duplicates.update(rows)
    lists = None
    if ivf_min_rows is not None:
        lists = ivf.build(
            rows if ivf_reuse else replace(rows, previous=None), dimensions, ivf_min_rows
        )
    if callable(clusters):
        clusters = clusters()
    return assemble(rows, schema, postings, clusters, near, meta, lists, resolve_links)
