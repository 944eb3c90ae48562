"""Pack for a sharded index (`MDVDB_SHARDS` > 1): the usual pack once per shard an edit
touched, then one small `global` file of what spans shards (near-duplicate groups, clusters),
then the manifest (docs/architecture.md, "The sharded index (`kernel/shards.py`)")."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kernel import index_format, shards
from kernel.config import Config
from pipeline.cluster import topics as cluster
from pipeline.pack import schema as schema_pack
from pipeline.pack.build import PackSources, Written, build_tables, duplicates, plan, previous_rows


def _digest(*parts: object) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _unchanged(rows, schema, clusters, count: int) -> bool:
    """The shard's rows would be its previous file's: the same files reused whole, cluster
    ids, typed `fm:` columns and problems."""
    previous = rows.previous
    if previous is None or rows.reused_files != count or previous_rows(previous) != count:
        return False
    old_files = previous.tables["files"]
    old_ids = old_files.column("cluster_id").to_numpy()
    if not np.array_equal(old_ids, clusters.cluster_ids.to_numpy(zero_copy_only=False)):
        return False
    types = schema_pack.column_types(schema.result.fields)
    old_types = schema_pack._previous_types(previous)
    if {name: old_types.get(name) for name in types} != types:
        return False
    if {c for c in old_files.column_names if c.startswith("fm:")} != set(schema.typed_names):
        return False
    old_problems = previous.tables.get("schema_problems")
    return old_problems is not None and old_problems.equals(schema.tables["schema_problems"])


def _counted(rows, source: Path | None):
    """The plan the schema step counts: the shard's own or, for a shard split from a one-file
    index, its rows as if all were fresh (the same counts, without N - 1 subtractions)."""
    if source is None:
        return rows
    return replace(
        rows,
        previous=None,
        file_source=np.full(rows.files.num_rows, -1, dtype=np.int64),
        chunk_source=np.full(rows.chunks.num_rows, -1, dtype=np.int64),
    )


def shard_count(config: Config, files: int) -> int:
    """`MDVDB_SHARDS`, or the number of files when there are fewer (no empty shard)."""
    return max(1, min(config.shards, files))


def publish(
    config: Config, sources: PackSources, meta: Mapping[str, Any], source: Path | None = None
) -> Written:
    """Write the shards an edit touched, the global file, and publish the manifest.
    `source`: a one-file index that is every shard's previous file (`bench/split_shards.py`)."""
    from kernel import private
    from kernel.safe_open import real_folder

    folder = config.shards_path
    if not real_folder(folder):  # a link or a file there is refused (one line), never used
        private.make_dir(folder)
    count = shard_count(config, len(sources.entries))
    old = _previous_manifest(folder, count)
    generation = old.generation + 1 if old is not None else 1
    parts: list[list] = [[] for _ in range(count)]
    for entry in sources.entries:
        parts[shards.shard_of(entry.path, count)].append(entry)
    planned = []
    for shard, members in enumerate(parts):
        own = replace(sources, entries=tuple(members))
        previous = folder / old.entries[shard].name if old is not None else folder / "-"
        rows = plan(source if source is not None else previous, own)
        planned.append((rows, schema_pack.update(_counted(rows, source), own.state)))
    # One schema over every shard: the fields' types (hence the typed columns a filter
    # reads) are those of the whole index, not of the shard's files.
    fields = schema_pack.global_fields([update for _, update in planned], sources.state)
    tally = _Tally()
    for shard, members in enumerate(parts):
        own = replace(sources, entries=tuple(members))
        rows, schema = planned[shard]
        if schema_pack.column_types(schema.result.fields) != schema_pack.column_types(fields):
            schema = schema_pack.update(_counted(rows, source), own.state, fields)
        written = _write_shard(config, own, meta, (shard, generation), rows, schema, old, source)
        tally.add(rows, schema, written)
    manifest = _publish(folder, old, generation, fields, tally, sources, meta)
    # One generation of grace: a reader that read the previous manifest may not have
    # mapped its files yet.
    shards.remove_unlisted(folder, manifest.names() | (old.names() if old is not None else set()))
    return Written(tally.written_bytes, tally.chunks, tally.reused, tuple(tally.damaged))


def _previous_manifest(folder: Path, count: int) -> shards.Manifest | None:
    """The published manifest, or None (none, damaged, or of another shard count: every
    shard is then rebuilt from the caches)."""
    try:
        old = shards.read_manifest(folder)
    except shards.ShardsError:
        return None
    if old is not None and (old.shards != count or len(old.entries) != count):
        return None
    return old


@dataclass
class _Tally:
    """What the shards' writes add up to, for the manifest and the ingest's report."""

    entries: list = field(default_factory=list)
    written_bytes: int = 0
    reused: int = 0
    chunks: int = 0
    damaged: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    lexical_meta: dict = field(default_factory=dict)
    overlay_meta: dict = field(default_factory=dict)

    def add(self, rows, schema, written: tuple) -> None:
        entry, size, lexical_meta = written
        self.entries.append(entry)
        self.written_bytes += size
        self.reused += rows.reused_files
        self.chunks += rows.chunks.num_rows
        self.damaged += rows.damaged
        self.problems += schema.result.problems
        self.overlay_meta = schema.overlay_meta
        self.lexical_meta = lexical_meta or self.lexical_meta


