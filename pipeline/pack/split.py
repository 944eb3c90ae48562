"""Split a one-file index into the shard set `MDVDB_SHARDS=N mdvdb ingest` would write for
the same files, without parsing or embedding anything again.

Why: measuring a sharded layout of a large corpus (the 1M-chunk point of
docs/scale-out.md) or switching an existing one-file index to shards should not cost a
re-embed. Every row a shard needs is already in the one-file index: its files, chunks,
vectors and lexical analyses. So the sharded pack (`pipeline.pack.sharded.publish`) runs with
that index as every shard's previous file: `pipeline.pack.build.plan` reuses every row from it
(a shard's files are found there by path, SHA-256 and mtime), and the lexical postings,
schema counts, near-duplicate signatures and cluster ids are carried over by the pack's own
update steps, as for an edit that removed the other shards' files. The IVF lists are
trained afresh per shard (a first sharded ingest trains them on the shard's rows), and the
global file and the manifest are written as by any sharded pack: generation 1 for a new
shards folder. Nothing is read from the caches; a file row the one-file index does not hold
is an error.

Clusters and the schema overlay live in the state (`.markdownvdb.state`), not in the index:
with the folder's state, the shards carry the clustering exactly as an ingest would; without
it (an index copied alone), no file has a cluster and no `clusters` table is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kernel import index_format
from kernel.config import Config
from pipeline.pack.build import PackSources, Written
from pipeline.state import ManifestEntry, State

# What an ingest's pack stores in its meta besides what the pack steps add
# (pipeline.stages.pack): taken from the one-file index as it was written.
META_KEYS = (
    "digest",
    "provider",
    "model",
    "dimensions",
    "fusion",
    "config",
    "errors",
    "skipped",
    "mdvdb_version",
)


class SplitError(RuntimeError):
    """The one-file index cannot be split (missing, damaged, or a row it does not hold)."""


def entries_of(source: index_format.IndexFile, state: State | None = None) -> list[ManifestEntry]:
    """The manifest entries of the index's files, as discover recorded them: the files table
    stores each mtime as float seconds (`mtime_ns / 1e9`), which is all pack compares; the
    nanoseconds (in the manifest's shard digests) are the state's manifest entry of the same
    path and content when the state has one, else the float's rounding."""
    files = source.tables["files"]
    paths = index_format.column_array(files, "path").to_pylist()
    shas = index_format.column_array(files, "sha256").to_pylist()
    sizes = index_format.column_array(files, "size").to_numpy()
    seconds = index_format.column_array(files, "mtime").to_numpy()
    nanos = np.rint(seconds * 1e9).astype(np.int64)
    bad = np.flatnonzero(nanos / 1e9 != seconds)
    if len(bad):
        raise SplitError(f"{paths[bad[0]]}: its stored mtime does not round-trip to nanoseconds")
    entries = [
        ManifestEntry(p, int(s), int(n), h)
        for p, s, n, h in zip(paths, sizes.tolist(), nanos.tolist(), shas, strict=True)
    ]
    recorded = state.manifest() if state is not None else {}
    for i, entry in enumerate(entries):
        known = recorded.get(entry.path)
        if (
            known is not None
            and known.sha256 == entry.sha256
            and known.mtime_ns / 1e9 == seconds[i]
        ):
            entries[i] = known
    return entries


def _no_documents(shas: set[str]) -> dict[str, Any]:
    """pack's reader of fresh rows: a split has none (every row is the one-file index's)."""
    if shas:
        raise SplitError(f"{len(shas)} file(s) not held by the one-file index as listed")
    return {}


def _no_vectors(dimensions: int):
    def load(shas: list[bytes]) -> np.ndarray:
        if shas:
            raise SplitError(f"{len(shas)} chunk(s) not held by the one-file index")
        return np.zeros((0, dimensions), dtype=np.float32)

    return load


def split(index_path: Path, config: Config, state: State | None = None) -> Written:
    """Write `config.shards` shards (in `config.shards_path`) from the one-file index at
    `index_path`, and publish their manifest. `state`: the folder's state, for the clusters
    and the schema overlay (None: none)."""
    from pipeline.pack import sharded as shard_pack

    if config.shards < 2:
        raise SplitError(f"MDVDB_SHARDS is {config.shards}: a split needs 2 shards or more")
    try:
        source = index_format.read_index(index_path, lazy=True)
    except index_format.IndexFormatError as exc:  # missing, damaged or another format
        raise SplitError(str(exc)) from None
    meta = {key: source.meta[key] for key in META_KEYS if key in source.meta}
    dimensions = int(source.meta["dimensions"])
    sources = PackSources(
        entries=entries_of(source, state),
        dimensions=dimensions,
        build_key=str(source.meta["build_key"]),
        load_documents=_no_documents,
        load_vectors=_no_vectors(dimensions),
        state=state,
    )
    return shard_pack.publish(config, sources, meta, source=index_path)
