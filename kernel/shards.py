"""A sharded index (`MDVDB_SHARDS` > 1): N ordinary index files and the manifest that
publishes one consistent set of them. Layout, generations and the global order:
docs/architecture.md, "Kernel modules in detail", "The sharded index".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.safe_open import Refused, read_own, real_folder, remove_where

if TYPE_CHECKING:  # NumPy only where the global order is built: a no-op ingest never loads it
    import numpy as np

MANIFEST = "manifest.json"
FORMAT = 1
MANIFEST_LIMIT = 64 << 20  # ~200 bytes a shard: far above any shard count a pack writes


class ShardsError(RuntimeError):
    """A sharded index that cannot be read (a torn or foreign manifest...); one line."""


class ShardsTooNew(ShardsError):
    """A manifest a newer mdvdb wrote: not damaged, and not for this one to replace."""

    def __init__(self, path: Path, version: int):
        self.version = version
        super().__init__(
            f"{path} was written by a newer mdvdb (shard manifest format {version}; this one "
            f"reads format {FORMAT}): upgrade mdvdb (pip install -U markdown-vdb)"
        )


def shard_of(path: str, shards: int) -> int:
    """The shard a file belongs to: a stable hash of its relative path (the same in every
    process, on every machine, unlike `hash()`)."""
    if shards <= 1:
        return 0
    digest = blake2b(path.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % shards


def shard_name(shard: int, generation: int) -> str:
    return f"shard-{shard:03d}-g{generation:06d}.index"


def global_name(generation: int) -> str:
    return f"global-g{generation:06d}.index"


@dataclass(eq=False, repr=False)
class ShardEntry:
    """One shard file of a manifest."""

    shard: int
    name: str
    generation: int
    digest: str  # what the shard holds (its files' paths, contents and build): skip test
    files: int = 0
    chunks: int = 0


@dataclass(eq=False, repr=False)
class Manifest:
    """The published set of shard files of one generation."""

    shards: int
    generation: int
    entries: list[ShardEntry]
    global_file: str
    meta: dict[str, Any] = field(default_factory=dict)

    def names(self) -> set[str]:
        return {e.name for e in self.entries} | {self.global_file}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "shards": self.shards,
            "generation": self.generation,
            "files": [vars(e) for e in self.entries],
            "global": self.global_file,
            "meta": self.meta,
        }


def published_file(config) -> Path:
    """The file whose rename publishes the index the configuration asks for: the manifest
    of a sharded index, else the index file itself."""
    if config.shards > 1:
        return manifest_path(config.shards_path)
    return config.index_path


def published_source(config) -> Path:
    """What a reader opens: the layout the setting asks for (the index file or the manifest),
    or the other one when it is the only one there (built with another `MDVDB_SHARDS`)."""
    single = config.index_path
    manifest = manifest_path(config.shards_path)
    wanted, other = (manifest, single) if config.shards > 1 else (single, manifest)
    if not _present(wanted) and _present(other):
        return other
    return wanted


def _present(path: Path) -> bool:
    """Something is at `path` (a manifest only inside a real shards folder: a link named
    like it is never followed, `kernel.safe_open.real_folder`)."""
    if path.name == MANIFEST:
        try:
            if not real_folder(path.parent):
                return False
        except Refused:
            return False
    return os.path.lexists(path)


def published_meta(config) -> dict[str, Any]:
    """The meta of the index the configuration asks for (a sharded index's: its manifest's);
    FileNotFoundError when there is none yet."""
    if config.shards > 1:
        manifest = read_manifest(config.shards_path)
        if manifest is None:
            raise FileNotFoundError(manifest_path(config.shards_path))
        return dict(manifest.meta)
    from kernel import index_format

    return index_format.read_meta(config.index_path)


def manifest_path(folder: Path) -> Path:
    return folder / MANIFEST


def read_manifest(folder: Path) -> Manifest | None:
    """The published manifest, None when the folder has none."""
    path = manifest_path(folder)
    try:
        if not real_folder(folder):
            return None
        raw = read_own(path, MANIFEST_LIMIT)  # never a link, a FIFO or unbounded
    except OSError as exc:
        raise ShardsError(
            f"{path}: cannot read the shard manifest ({exc.strerror or exc})"
        ) from None
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        found = data.get("format")
        if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT:
            raise ShardsTooNew(path, found)
        if found != FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        entries = [ShardEntry(**e) for e in data["files"]]
        manifest = Manifest(
            int(data["shards"]), int(data["generation"]), entries, data["global"], data["meta"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ShardsError(
            f"{path}: not a shard manifest of this mdvdb ({exc}): run `mdvdb ingest --full`"
        ) from None
    for name in manifest.names():
        if "/" in name or "\\" in name or name.startswith("."):
            raise ShardsError(f"{path}: names a file outside its folder ({name!r})")
    return manifest


def publish_manifest(folder: Path, manifest: Manifest) -> None:
    """The commit of a sharded pack: a temp file, fsync, rename over the manifest, fsync the
    folder."""
    data = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode()
    import tempfile  # the write side only: a search does not pay for its import

    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, manifest_path(folder))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_unlisted(folder: Path, keep: set[str]) -> list[str]:
    """Remove shard and global files no kept manifest names (after a publish); only in a
    real folder, never through a link (`kernel.safe_open.remove_where`)."""

    def unlisted(name: str) -> bool:
        return (
            name.endswith(".index") and name.startswith(("shard-", "global-")) and name not in keep
        )

    return remove_where(folder, unlisted)


@dataclass(frozen=True)
class GlobalOrder:
    """Where each shard's rows go in the one-file order: `file_ids[s][i]`, the global id of
    shard s's file i (`chunk_ids`: chunks); `concatenated[chunk_order]` is that order."""

    file_ids: list[np.ndarray]
    chunk_ids: list[np.ndarray]
    file_order: np.ndarray
    chunk_order: np.ndarray