def _write_shard(config, own: PackSources, meta, at: tuple[int, int], rows, schema, old, source):
    """(its manifest entry, bytes written, its lexical meta) of one shard: kept as it is when
    its files, clusters and schema are what its previous file holds, else written."""
    shard, generation = at
    count, folder = config.shards, config.shards_path
    members = own.entries
    clusters = cluster.assign(rows, own.state)
    digest = _digest(own.build_key, sorted((e.path, e.sha256, e.mtime_ns) for e in members))
    if source is None and old is not None and _unchanged(rows, schema, clusters, len(members)):
        kept = old.entries[shard]
        return replace(kept, digest=digest), 0, rows.previous.meta.get("lexical")
    shard_meta = {**meta, "build_key": own.build_key, "shard": [shard, count]}
    # A shard as big as an index that gets IVF lists gets its own (MDVDB_IVF_MIN_CHUNKS)
    tables, full_meta = build_tables(
        rows,
        schema,
        clusters,
        shard_meta,
        own.dimensions,
        config.ivf_min_chunks,
        ivf_reuse=source is None,
        resolve_links=False,
    )
    name = shards.shard_name(shard, generation)
    size = index_format.write_index(folder / name, tables, full_meta, source=rows.previous)
    entry = shards.ShardEntry(
        shard, name, generation, digest, rows.files.num_rows, rows.chunks.num_rows
    )
    return entry, size, full_meta["lexical"]


def _publish(folder, old, generation: int, fields, tally: _Tally, sources, meta):
    """Write the global file (the whole index's schema, near-duplicate groups, clusters)
    and publish the manifest naming it and the shards; the manifest."""
    from kernel import doc_ids

    global_name = shards.global_name(generation)
    result = schema_pack.SchemaResult(
        fields=fields,
        problems=sorted(tally.problems, key=lambda p: p.path),
        overlay=schema_pack.stored_overlay(sources.state),
    )
    schema_tables = {
        "schema": schema_pack.schema_table(result),
        "schema_problems": schema_pack.problems_table(result),
    }
    previous_global = folder / old.global_file if old is not None else None
    files = _write_global(
        folder, global_name, tally.entries, sources, meta, schema_tables, previous_global
    )
    count = len(tally.entries)
    manifest = shards.Manifest(
        count,
        generation,
        tally.entries,
        global_name,
        {
            **meta,
            "build_key": sources.build_key,
            "lexical": tally.lexical_meta,
            "schema_overlay": tally.overlay_meta,
            duplicates.META_KEY: duplicates.near_duplicates_meta(),
            "files": files,
            "chunks": tally.chunks,
            "shards": count,
            "generation": generation,
            index_format.DOC_IDS_META_KEY: doc_ids.lengthened(e.path for e in sources.entries),
            "written_at": time.time(),
        },
    )
    shards.publish_manifest(folder, manifest)
    return manifest


def _write_global(
    folder,
    name: str,
    entries: list[shards.ShardEntry],
    sources: PackSources,
    meta,
    schema_tables: dict[str, pa.Table],
    previous_global=None,
) -> int:
    """The corpus-wide tables from the shards just published: near-duplicate groups (kept
    from the previous global file when the signatures are the same), the clusters, and the
    one-file order (`shard_files`, `shard_chunks`, `chunk_files`) readers open shards by."""
    opened = [index_format.read_index(folder / e.name, lazy=True) for e in entries]
    paths = [f.tables["files"].column("path").to_pylist() for f in opened]
    chunk_files = [f.tables["chunks"].column("file_id").to_numpy() for f in opened]
    order = shards.global_order(paths, chunk_files)
    signatures = np.concatenate(
        [f.tables["near_duplicates"].column("signature").to_numpy() for f in opened]
        or [np.zeros(0, np.uint64)]
    )[order.chunk_order]
    near = _previous_groups(previous_global, signatures)
    if near is None:
        near = pa.Table.from_arrays(
            [pa.array(signatures, pa.uint64()), pa.array(duplicates.groups(signatures))],
            schema=duplicates.schema(),
        )
    chunk_file_ids = np.empty(len(order.chunk_order), dtype=np.int32)
    for ids, chunk_ids, local in zip(order.file_ids, order.chunk_ids, chunk_files, strict=True):
        chunk_file_ids[chunk_ids] = ids[np.asarray(local, dtype=np.int64)]
    concatenated = [
        np.concatenate(ids or [np.zeros(0, np.int64)]) for ids in (order.file_ids, order.chunk_ids)
    ]
    tables: dict[str, pa.Table] = {
        "near_duplicates": near,
        **schema_tables,
        "shard_files": pa.table({"file_id": pa.array(concatenated[0], pa.int64())}),
        "shard_chunks": pa.table({"chunk_id": pa.array(concatenated[1], pa.int64())}),
        "chunk_files": pa.table({"file_id": pa.array(chunk_file_ids, pa.int32())}),
    }
    files = pa.concat_tables(
        [f.tables["files"].select(["path", "sha256", "cluster_id"]) for f in opened]
    ).take(pa.array(order.file_order))
    if sources.state is not None:
        table = cluster.clusters_table(files, sources.state)
        if table is not None:
            tables["clusters"] = table
    index_format.write_index(
        folder / name, tables, {**meta, duplicates.META_KEY: duplicates.near_duplicates_meta()}
    )
    return files.num_rows


def _previous_groups(path, signatures: np.ndarray) -> pa.Table | None:
    """The previous global file's near-duplicate table when its signatures (same version)
    are these, in this order: the groups are a function of them."""
    if path is None:
        return None
    try:
        previous = index_format.read_index(path, lazy=True)
        if (previous.meta.get(duplicates.META_KEY) or {}) != duplicates.near_duplicates_meta():
            return None
        table = previous.tables.get("near_duplicates")
    except index_format.IndexFormatError:
        return None
    if table is None or table.num_rows != len(signatures):
        return None
    if not np.array_equal(table.column("signature").to_numpy(), signatures):
        return None
    return table.combine_chunks()
