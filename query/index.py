"""The read side's entry point: map the index file and answer from it.

Readers take no lock. The writer publishes a new file by atomic rename, so a mapped index is
one consistent snapshot; a long-lived reader checks the path's inode between queries and
re-maps when a newer index was published. A query pins one snapshot for its whole duration
(`Index.pinned`), so the rows it scores and the rows it returns come from the same file even
when a new index is published mid-query.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdvdb import index_format
from mdvdb.config import DEFAULT_LIMIT, Config, ConfigError, load_config
from mdvdb.off_loop import async_twin
from query.results import Document, SearchResponse, Section, Status

if TYPE_CHECKING:
    from query.clusters import ClusterList
    from query.collapse import Diversity
    from query.filters import Filter
    from query.grep import Match
    from query.schema import Schema


class QueryError(RuntimeError):
    """A query that cannot be answered (bad path, provider mismatch...); one line."""


@dataclass
class Snapshot:
    """One published index, mapped: arrow tables plus NumPy views over them."""

    file: index_format.IndexFile
    vectors: np.ndarray  # (chunks, dimensions) float32 view over the map
    chunk_file_ids: np.ndarray
    _path_ids: dict[str, int] | None = field(default=None, repr=False)
    # Structures derived from this snapshot once (the lexical index...), dropped with it.
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        file = index_format.read_index(path)
        chunks = file.tables["chunks"]
        dims = int(file.meta.get("dimensions") or 0)
        column = index_format.column_array(chunks, "vector")
        if chunks.num_rows:
            # `.values` ignores a slice offset (`flatten()` would honour it, but imports
            # pyarrow.compute: ~30 ms of a cold query), so apply the offset by hand.
            flat = column.values.to_numpy(zero_copy_only=True)
            start = column.offset * dims
            vectors = flat[start : start + chunks.num_rows * dims].reshape(chunks.num_rows, dims)
        else:
            vectors = np.zeros((0, dims), dtype=np.float32)
        return cls(
            file=file,
            vectors=vectors,
            chunk_file_ids=index_format.column_array(chunks, "file_id").to_numpy(),
        )

    @property
    def paths(self) -> list[str]:
        """Every file's path, by file id: built on first use (~5 ms on 38k files), which a
        search that returns ten results never needs."""
        found = self.cache.get("paths")
        if found is None:
            found = self.cache["paths"] = self.table("files").column("path").to_pylist()
        return found

    @property
    def meta(self) -> dict[str, Any]:
        return self.file.meta

    def table(self, name: str):
        return self.file.table(name)


# The last snapshot mapped per index path, shared by every Index in this process, so a
# long-lived process (`mdvdb serve`, `mdvdb mcp`) that opens an Index per call maps each
# published file once. A snapshot is immutable, so sharing it is safe.
_SNAPSHOTS: dict[Path, Snapshot] = {}


def _shared_snapshot(path: Path) -> Snapshot:
    cached = _SNAPSHOTS.get(path)
    if cached is not None:
        try:
            st = os.stat(path)
            if st.st_ino == cached.file.inode and st.st_mtime_ns == cached.file.mtime_ns:
                return cached
        except OSError:
            pass
    snap = Snapshot.load(path)
    _SNAPSHOTS[path] = snap
    return snap


class Index:
    """A project's index, opened read-only. Cheap to create; maps the file on first use."""

    def __init__(self, config: Config):
        self.config = config
        self._snapshot: Snapshot | None = None
        self._provider = None
        self._pins = threading.local()  # the snapshot each thread's current query holds

    # -- snapshot management --------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        """The snapshot pinned by the running query, else the newest published one."""
        pinned = getattr(self._pins, "snapshot", None)
        if pinned is not None:
            return pinned
        return self._current()

    def _current(self) -> Snapshot:
        snap = self._snapshot
        if snap is None or self._is_outdated(snap):
            snap = _shared_snapshot(self.config.index_path)
            self._snapshot = snap
        return snap

    @contextmanager
    def pinned(self) -> Iterator[Snapshot]:
        """Hold one snapshot for a whole query (nested calls share it). Without this, a
        query that reads `snapshot` twice could score rows of one file and return rows of
        a newer one published in between."""
        held = getattr(self._pins, "snapshot", None)
        if held is not None:
            yield held
            return
        self._pins.snapshot = self._current()
        try:
            yield self._pins.snapshot
        finally:
            self._pins.snapshot = None

    def _is_outdated(self, snap: Snapshot) -> bool:
        try:
            st = os.stat(self.config.index_path)
        except OSError:
            return False  # keep serving the last snapshot if the file vanished
        return st.st_ino != snap.file.inode or st.st_mtime_ns != snap.file.mtime_ns

    def refresh(self) -> bool:
        """Switch to a newer published index if there is one; True if it switched."""
        if self._snapshot is not None and not self._is_outdated(self._snapshot):
            return False
        self._snapshot = None
        self._current()
        return True

    def path_id(self, path: str) -> int | None:
        snap = self.snapshot
        if snap._path_ids is None:
            snap._path_ids = {p: i for i, p in enumerate(snap.paths)}
        return snap._path_ids.get(path)

    def provider(self):
        """The query embedder; it must match what the index was built with."""
        if self._provider is None:
            from mdvdb.providers import get_provider

            meta = self.snapshot.meta
            cfg = self.config
            mismatch = provider_mismatch(meta, cfg)
            if mismatch is not None:
                raise QueryError(f"{mismatch}: run `mdvdb ingest` to re-embed")
            # A search is interactive: two retries ride out a blip, more would keep the user
            # waiting ~15 s for "cannot connect" when the server is simply not running.
            provider = get_provider(
                replace(cfg, embedding_max_retries=min(cfg.embedding_max_retries, 2))
            )
            if provider.dimensions == 0:
                # dimensions 0 takes what the model returns: the index recorded that size,
                # so a query vector of another size is an error, not a silent mismatch.
                provider.dimensions = int(meta.get("dimensions") or 0)
            self._provider = provider
        return self._provider

    # -- queries --------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        limit: int | None = None,
        min_score: float | None = None,
        mode: str | None = None,
        explain: bool = False,
        govern: bool | None = None,
        filters: Sequence[Filter] = (),
        mask: np.ndarray | None = None,
        cluster: int | None = None,
        per_file: int | None = None,
        collapse: bool = True,
        diversity: Diversity | None = None,
    ) -> SearchResponse:
        """Ranked sections for `query` (`mdvdb search --json`). None takes the configured
        default (MDVDB_SEARCH_DEFAULT_LIMIT, _MIN_SCORE, _MODE); `filters` and `cluster`
        restrict the candidates, `mask` is one boolean per chunk; `per_file` caps sections a
        file, `collapse=False` keeps near-duplicate copies (`diversity`: both, precomputed)."""
        from query.search import search

        with self.pinned():
            return search(
                self,
                query,
                limit=limit,
                min_score=min_score,
                mode=mode,
                explain=explain,
                govern=govern,
                filters=filters,
                mask=mask,
                cluster=cluster,
                per_file=per_file,
                collapse=collapse,
                diversity=diversity,
            )

    def schema(self) -> Schema:
        """The frontmatter schema merged with the overlay (`mdvdb schema --json`, less the
        file count). QueryError for an index written before schemas were indexed."""
        from query.schema import load_schema

        with self.pinned() as snap:
            merged = load_schema(snap)
        if not merged.present:
            raise QueryError("this index has no frontmatter schema yet: run `mdvdb ingest`")
        return merged

    def clusters(self) -> ClusterList:
        """The topic clusters (`mdvdb clusters --json`). QueryError when the index was built
        with MDVDB_CLUSTERING_ENABLED=false."""
        from query.clusters import list_clusters

        with self.pinned():
            return list_clusters(self)

    def grep(
        self,
        pattern: str,
        *,
        regex: bool = False,
        limit: int = DEFAULT_LIMIT,
        per_file_limit: int = 50,
        sources: Sequence[str] = (),
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        file_type: str = "md",
        sort: bool = False,
        include_frontmatter: bool = False,
        exclude_blacklisted: bool = False,
    ) -> list[Match]:
        """Exact text over the source folders with ripgrep, as `mdvdb grep --json` (needs no
        index): the same options and defaults, the matches as `query.grep.Match` (`to_json()`
        gives the CLI's records). A bad source filter is a `query.sources.SourceError`; a
        pattern rg refuses (`regex=True`), or no root to search, a `query.grep.GrepError`."""
        import tempfile

        from query import grep as grepping
        from query.sources import Registry, select_roots

        if not pattern:
            raise grepping.GrepError("a pattern is required")
        if limit < 1 or per_file_limit < 1:
            raise grepping.GrepError("limit and per_file_limit must be at least 1")
        config = self.config
        selection = select_roots(
            config,
            Registry.load(),
            sources=sources,
            include=include,
            exclude=exclude,
            drop_blacklisted=exclude_blacklisted,
        )
        options = grepping.GrepOptions(
            pattern=pattern,
            limit=limit,
            per_file_limit=per_file_limit,
            file_type=file_type,
            regex=regex,
            sort=sort,
            include_frontmatter=include_frontmatter,
        )
        with tempfile.TemporaryFile() as errors:  # a file: rg can never block writing to it
            run = grepping.start(
                options, selection, config.root, config.page_id_field, stderr=errors
            )
            matches = list(run)
            if run.returncode == 2 and not matches:
                errors.seek(0)
                said = [x.strip() for x in errors.read().decode("utf-8", "replace").splitlines()]
                said = [x for x in said if x] or ["rg failed"]
                # rg's first line says what failed, its last why ("regex parse error ...
                # error: unclosed group"); one line for the caller.
                first, last = said[0].rstrip(":"), said[-1].removeprefix("error: ")
                raise grepping.GrepError(first if len(said) == 1 else f"{first}: {last}")
        return matches

    def get_document(self, path: str) -> Document:
        with self.pinned():
            return self._get_document(path)

    def _get_document(self, path: str) -> Document:
        rel = self._relative(path)
        snap = self.snapshot
        file_id = self.path_id(rel)
        if file_id is None:
            raise QueryError(f"{path}: not in the index")
        files = snap.table("files")
        row = {name: files.column(name)[file_id].as_py() for name in files.column_names}
        chunks = snap.table("chunks")
        ids = np.flatnonzero(snap.chunk_file_ids == file_id)
        sections = [
            Section(
                chunks.column("heading")[i].as_py(),
                chunks.column("heading_path")[i].as_py(),
                chunks.column("start_line")[i].as_py(),
                chunks.column("end_line")[i].as_py(),
            )
            for i in ids
        ]
        try:
            content = (self.config.root / rel).read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            content = "\n\n".join(chunks.column("text")[int(i)].as_py() for i in ids)
        return Document(
            path=rel,
            title=row["title"],
            sha256=row["sha256"],
            metadata=json.loads(row["frontmatter"] or "{}"),
            content=content,
            sections=sections,
            parse_error=row["parse_error"],
            cluster_id=row["cluster_id"],
        )

    def status(self, check_files: bool = True) -> Status:
        try:
            with self.pinned():
                return self._status(check_files)
        except index_format.IndexDamaged:
            raise  # one line telling the user to rebuild, not "no index"
        except index_format.IndexFormatError:
            return Status(index_path=str(self.config.index_path), exists=False)

    def _status(self, check_files: bool) -> Status:
        status = Status(index_path=str(self.config.index_path), exists=False)
        snap = self.snapshot
        meta = snap.meta
        status.exists = True
        status.files = int(meta.get("files", 0))
        status.chunks = int(meta.get("chunks", 0))
        status.index_bytes = snap.file.size
        status.last_update = meta.get("written_at")
        status.provider = meta.get("provider")
        status.model = meta.get("model")
        status.dimensions = meta.get("dimensions")
        status.format_version = meta.get("format_version")
        status.errors = meta.get("errors", [])
        status.provider_mismatch = provider_mismatch(meta, self.config)
        if check_files:
            status.stale_files = self._stale_files()
        return status

    def _stale_files(self) -> list[str]:
        """Indexed files whose size or mtime changed, or that are gone (a stat each)."""
        files = self.snapshot.table("files")
        sizes = files.column("size").to_pylist()
        mtimes = files.column("mtime").to_pylist()
        stale = []
        root = str(self.config.root)  # os.path.join: pathlib's `/` was half the time on 38k files
        for path, size, mtime in zip(self.snapshot.paths, sizes, mtimes, strict=True):
            try:
                st = os.stat(os.path.join(root, path))
            except OSError:
                stale.append(path)
                continue
            if st.st_size != size or abs(st.st_mtime_ns / 1e9 - mtime) > 1e-6:
                stale.append(path)
        return stale

    # The async twins, for agent loops built on asyncio: the same calls on a worker thread.
    asearch = async_twin(search)
    aschema = async_twin(schema)
    aclusters = async_twin(clusters)
    agrep = async_twin(grep)
    aget_document = async_twin(get_document)
    astatus = async_twin(status)

    def _relative(self, path: str) -> str:
        """A root-relative POSIX path; anything outside the root is refused."""
        root = self.config.root
        candidate = Path(path)
        absolute = (candidate if candidate.is_absolute() else root / candidate).resolve()
        try:
            return absolute.relative_to(root).as_posix()
        except ValueError:
            raise QueryError(f"{path}: outside the project root, refused") from None


def provider_mismatch(meta: dict[str, Any], config: Config) -> str | None:
    """What differs between the embedding model an index was built with (its meta) and the
    one the configuration asks for, or None when a query vector fits the index (dimensions 0
    in the configuration takes whatever size the model gave)."""
    built = (meta.get("provider"), meta.get("model"), meta.get("dimensions"))
    wanted = (config.embedding_provider, config.embedding_model, config.embedding_dimensions)
    if built == wanted or (config.embedding_dimensions == 0 and built[:2] == wanted[:2]):
        return None
    return (
        f"index built with {built[0]}:{built[1]} ({built[2]} dims), configuration "
        f"asks for {wanted[0]}:{wanted[1]} ({wanted[2]} dims)"
    )


def open_index(root: Path | str | None = None, config: Config | None = None) -> Index:
    """Open a project's index for reading (`root`: the project folder; default: found
    upward from the current folder). A `root` that is not a folder is a ConfigError, as
    `--root` is for the CLI."""
    if config is None and root is not None and not Path(root).is_dir():
        raise ConfigError(f"{root}: not a folder")
    return Index(config or load_config(root))
