"""Split a one-file index into the shard set `MDVDB_SHARDS=N mdvdb ingest` would write, without
parsing or embedding again, and time it.

    python bench/split_shards.py SOURCE_ROOT DEST_ROOT --shards 20 [--json]
    python bench/split_shards.py /tmp/m1 /tmp/shard1m/m1-20 --shards 20   # the 1M point

SOURCE_ROOT holds `.markdownvdb.index` (and, when it has one, `.markdownvdb.state`: the
clusters and schema overlay come from there; without it the shards carry no clusters).
The shards are written to DEST_ROOT/.markdownvdb.index.shards (DEST_ROOT may be SOURCE_ROOT:
a folder switched to shards in place). SOURCE_ROOT is only read. DEST_ROOT's own
`.markdownvdb` settings apply (MDVDB_IVF_MIN_CHUNKS: a shard of that many chunks gets IVF
lists, as in an ingest). Read the result with MDVDB_SHARDS=N, e.g.
`python bench/scaleout.py --layouts 1=SOURCE_ROOT,20=DEST_ROOT`.

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

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench.common import print_table  # noqa: E402
from kernel import index_format  # noqa: E402
from kernel.config import Config  # noqa: E402
from pipeline.pack.build import PackSources, Written  # noqa: E402
from pipeline.state import ManifestEntry, State  # noqa: E402

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


def split_folder(source: Path, dest: Path, shards: int) -> dict:
    """Split SOURCE's one-file index into DEST's shards folder; what it took."""
    from kernel.config import load_config
    from pipeline.lock import LockBusy, WriterLock
    from pipeline.state import State

    dest.mkdir(parents=True, exist_ok=True)
    config = load_config(dest, {**os.environ, "MDVDB_SHARDS": str(shards)})
    index_path = load_config(source, {**os.environ, "MDVDB_SHARDS": "1"}).index_path
    state_folder = load_config(source, dict(os.environ)).state_path
    has_state = (state_folder / "cache.sqlite3").exists()
    # DEST's writer lock, as an ingest takes it: the split publishes DEST's shards folder.
    lock = WriterLock(config.state_path, command="split_shards")
    try:
        lock.acquire(wait=False)
    except LockBusy as exc:
        raise SplitError(str(exc)) from None
    state = State(state_folder) if has_state else None
    started, cpu = time.perf_counter(), time.process_time()
    try:
        written = split(index_path, config, state)
    finally:
        if state is not None:
            state.close()
        lock.release()
    return {
        "shards": shards,
        "chunks": written.chunks,
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_seconds": round(time.process_time() - cpu, 2),
        "written_mb": round(written.bytes / 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "with_state": state is not None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="folder with the one-file index")
    parser.add_argument("dest", type=Path, help="folder to write the shards folder into")
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.shards < 2:
        parser.error("--shards must be 2 or more")
    try:
        row = split_folder(args.source.resolve(), args.dest.resolve(), args.shards)
    except SplitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print_table(f"split {args.source} into {args.shards} shards", [row], args.json)
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
