"""The record pack's steps share: `Plan`, the previous index diffed against the manifest; apart
from `pipeline.pack.build` so that no step imports pack back (pyproject.toml's contracts)."""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from kernel import index_format
    from pipeline.state import ManifestEntry


@dataclass(frozen=True)
class Delta:
    """The manifest's changes since the one the published index was packed from: the entries
    to rebuild and the paths that left, which pack plans from instead of diffing every file."""

    fresh: tuple[ManifestEntry, ...]
    removed: tuple[str, ...]

    def without(self, paths: set[str]) -> Delta:
        """After `paths` left the manifest (files that could not be parsed)."""
        fresh = tuple(e for e in self.fresh if e.path not in paths)
        return Delta(fresh, tuple(sorted({*self.removed, *paths})))


@dataclass(frozen=True)
class Plan:
    """The previous index diffed against the manifest: the new `files` and `chunks` rows, each
    with the previous row it repeats (-1: fresh)."""

    previous: index_format.IndexFile | None  # when its rows are reused (still mapped)
    files: pa.Table  # path order; file_id = row
    chunks: pa.Table  # file order; chunk_id = row
    file_source: np.ndarray
    chunk_source: np.ndarray
    damaged: tuple[str, ...]  # the previous index, when it failed its checks
    # The links of `files`, unresolved (`pipeline.pack.links.raw_links`); None: not planned.
    links: pa.Table | None = None

    @property
    def reused_files(self) -> int:
        return int((self.file_source >= 0).sum())