def global_order(paths: list[list[str]], chunk_files: list[np.ndarray]) -> GlobalOrder:
    """The one-file order of the shards' rows: files by path, chunks by file then in file.
    `paths[s]`: shard s's file paths in row order; `chunk_files[s]`: its chunks' file ids."""
    import numpy as np

    all_paths = [p for shard in paths for p in shard]
    by_path = sorted(range(len(all_paths)), key=all_paths.__getitem__)
    file_order = np.asarray(by_path, dtype=np.int64)
    global_of = np.empty(len(all_paths), dtype=np.int64)
    global_of[file_order] = np.arange(len(all_paths), dtype=np.int64)
    counts = np.zeros(len(all_paths), dtype=np.int64)  # chunks per global file
    file_ids, local_globals = [], []
    start = 0
    for shard_paths, files in zip(paths, chunk_files, strict=True):
        ids = global_of[start : start + len(shard_paths)]
        file_ids.append(ids)
        g = ids[np.asarray(files, dtype=np.int64)] if len(files) else np.zeros(0, np.int64)
        local_globals.append(g)
        np.add.at(counts, g, 1)
        start += len(shard_paths)
    first = np.r_[0, np.cumsum(counts)][:-1]
    chunk_ids = []
    for g in local_globals:
        # chunks of one file are contiguous and in order within their shard
        if len(g):
            starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
            within = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
            chunk_ids.append(first[g] + within)
        else:
            chunk_ids.append(np.zeros(0, np.int64))
    concatenated = np.concatenate(chunk_ids) if chunk_ids else np.zeros(0, np.int64)
    chunk_order = np.empty(len(concatenated), dtype=np.int64)
    chunk_order[concatenated] = np.arange(len(concatenated), dtype=np.int64)
    return GlobalOrder(file_ids, chunk_ids, file_order, chunk_order)


def order_from_ids(
    file_ids: np.ndarray, file_counts: list[int], chunk_ids: np.ndarray, chunk_counts: list[int]
) -> GlobalOrder:
    """The `GlobalOrder` from the global ids of every shard's rows, as the global file stores
    them; ValueError when they do not fit the row counts or are not a permutation."""
    import numpy as np

    def split(ids: np.ndarray, counts: list[int], what: str) -> tuple[list, np.ndarray]:
        if len(ids) != sum(counts):
            raise ValueError(f"the stored {what} order has {len(ids)} rows, not {sum(counts)}")
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(ids)):
            raise ValueError(f"the stored {what} order is not a permutation")
        order = np.full(len(ids), -1, dtype=np.int64)
        order[ids] = np.arange(len(ids), dtype=np.int64)
        if len(ids) and (order < 0).any():
            raise ValueError(f"the stored {what} order is not a permutation")
        bounds = np.r_[0, np.cumsum(counts)].astype(np.int64)
        return [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)], order

    files, file_order = split(file_ids, file_counts, "file")
    chunks, chunk_order = split(chunk_ids, chunk_counts, "chunk")
    return GlobalOrder(files, chunks, file_order, chunk_order)
