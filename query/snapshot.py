"""One published index, mapped, and the `Reader` that holds it. Readers take no lock: the
writer publishes by atomic rename, a long-lived reader re-maps when the inode changes, and a
query pins one snapshot for its whole duration (`Reader.pinned`). The bottom of `query/`:
nothing here imports the modules that read it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernel import index_format, shards
from kernel.config import Config

__all__ = ["QueryError", "Reader", "Snapshot"]


class QueryError(RuntimeError):
    """A query that cannot be answered (bad path, provider mismatch...); one line."""


@dataclass(eq=False, repr=False)
class Snapshot:
    """One published index, mapped: arrow tables plus NumPy views over them."""

    file: index_format.IndexFile
    vectors: np.ndarray  # (chunks, dimensions) float32 view over the map
    chunk_file_ids: np.ndarray
    _path_ids: dict[str, int] | None = field(default=None, repr=False)
    # Structures derived from this snapshot once (the lexical index...), dropped with it.
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, lite: bool = False) -> Snapshot:
        """`lite`: columns of `kernel.arrow_lite`, without importing pyarrow."""
        file = index_format.read_index(path, lite=lite)
        chunks = file.tables["chunks"]
        return cls(
            file=file,
            vectors=index_format.vector_matrix(file),
            chunk_file_ids=index_format.column_array(chunks, "file_id").to_numpy(),
        )

    @property
    def paths(self) -> list[str]:
        """Every file's path, by file id: built on first use, which a search that returns
        ten results never needs."""
        found = self.cache.get("paths")
        if found is None:
            found = self.cache["paths"] = self.table("files").column("path").to_pylist()
        return found

    @property
    def meta(self) -> dict[str, Any]:
        return self.file.meta

    def table(self, name: str):
        return self.file.table(name)


# The last snapshot mapped per index path, shared by every Index of this process (`mdvdb
# serve` opens one per call): immutable, so safe to share.
_SNAPSHOTS: dict[tuple[Path, bool], Snapshot] = {}  # by path and lite


def _shared_snapshot(path: Path, lite: bool = False, route: tuple[str, ...] = ()) -> Snapshot:
    key = (path, lite)
    cached = _SNAPSHOTS.get(key)
    if cached is not None and getattr(cached, "route", route) != route:
        cached = None  # the same sharded index, read through other shard groups
    if cached is not None:
        try:
            st = os.stat(path)
            if st.st_ino == cached.file.inode and st.st_mtime_ns == cached.file.mtime_ns:
                _refuse_changed_in_place(cached)
                return cached
        except OSError:
            pass
    if path.name == shards.MANIFEST:  # a sharded index (query.shards.reader)
        from query.shards.reader import ShardedSnapshot

        snap: Snapshot = ShardedSnapshot.load(path, route)  # type: ignore[assignment]
    else:
        snap = Snapshot.load(path, lite)
    _SNAPSHOTS[key] = snap
    return snap


def _refuse_changed_in_place(snap: Snapshot) -> None:
    """IndexDamaged when the mapped file was overwritten in place (`changed_in_place`): a
    long-lived reader would otherwise answer from zeros. A new publish (a rename) ends it."""
    if index_format.changed_in_place(snap.file):
        raise index_format.IndexDamaged(snap.file.path, "overwritten in place since it was mapped")


class Reader:
    """A project's index, opened read-only: the snapshot and the query embedder every query
    needs; maps the file on first use. `query.Index` adds the queries."""

    def __init__(self, config: Config, lite: bool = False):
        self.config = config
        # `lite`: map with the index format's own reader (kernel.arrow_lite), for a process
        # that reads a few columns once and exits; the rest is handed to pyarrow.
        self.lite = lite
        self._snapshot: Snapshot | None = None
        self._provider = None
        self._pins = threading.local()  # the snapshot each thread's current query holds

    # -- snapshot management --------------------------------------------------------------
    @property
    def source(self) -> Path:
        """The published index file, or the manifest of a sharded one (kernel.shards)."""
        return shards.published_source(self.config)

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
            snap = _shared_snapshot(self.source, self.lite, self._route())
            self._snapshot = snap
        return snap

    def _route(self) -> tuple[str, ...]:
        """(MDVDB_RAY_SERVE, MDVDB_RAY_SERVE_APP) when shard groups on Ray Serve answer, unless
        an untrusted folder's `.markdownvdb` chose the cluster: the query's words and vector go
        there."""
        cfg = self.config
        if not cfg.ray_serve:
            return ()
        from kernel.config import CONFIG_FILE, TRUSTED_FOLDERS

        chosen = cfg.from_folder("MDVDB_RAY_SERVE") or cfg.from_folder("MDVDB_RAY_SERVE_APP")
        if chosen and not cfg.trusted:
            raise QueryError(
                f"MDVDB_RAY_SERVE comes from {cfg.root / CONFIG_FILE}; refusing to send "
                f"queries to a cluster the folder chose (set it in your environment, or trust "
                f"the folder: {TRUSTED_FOLDERS}={cfg.root})"
            )
        return (cfg.ray_serve, cfg.ray_serve_app)

    @contextmanager
    def pinned(self) -> Iterator[Snapshot]:
        """Hold one snapshot for a whole query (nested calls share it), so the rows scored and the
        rows returned come from one file."""
        held = getattr(self._pins, "snapshot", None)
        if held is not None:
            yield held
            return
        self._pins.snapshot = snap = self._current()
        from kernel import text_analysis

        try:
            # the query's words are analysed against this snapshot's postings (languages)
            with text_analysis.query_lexicon(_query_lexicon(snap)):
                yield snap
        finally:
            self._pins.snapshot = None

    def _is_outdated(self, snap: Snapshot) -> bool:
        try:
            st = os.stat(self.source)
        except OSError:
            return False  # keep serving the last snapshot if the file vanished
        if st.st_ino != snap.file.inode or st.st_mtime_ns != snap.file.mtime_ns:
            return True
        _refuse_changed_in_place(snap)
        return False

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
            from kernel.providers import get_provider

            meta = self.snapshot.meta
            mismatch = provider_mismatch(meta, self.config)
            if mismatch is not None:
                raise QueryError(f"{mismatch}: run `mdvdb ingest` to re-embed")
            cfg = query_config(meta, self.config)
            # A search is interactive: two retries ride out a blip without a long wait.
            provider = get_provider(
                replace(cfg, embedding_max_retries=min(cfg.embedding_max_retries, 2))
            )
            if provider.dimensions == 0:
                # the index's recorded size: a query vector of another is then an error
                provider.dimensions = int(meta.get("dimensions") or 0)
            self._provider = provider
        return self._provider

    @property
    def loaded_provider(self):
        """The query embedder if a query has loaded it already, else None (loads nothing)."""
        return self._provider

    def warm_up(self, wait: bool = True) -> bool:
        """Get ready for many queries: map the index, load the query embedder and a local encoder's
        fast session (in the background unless `wait`). True when the fast query path is in use or
        loading."""
        from kernel.config import local_model_is_encoder

        config = self.config
        if config.embedding_provider != "local" or not local_model_is_encoder(
            config.embedding_model
        ):
            return False  # the static model has no slower path; a remote one bills requests
        try:
            if self.snapshot.vectors.shape[0] == 0:
                return False
            warm = getattr(self.provider(), "warm_up", None)
            return bool(warm(wait)) if warm is not None else False
        except Exception:  # no index yet, a model that does not load: the query reports it
            return False


def provider_mismatch(meta: dict[str, Any], config: Config) -> str | None:
    """What differs between the index's embedding model (its meta) and the configured one, or
    None when a query vector fits (dimensions 0 takes the model's size)."""
    built = (meta.get("provider"), meta.get("model"), meta.get("dimensions"))
    wanted = (config.embedding_provider, config.embedding_model, config.embedding_dimensions)
    if built == wanted or (config.embedding_dimensions == 0 and built[:2] == wanted[:2]):
        return None
    if upgrading_to_configured(meta, config):
        return None  # the static stage of an upgrade: its queries use its own model
    return (
        f"index built with {built[0]}:{built[1]} ({built[2]} dims), configuration "
        f"asks for {wanted[0]}:{wanted[1]} ({wanted[2]} dims)"
    )


def upgrading_to_configured(meta: dict[str, Any], config: Config) -> bool:
    """The index is the static stage of an upgrade to the configured model (docs/upgrade.md):
    it serves, with its own model, until the configured model's index replaces it."""
    target = meta.get("upgrading_to")
    wanted = (config.embedding_provider, config.embedding_model, config.embedding_dimensions)
    return (
        isinstance(target, dict)
        and (
            target.get("provider"),
            target.get("model"),
            target.get("dimensions"),
        )
        == wanted
    )


def query_config(meta: dict[str, Any], config: Config) -> Config:
    """The configuration a query vector for this index is made with: the configured one,
    or during an upgrade the model the index was built with (one model per ranking)."""
    if not upgrading_to_configured(meta, config):
        return config
    return replace(
        config,
        embedding_provider=str(meta.get("provider")),
        embedding_model=meta.get("model"),
        embedding_dimensions=meta.get("dimensions"),
    )


def _query_lexicon(snap):
    """The snapshot's `QueryLexicon` (once per snapshot): counts and chunk ids from its
    postings, which are built only when a query word is looked up."""
    found = snap.cache.get("query_lexicon")
    if found is None:
        from kernel import text_analysis

        def lexical():
            from query.score.lexical import LexicalUnavailable, snapshot_lexical

            try:
                return snapshot_lexical(snap)
            except LexicalUnavailable:  # the search says so itself; its words stay English
                return None

        def frequency(hashes: np.ndarray) -> np.ndarray:
            held = lexical()
            if held is None:
                return np.zeros(len(hashes), dtype=np.int64)
            return held.document_frequency(hashes)

        def chunks(hashes: np.ndarray) -> list:
            held = lexical()
            return [None] * len(hashes) if held is None else held.term_chunks(hashes)

        n_chunks = int(snap.chunk_file_ids.shape[0])
        found = text_analysis.QueryLexicon(frequency, chunks, n_chunks)
        snap.cache["query_lexicon"] = found
    return found
