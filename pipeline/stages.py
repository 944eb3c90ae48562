"""The write side as typed stages (discover, parse, chunk, embed, cluster, schema, pack):
each takes its inputs as arguments and returns a frozen record carrying its digest, which
`pipeline.tasks` chains as doit tasks (docs/architecture.md, "The pipeline: doit tasks, one
per stage")."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kernel.config import SCHEMA_OVERLAY_FILE, Config
from pipeline.state import ManifestEntry, State

if TYPE_CHECKING:
    from kernel.providers.base import EmbeddingProvider
    from pipeline.pack.build import PackSources
    from pipeline.pack.schema import SchemaUpdate
    from pipeline.plan import Delta, Plan

# An ingest's progress, `progress(stage, done, total)`: (stage, 0, 0) as each stage begins,
# then ("parse"|"chunk"|"embed", done, of) and ("chunks", chunks cut so far, 0).
Progress = Callable[[str, int, int], None]
Problem = tuple[str, str]  # (path, what is wrong with it)


class IngestError(RuntimeError):
    """A stage failed; the previous index is intact."""


def digest_of(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()


def manifest_digest(entries: Mapping[str, ManifestEntry]) -> str:
    """Digest of (path, sha) of every current file (`pipeline.walk.discover.manifest_digest`)."""
    from pipeline.walk.discover import manifest_digest as digest

    return digest(entries.values())


def _quiet(stage: str, done: int, total: int) -> None:
    pass


# -- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    """Every current file (path -> entry), what changed since the last run and, after a
    clean run with the same settings, the shas later stages may trust."""

    entries: Mapping[str, ManifestEntry]
    digest: str
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    hashed: int = 0  # files discover read and hashed (their stat did not match)
    problems: tuple[Problem, ...] = ()
    changed_shas: frozenset[str] | None = None  # added or changed, when trusted; None: diff all
    left_shas: frozenset[str] = frozenset()  # previous versions of changed and removed files
    delta: Delta | None = None  # changes since the published index's manifest, when current

    @classmethod
    def of_state(cls, state: State) -> Manifest:
        """The manifest the last discover stored (a stage run on its own: `doit pack`)."""
        entries = state.manifest()
        return cls(MappingProxyType(entries), manifest_digest(entries))

    def pending(self) -> list[str] | None:
        """Shas a stage must look at, or None: diff the whole manifest against its cache."""
        return None if self.changed_shas is None else sorted(self.changed_shas)

    def without(self, paths: list[str]) -> Manifest:
        gone = set(paths)
        entries = {p: e for p, e in self.entries.items() if p not in gone}
        delta = self.delta.without(gone) if self.delta is not None else None
        return replace(
            self,
            entries=MappingProxyType(entries),
            digest=manifest_digest(entries),
            delta=delta,
        )

    def path_of_sha(self, shas: list[str] | None = None) -> dict[str, str]:
        """sha -> a path holding it (`shas`: only these, looked up among the delta first)."""
        if shas is not None and self.delta is not None:
            found = {e.sha256: e.path for e in self.delta.fresh}
            if all(s in found for s in shas):
                return found
        return {e.sha256: e.path for e in self.entries.values()}


@dataclass(frozen=True)
class Parsed:
    manifest: Manifest  # the files that could be read and parsed
    parsed: int
    problems: tuple[Problem, ...]
    digest: str
    chunks: int = 0  # chunks cut from the parsed files (pipeline.workers chunks as it parses)
    embedded: int = 0  # of which embedded on the way (the local model)
    workers: int = 1  # processes that did it (pipeline.workers), or Ray actors
    executor: str = "local"  # local or ray (MDVDB_EXECUTOR)
    executor_start_seconds: float = 0.0  # Ray: connecting or starting, until the actors are up
    analysed: Any = field(default=None, repr=False, compare=False)  # `lexical.Handed`, for pack
    executor_actors: tuple = ()  # Ray: each actor's `ActorReport`, listed by `ingest --json`


@dataclass(frozen=True)
class Chunked:
    manifest: Manifest
    parsed: int  # files parsed again because a new chunking needed them
    problems: tuple[Problem, ...]
    digest: str


@dataclass(frozen=True)
class Embedded:
    chunks_embedded: int
    problems: tuple[Problem, ...]
    digest: str


@dataclass(frozen=True)
class Clustered:
    mode: str  # full, assign, unchanged or disabled
    digest: str


@dataclass(frozen=True)
class Schema:
    """The frontmatter schema of the files to publish, and the plan it was inferred over."""

    manifest_digest: str
    plan: Plan | None  # None for a sharded index: each shard plans its own rows
    update: SchemaUpdate | None
    problems: tuple[Problem, ...]
    digest: str
    writer: Any = field(default=None, repr=False, compare=False)  # the next index's writer

    def abandon(self) -> None:
        if self.writer is not None:
            self.writer.abort()


@dataclass(frozen=True)
class Packed:
    index_bytes: int
    chunks: int
    reused_files: int
    problems: tuple[Problem, ...]
    digest: str


# -- settings every stage agrees on --------------------------------------------------------


def chunk_key(config: Config) -> str:
    """The chunk cache's key: the chunking and the link extraction its records hold."""
    from pipeline.chunking import chunking_key
    from pipeline.links import LINKS_VERSION

    return f"{chunking_key(config.chunk_max_tokens, config.chunk_overlap_tokens)}:{LINKS_VERSION}"


def build_settings(config: Config) -> str:
    """What a clean run is clean for: the next run trusts discover's change list only
    under the same settings."""
    return digest_of(config.fingerprint(), config.clustering_enabled, str(config.index_path))


def published_is_current(config: Config, state: State) -> bool:
    """The published index is the one the last pack wrote, in this code's format."""
    import stat

    from kernel.shards import published_file

    path = published_file(config)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):  # a link or a FIFO there: publish a real index over it
        return False
    if state.get_value("published_stamp") != [st.st_size, st.st_mtime_ns]:
        return False
    if config.shards > 1:
        # shards of another format were cut from caches of another format: rebuild them all
        from kernel.shards import read_manifest

        manifest = read_manifest(config.shards_path)
        if manifest is None:
            return False
        path = config.shards_path / manifest.global_file
    return _this_format(path)


def _this_format(path) -> bool:
    """The index file at `path` is in the format this code writes."""
    from kernel.index_format import FORMAT_VERSION, MAGIC
    from kernel.safe_open import open_regular

    try:
        with open(open_regular(path), "rb") as fh:
            header = fh.read(16)
    except OSError:
        return False
    return header[:8] == MAGIC and int.from_bytes(header[8:12], "little") == FORMAT_VERSION


def stamp_index(config: Config, state: State) -> None:
    from kernel.shards import published_file

    st = os.stat(published_file(config))
    state.set_value("published_stamp", [st.st_size, st.st_mtime_ns])


# -- discover -------------------------------------------------------------------------------

MANIFEST_DIGEST = "manifest_digest"  # the stored manifest's `manifest_digest`, while current
STAT_SIGNATURES = "folder_signatures"  # per folder, `discover.folder_signatures` of the walk
STAT_SIGNATURE = "stat_signature"  # the one digest older versions kept: dropped when seen
SPLIT_FOLDERS = 64  # from this many folders the walk is split between two processes
# Paths re-stamped (stat changed, content not) since the last pack: their rows in the
# published index carry the old mtime, so schema and pack run and rebuild them.
UNPACKED_RESTAMPS = "unpacked_restamps"
# Set when parse or chunk left unreadable files out of the manifest; while set, parse and
# chunk never count as up to date: the next discover may report the very digest the failing
# run reported, and doit would skip parse for a file never indexed.
RETRY_UNPARSED = "retry_unparsed"
# Past this many changes, pack's plan diffs the whole manifest against the previous index.
DELTA_MAX = 5000


class StoredEntries(Mapping[str, ManifestEntry]):
    """The stored manifest, read on first use (a run that finds nothing moved never reads it)."""

    def __init__(self, state: State, count: int):
        self._state, self._count = state, count
        self._entries: dict[str, ManifestEntry] | None = None

    def _loaded(self) -> dict[str, ManifestEntry]:
        if self._entries is None:
            self._entries = self._state.manifest()
        return self._entries

    def __getitem__(self, path: str) -> ManifestEntry:
        return self._loaded()[path]

    def __iter__(self):
        return iter(self._loaded())

    def __len__(self) -> int:
        return self._count if self._entries is None else len(self._entries)

    def __contains__(self, path: object) -> bool:
        if self._entries is not None:
            return path in self._entries
        return isinstance(path, str) and bool(self._state.manifest_rows([path]))

    def some(self, paths: list[str]) -> dict[str, ManifestEntry]:
        """The entries of these paths, without reading the others' rows."""
        if self._entries is not None:
            return {p: self._entries[p] for p in paths if p in self._entries}
        return self._state.manifest_rows(paths) if paths else {}


def _unmoved(state: State, moved: list[str] | None, walked: tuple[dict, list]) -> Manifest | None:
    """The manifest of a run in which no folder's stat signature moved (no row read), or None."""
    digest = state.get_value(MANIFEST_DIGEST)
    count = len(walked[0])
    if not count or digest is None or moved is None or moved:
        return None
    return Manifest(
        entries=StoredEntries(state, count),
        digest=digest,
        unchanged=count,
        problems=tuple(walked[1]),
        changed_shas=frozenset(),
        delta=_delta(state, [], ()),
    )


def _moved_folders(stored: Any, signatures: dict[str, str]) -> list[str] | None:
    """Folders whose files differ from the stored walk's; None: no usable signatures stored."""
    if not isinstance(stored, dict):
        return None
    moved = [f for f, sig in signatures.items() if stored.get(f) != sig]
    moved += [f for f in stored if f not in signatures]
    return moved


def _delta(state: State, fresh: list[ManifestEntry], removed: tuple[str, ...]) -> Delta | None:
    """The changes since the last pack's manifest (with `UNPACKED_RESTAMPS`); None: too many."""
    from pipeline.plan import Delta

    earlier = state.get_value(UNPACKED_RESTAMPS) or []
    if len(fresh) + len(earlier) + len(removed) > DELTA_MAX:
        return None
    if earlier:
        mine = {e.path for e in fresh}
        fresh = fresh + list(state.manifest_rows([p for p in earlier if p not in mine]).values())
    return Delta(tuple(fresh), removed)


def discover(
    config: Config,
    state: State,
    only: tuple[str, ...] | None = None,
    full: bool = False,
    walked_files: Callable[[int], None] | None = None,
) -> Manifest:
    """Walk the source folders, re-hash what changed, store the new manifest; only the rows
    of folders whose stat signature moved are read. `walked_files`: told the walk's count."""
    from pipeline.walk.discover import discover as walk_and_compare

    # A published index other than the one the last run wrote: nothing is trusted.
    clean = published_is_current(config, state) and state.get_value("clean_run") == build_settings(
        config
    )
    state.set_value("clean_run", None)
    walked = signatures = moved = None
    if not only and not full:
        unmoved, walked, signatures, moved = _walk_by_folders(config, state, walked_files)
        if unmoved is not None:
            return unmoved if clean else replace(unmoved, changed_shas=None, delta=None)
    partial = moved is not None
    old = state.manifest_in_folders(moved) if partial else state.manifest()
    found = walk_and_compare(config, {} if full else old, list(only) if only else None, walked)
    if not found.entries and only is None and not partial:
        _refuse_emptying(config, len(old))
    added, changed, removed = found.added, found.changed, found.removed
    unchanged = found.unchanged
    if full:  # every file was hashed; only a new digest is a change (the report says so)
        removed = sorted(set(old) - set(found.entries))
        kept = [p for p in added if p in old and old[p].sha256 == found.entries[p].sha256]
        changed = [p for p in added if p in old and old[p].sha256 != found.entries[p].sha256]
        added = [p for p in added if p not in old]
        unchanged = len(kept)
        upserts = list(found.entries.values())
    else:
        upserts = [found.entries[p] for p in (*added, *changed, *found.restamped)]
    digest = _manifest_digest(state, old, found, added, changed, removed)
    state.replace_manifest(upserts, removed, digest=digest)
    if signatures is not None and len(found.entries) == len(walked[0]):
        state.set_value(STAT_SIGNATURES, signatures)
    else:
        state.delete_value(STAT_SIGNATURES)
    state.delete_value(STAT_SIGNATURE)
    if (added or changed or removed) and config.shards == 1:
        # Pack reuses the published index's bytes once its checksums are checked: begin now.
        from kernel.index_format import check_soon

        check_soon(config.index_path)
    if found.restamped:
        earlier = state.get_value(UNPACKED_RESTAMPS) or []
        state.set_value(UNPACKED_RESTAMPS, sorted({*earlier, *found.restamped}))
    changed_shas = left_shas = delta = None
    if clean and not full:
        changed_shas = frozenset(found.entries[p].sha256 for p in (*added, *changed))
        left_shas = frozenset(old[p].sha256 for p in (*changed, *removed) if p in old)
        delta = _delta(state, upserts, tuple(removed))
    entries: Mapping[str, ManifestEntry]
    if partial:
        entries = StoredEntries(state, state.manifest_size())
    else:
        entries = MappingProxyType(found.entries)
    return Manifest(
        entries=entries,
        digest=digest,
        added=len(added),
        changed=len(changed),
        removed=len(removed),
        unchanged=unchanged if not partial else len(entries) - len(added) - len(changed),
        hashed=found.hashed,
        problems=tuple(found.errors),
        changed_shas=changed_shas,
        left_shas=left_shas or frozenset(),
        delta=delta,
    )


def _walk_by_folders(config: Config, state: State, walked_files):
    """(the unmoved run's Manifest or None, the walk, the folders' signatures, the moved
    folders or None for all), so that only the moved folders' manifest rows are read."""
    from pipeline.walk.discover import folder_signatures, updated_digest, walk_folders

    problems: list[Problem] = []
    stored_signatures = state.get_value(STAT_SIGNATURES)
    # Both cores for a big project: docs/benchmarks.md, "A one-file edit at 100k files,
    # session 9 (issue 18 item 3)".
    big = isinstance(stored_signatures, dict) and len(stored_signatures) >= SPLIT_FOLDERS
    stats, folders = walk_folders(config, problems, split=big)
    if walked_files is not None:
        walked_files(len(stats))
    walked = (stats, problems)
    signatures = folder_signatures(stats, folders)
    moved = _moved_folders(stored_signatures, signatures)
    unmoved = _unmoved(state, moved, walked)
    if unmoved is not None:
        return unmoved, walked, signatures, moved
    stored_digest = state.get_value(MANIFEST_DIGEST)
    if (
        moved is None
        or not stats
        or len(moved) > max(8, len(signatures) // 4)  # one query per folder
        or updated_digest(stored_digest, [], []) is None
    ):
        return None, walked, signatures, None  # compare every folder
    return (
        None,
        ({r: stats[r] for f in moved for r in folders.get(f, ())}, problems),
        signatures,
        moved,
    )


def _manifest_digest(state: State, old, found, added, changed, removed) -> str:
    """The digest of (path, sha) of every file: the stored one, updated for what changed."""
    from pipeline.walk.discover import updated_digest

    stored = state.get_value(MANIFEST_DIGEST)
    if not (added or changed or removed):
        digest = stored
    else:
        digest = updated_digest(
            stored,
            [old[p] for p in (*changed, *removed)],
            [found.entries[p] for p in (*added, *changed)],
        )
    return found.digest() if digest is None else digest


def _refuse_emptying(config: Config, known: int) -> None:
    """Configured source folders that match nothing (a typo, an unmounted drive) never replace
    an index that has files; with the default (the root), an empty index is the truth."""
    if config.origin("MDVDB_SOURCE_DIRS") == "the default":
        return
    if not known and config.index_path.is_file():
        from kernel import index_format

        try:
            known = int(index_format.read_meta(config.index_path).get("files") or 0)
        except Exception:  # noqa: BLE001 - a damaged index is not worth keeping
            known = 0
    if known:
        folders = ", ".join(config.source_dirs)
        raise IngestError(
            f"MDVDB_SOURCE_DIRS ({folders}, from {config.origin('MDVDB_SOURCE_DIRS')}) "
            f"matches no Markdown file; the index of {known} files is left as it is "
            f"(delete {config.index_path.name} to start empty)"
        )


# -- parse ----------------------------------------------------------------------------------


def parse(
    config: Config,
    manifest: Manifest,
    state: State,
    progress: Progress = _quiet,
    provider: EmbeddingProvider | None = None,
    helped: bool = False,
) -> Parsed:
    """Frontmatter, heading tree and body of each new file, chunked and, for the local model,
    embedded at once (`pipeline.workers`). Unreadable files leave the manifest (retried)."""
    pending = manifest.pending()
    if pending is None:
        todo = state.file_contents()
    else:
        by_sha = manifest.path_of_sha(pending)
        todo = [(by_sha[s], s) for s in pending]
    chunked = state.chunked(chunk_key(config), [sha for _, sha in todo])
    todo = [(path, sha) for path, sha in todo if sha not in chunked]
    problems: list[Problem] = []
    analysed: list = []
    pool = None
    if config.executor != "local":
        from pipeline.ray_executor import PoolRun

        pool = PoolRun()  # what the actors report, filled as they run
    failed, chunks, embedded = _prepare_files(
        config, state, todo, problems, progress, provider, analysed, pool, helped
    )
    kept = _drop_unparsed(config, manifest, state, failed if pending is not None else None)
    if pool is None:
        from pipeline.workers import processes_for

        workers, started, actors = processes_for(config, len(todo)), 0.0, ()
    else:
        workers, started, actors = pool.actors, pool.start_seconds, tuple(pool.reports)
    digest = digest_of(kept.digest)
    kind = config.executor.partition(":")[0]
    from pipeline.pack.lexical import Handed, Store

    lexical = Handed(Store.join(analysed)) if analysed else None
    analysed.clear()
    from pipeline.memory import release_freed

    release_freed()  # the batches' records, parts and any spilled hold, freed
    return Parsed(
        kept,
        len(todo),
        tuple(problems),
        digest,
        chunks,
        embedded,
        workers,
        kind,
        started,
        lexical,
        actors,
    )


def executor(config: Config):
    """The module that runs the per-file work: `pipeline.workers` or `pipeline.ray_executor`."""
    if config.executor == "local":
        from pipeline import workers

        return workers
    from pipeline import ray_executor

    return ray_executor


def _prepare_files(
    config: Config,
    state: State,
    todo: list[tuple[str, str]],
    problems: list[Problem],
    progress: Progress,
    provider: EmbeddingProvider | None,
    analysed: list | None = None,
    pool: Any = None,
    helped: bool = False,
) -> tuple[list[str], int, int]:
    """Parse, chunk (and embed) (path, sha) pairs into the caches, a transaction per batch;
    returns the paths that failed, the chunks cut and the chunks embedded."""
    from pipeline.embed import model_key
    from pipeline.workers import ExecutorUnavailable, WorkerDied, processes_for

    local = config.executor == "local"
    pooled = local and processes_for(config, len(todo)) > 1
    if config.shards <= 1 and pooled:
        # A first build keeps its records in memory until the hand-over (`State.hold`).
        state.hold()
        if config.clustering_enabled:
            from pipeline.cluster.topics import DocVectors, LabelWords

            state.label_words = LabelWords()  # numbered as the workers' batches come back
            state.doc_vectors = DocVectors()
    spec = executor(config).embed_spec(provider) if provider is not None else None
    model = model_key(provider) if spec is not None and provider is not None else ""
    key = chunk_key(config)
    failed: list[str] = []
    chunks = embedded = 0
    report = (pool,) if pool is not None else ()
    progress("parse", 0, len(todo))
    batches = executor(config).prepare(
        config, todo, spec, lambda done: progress("parse", done, len(todo)), *report
    )
    warm = _warm_cluster_imports(config, len(todo)) if pooled and not helped else None
    try:
        for batch in batches:  # streamed: written as each comes back
            if warm is not None:  # the workers are busy with the next batches by now
                warm()
                warm = None
            failed += _file_problems(batch, problems)
            shas, vectors = _unknown_vectors(state, model, batch.vector_shas, batch.vectors)
            state.put_prepared(key, batch.records, model, shas, vectors, batch.embedded)
            chunks += batch.chunks
            progress("chunks", chunks, 0)
            embedded += len(shas)
            if analysed is not None and batch.lexical is not None:
                analysed.append(batch.lexical)
            if state.label_words is not None:
                for sha, words in batch.label_words:
                    state.label_words.add(sha, words)
            if state.doc_vectors is not None and batch.doc_matrix is not None:
                state.doc_vectors.add(batch.doc_shas, batch.doc_rows, batch.doc_matrix)
    except (WorkerDied, ExecutorUnavailable) as exc:
        raise IngestError(str(exc)) from None
    if embedded and getattr(spec, "cache_dir", None) is not None:
        # The query side's lookup tokenizer, built once per user here, not by the first search.
        from pathlib import Path

        from kernel.providers.local import quick_bpe

        quick_bpe(Path(spec.cache_dir))  # type: ignore[union-attr]
    return failed, chunks, embedded


def _warm_cluster_imports(config: Config, files: int) -> Callable[[], None] | None:
    """Imports scikit-learn for the full clustering after a pooled first build, while its
    workers run; None when no full clustering follows."""
    from pipeline.cluster.topics import NUMPY_BELOW

    least = max(NUMPY_BELOW, config.clustering_rebalance_threshold)
    if not config.clustering_enabled or files < least:
        return None

    def warm() -> None:
        import sklearn.cluster  # noqa: F401
        import sklearn.metrics  # noqa: F401

    return warm


def _unknown_vectors(state: State, model: str, shas: list[bytes], vectors: Any) -> tuple:
    """The vectors of a batch that no cache holds yet (what `chunks_embedded` counts)."""
    import numpy as np

    if not shas:
        return [], np.zeros((0, 0), dtype=np.float32)
    known = state.known_embeddings(model, shas)
    if not known:
        return shas, vectors
    keep = [i for i, sha in enumerate(shas) if sha not in known]
    return [shas[i] for i in keep], vectors[keep]


def _drop_unparsed(
    config: Config, manifest: Manifest, state: State, failed: list[str] | None
) -> Manifest:
    """The manifest without the files that could not be read or parsed (`failed`: this run's,
    when discover's changes are trusted; None: look over the whole manifest)."""
    if failed is None:
        rows = state.manifest_shas().items()
        chunked = state.chunked(chunk_key(config), {sha for _, sha in rows})
        failed = [path for path, sha in rows if sha not in chunked]
    if not failed:
        return manifest
    state.replace_manifest([], failed)
    state.set_value(RETRY_UNPARSED, {"paths": sorted(failed)[:100], "token": os.urandom(8).hex()})
    return manifest.without(failed)


# -- chunk ----------------------------------------------------------------------------------


def chunk(config: Config, manifest: Manifest, state: State, progress: Progress = _quiet) -> Chunked:
    """Re-chunk the files with no chunk record for this chunking, as parse does."""
    from pipeline.workers import batches_of, prepare_batch, spec_of

    key = chunk_key(config)
    pending = manifest.pending()
    todo = state.missing_chunks(key) if pending is None else state.missing_chunks_of(key, pending)
    by_sha = manifest.path_of_sha() if todo else {}
    items = [(by_sha[s], s) for s in sorted(todo) if s in by_sha]
    spec = spec_of(config, None, lexical=False)
    problems: list[Problem] = []
    failed: list[str] = []
    done = 0
    for batch_items in batches_of(items):
        batch = prepare_batch(spec, batch_items)
        failed += _file_problems(batch, problems)
        state.put_chunks(key, batch.records)
        done += len(batch_items)
        progress("chunk", done, len(items))
    manifest = _drop_unparsed(config, manifest, state, failed)
    return Chunked(manifest, len(items), tuple(problems), digest_of(manifest.digest, key))


def _file_problems(batch: Any, problems: list[Problem]) -> list[str]:
    """The problems of a batch's files go to `problems`; returns the paths that failed."""
    failed = []
    for path, _, problem, broken in batch.files:
        if problem:
            problems.append((path, problem))
        if broken:
            failed.append(path)
    return failed


# -- embed ----------------------------------------------------------------------------------


def embed(
    config: Config,
    manifest: Manifest,
    state: State,
    provider: EmbeddingProvider,
    progress: Progress = _quiet,
) -> Embedded:
    """Embed chunk texts with no cached vector, `RECORDS_BATCH` files at a time
    (docs/benchmarks.md, "Ingest memory (issue 37)")."""
    from pipeline.embed import embed_missing, model_key
    from pipeline.memory import release_freed
    from pipeline.state import RECORDS_BATCH

    key, chunks = model_key(provider), chunk_key(config)
    mark = f"{key}|{chunks}"
    todo = state.files_to_embed(mark, manifest.pending())
    parts = [todo[i : i + RECORDS_BATCH] for i in range(0, len(todo), RECORDS_BATCH)]
    # the progress bar's total: one more read of the records, only with several parts
    seen: set[bytes] = set()
    total = None if len(parts) < 2 else sum(_missing(state, chunks, key, p, seen) for p in parts)
    rejected: list[bytes] = []
    found: list[str] = []
    embedded = 0
    for part in parts:
        texts, shas = _texts_to_embed(state, chunks, part)
        found += shas
        before = embedded
        embedded += embed_missing(
            state,
            provider,
            texts,
            config.embedding_batch_size,
            lambda done, count, before=before: progress("embed", before + done, total or count),
            rejected,
        )
        del texts
        release_freed()
    release = getattr(provider, "release_encoder", None)
    if embedded and release is not None:  # the stages after this one do not embed
        release()
        release_freed()
    problems = ()
    if rejected:  # rare: the records of the files are read again for their lines
        problems = _rejected(manifest, state.get_chunks(chunks, found), set(rejected))
    state.mark_embedded(mark, found)
    return Embedded(embedded, problems, digest_of(manifest.digest, chunks, key))


def _missing(state: State, chunks: str, model: str, files: list[str], seen: set[bytes]) -> int:
    """How many chunk texts of `files`, not in `seen` (which gets them), lack a vector."""
    texts, _ = _texts_to_embed(state, chunks, files)
    fresh = [sha for sha in texts if sha not in seen]
    seen.update(fresh)
    return len(fresh) - len(state.known_embeddings(model, fresh))


def _texts_to_embed(state: State, key: str, files: list[str]) -> tuple[dict[bytes, str], list]:
    """Each chunk's embedded text by chunk sha, and the file shas found."""
    texts: dict[bytes, str] = {}
    found: list[str] = []
    for sha, doc in state.get_chunks(key, files).items():
        found.append(sha)
        for c in doc["chunks"]:
            texts[bytes.fromhex(c["sha256"])] = c["embed_text"]
    return texts, found


def _rejected(
    manifest: Manifest, docs: dict[str, Any], rejected: set[bytes]
) -> tuple[Problem, ...]:
    """One line per file with sections the provider gave no usable vector for."""
    paths: dict[str, list[str]] = {}
    for entry in manifest.entries.values():
        paths.setdefault(entry.sha256, []).append(entry.path)
    out: list[Problem] = []
    for sha, doc in docs.items():
        lines = [
            f"{c['start_line']}-{c['end_line']}"
            for c in doc["chunks"]
            if bytes.fromhex(c["sha256"]) in rejected
        ]
        if not lines:
            continue
        for path in paths.get(sha, []):
            out.append(
                (
                    path,
                    f"the embedding provider returned an unusable vector (NaN, infinite or "
                    f"zero) twice for lines {', '.join(lines[:5])}; searched by keywords only",
                )
            )
    return tuple(out)


# -- cluster --------------------------------------------------------------------------------


def cluster(
    config: Config,
    manifest: Manifest,
    state: State,
    provider: EmbeddingProvider,
    full: bool = False,
    helper: Any = None,
) -> Clustered:
    """Topic clusters of documents, kept in the state. `helper`: a `ClusterHelper` fitting a
    full clustering while schema and pack run."""
    from pipeline.cluster import topics as clustering
    from pipeline.embed import model_key

    if not config.clustering_enabled:
        clustering.clear(state)
        return Clustered("disabled", "disabled")
    changes = None
    delta = manifest.delta
    if delta is not None and not full:  # a clean last run: only its changes can differ
        fresh = [(e.path, e.sha256) for e in delta.fresh]
        changes = clustering.changes_of(state, fresh, list(delta.removed), len(manifest.entries))
    result = clustering.run_stage(
        state,
        chunk_key(config),
        model_key(provider),
        provider.dimensions,
        config.clustering_max_clusters,
        config.clustering_rebalance_threshold,
        full=full,
        share=config.clustering_rebalance_share,
        changes=changes,
        helper=helper,
    )
    return Clustered(result.mode, digest_of(manifest.digest, result.digest()))


# -- schema ---------------------------------------------------------------------------------


def schema(config: Config, manifest: Manifest, state: State, provider: EmbeddingProvider) -> Schema:
    """Read the overlay, plan the pack (`pipeline.pack.build.plan`) and infer the schema of
    the files to publish from the plan (`pipeline.pack.schema.update`)."""
    from pipeline.pack import build as packing
    from pipeline.pack import schema as schema_pack
    from pipeline.schema import stage

    overlay = stage(config.root, state)
    problems = ((overlay.path, overlay.error),) if overlay.error else ()
    digest = digest_of(manifest.digest, overlay.digest, overlay.error)
    if config.shards > 1:  # pipeline.pack.sharded infers each shard's schema with its plan
        return Schema("", None, None, problems, digest)
    rows = packing.plan(config.index_path, _pack_sources(config, manifest, state, provider))
    writer = packing.start_writing(config.index_path, rows)
    try:
        update = schema_pack.update(rows, state)
    except BaseException:
        writer.abort()
        raise
    return Schema(manifest.digest, rows, update, problems, digest, writer)


# -- pack -----------------------------------------------------------------------------------


def _pack_sources(
    config: Config, manifest: Manifest, state: State, provider: EmbeddingProvider
) -> PackSources:
    from pipeline.embed import model_key
    from pipeline.pack.build import PackSources

    key, chunks = model_key(provider), chunk_key(config)
    return PackSources(
        entries=manifest.entries.values(),  # pack puts them in path order
        delta=manifest.delta,
        dimensions=provider.dimensions,
        build_key=f"{key}|{chunks}",
        load_documents=lambda shas: state.get_chunks(chunks, shas),
        load_vectors=lambda shas: state.get_embeddings(
            key, shas, provider.dimensions, missing_ok=True, adopt=True
        ),
        state=state,
    )


def pack(
    config: Config,
    manifest: Manifest,
    state: State,
    provider: EmbeddingProvider,
    problems: tuple[Problem, ...],
    schema: Schema | None = None,
    analysed: Any = None,
    looked: Looked | None = None,
    extra_meta: dict | None = None,
) -> Packed:
    """Assemble every table, publish the one index file atomically, then hand what it holds
    over from the caches (`State.hand_over`)."""
    from kernel.fusion_models import fusion_settings
    from kernel.version import __version__
    from pipeline.embed import model_key
    from pipeline.pack.build import publish

    key, chunks = model_key(provider), chunk_key(config)
    digest = digest_of(manifest.digest, chunks, key)
    problems = once_per_path(problems)
    meta = {
        "digest": digest,
        "provider": provider.name,
        "model": provider.model,
        "dimensions": provider.dimensions,
        "fusion": fusion_settings(provider.name, provider.model),
        "config": config.fingerprint(),
        **problems_to_record(config, manifest, problems, looked or Looked()),
        "skipped": _skipped_files(config, manifest, problems),
        "mdvdb_version": __version__,
        **(extra_meta or {}),
    }
    sources = _pack_sources(config, manifest, state, provider)
    if config.shards > 1:
        return _pack_shards(config, manifest, state, sources, meta, digest)
    if schema is not None and schema.manifest_digest != manifest.digest:
        schema.abandon()  # planned for another manifest
        schema = None
    written = publish(
        config.index_path,
        sources,
        meta,
        schema.plan if schema else None,
        schema.update if schema else None,
        analysed,
        ivf_min_rows=config.ivf_min_chunks,
        writer=schema.writer if schema else None,
    )
    damaged = _rebuilt(written.damaged, "index")
    _published(config, manifest, state, digest)
    state.hand_over(chunks, key, keep_vectors=not getattr(provider, "cheap_to_recompute", False))
    stamp_index(config, state)
    return Packed(written.bytes, written.chunks, written.reused_files, damaged, digest)


def _pack_shards(config, manifest, state, sources, meta, digest) -> Packed:
    """`MDVDB_SHARDS` > 1: one pack per shard; the records stay in the state (no hand-over)."""
    from pipeline.pack import sharded as shard_pack

    written = shard_pack.publish(config, sources, meta)
    damaged = _rebuilt(written.damaged, "shard")
    _published(config, manifest, state, digest)
    stamp_index(config, state)
    return Packed(written.bytes, written.chunks, written.reused_files, damaged, digest)


def _rebuilt(paths: Iterable[str], what: str) -> tuple[Problem, ...]:
    message = f"the previous {what} was damaged; rebuilt from the caches"
    return tuple((os.path.basename(path), message) for path in paths)


def _published(config: Config, manifest: Manifest, state: State, digest: str) -> None:
    """What every publish records; chunk records no current file needs go."""
    state.set_value("published_digest", digest)
    state.delete_value(UNPACKED_RESTAMPS)  # the new rows carry every current mtime
    if manifest.changed_shas is None:
        state.prune(chunk_key(config))
    elif manifest.left_shas:
        state.prune(chunk_key(config), manifest.left_shas)


@dataclass(frozen=True)
class Looked:
    """What a run looked at again (`walk`: None for every path, () for none; `overlay`;
    `in_rows`: paths whose problem is a parse error the files table holds)."""

    walk: tuple[str, ...] | None = ()
    overlay: bool = False
    in_rows: frozenset[str] = frozenset()

    def covers(self, path: str) -> bool:
        if path == SCHEMA_OVERLAY_FILE:
            return self.overlay
        if self.walk is None:
            return True
        return any(path == w or path.startswith(f"{w}/") for w in self.walk)


# Problems recorded in the index's meta at most (the files table holds every parse error).
MAX_RECORDED_PROBLEMS = 1000


def problems_to_record(
    config: Config, manifest: Manifest, problems: tuple[Problem, ...], looked: Looked
) -> dict[str, Any]:
    """The meta's `errors`: this run's problems the files table lacks, plus an earlier run's
    this run did not look at again, sorted by path and capped."""
    from kernel.shards import published_meta

    recorded: dict[str, list[str]] = {}
    fresh = [(p, m) for p, m in problems if p not in looked.in_rows]
    try:
        earlier = published_meta(config).get("errors") or []
    except Exception:  # noqa: BLE001 - no previous index, or a damaged one: nothing to carry
        earlier = []
    earlier = [e for e in earlier if isinstance(e, list) and len(e) >= 2 and isinstance(e[0], str)]
    reported = {p for p, _ in problems}
    carried = [e for e in earlier if e[0] not in reported]
    indexed = _entries_of(manifest, [p for p, _ in fresh] + [e[0] for e in carried])
    for path, problem in fresh:
        entry = indexed.get(path)
        recorded[path] = [path, problem] + ([entry.sha256] if entry is not None else [])
    for path, problem, *sha in carried:
        entry = indexed.get(path)
        if path in recorded or (entry is None and looked.covers(path)):
            continue  # looked at again and fine, or reported again
        if entry is not None and sha != [entry.sha256]:
            continue  # an indexed file whose content changed: its rows say what is wrong now
        recorded[path] = [path, problem, *sha]
    every = sorted(recorded.values())
    out: dict[str, Any] = {"errors": every[:MAX_RECORDED_PROBLEMS]}
    if len(every) > MAX_RECORDED_PROBLEMS:
        out["errors_left_out"] = len(every) - MAX_RECORDED_PROBLEMS
    return out


def _entries_of(manifest: Manifest, paths: list[str]) -> dict[str, ManifestEntry]:
    """The manifest entries of these paths."""
    entries = manifest.entries
    if isinstance(entries, StoredEntries):
        return entries.some(paths)
    return {p: entries[p] for p in paths if p in entries}


def once_per_path(problems: tuple[Problem, ...] | list[Problem]) -> tuple[Problem, ...]:
    """The first problem reported for each path."""
    seen: set[str] = set()
    out = []
    for path, problem in problems:
        if path not in seen:
            seen.add(path)
            out.append((path, problem))
    return tuple(out)


def _skipped_files(
    config: Config, manifest: Manifest, problems: tuple[Problem, ...]
) -> dict[str, list[int]]:
    """Reported files left out of the index, with (size, mtime, ctime), so `status` does not
    call them new until they change."""
    from kernel.shards import published_meta

    entries = manifest.entries
    root = config.root
    candidates = [path for path, _ in problems]
    try:
        candidates += list(published_meta(config).get("skipped") or {})
    except Exception:  # noqa: BLE001 - no previous index, or a damaged one: nothing to carry
        pass
    skipped: dict[str, list[int]] = {}
    for path in candidates:
        if path in entries or path in skipped or not isinstance(path, str):
            continue
        try:
            st = os.stat(os.path.join(root, path))
        except (OSError, ValueError):
            continue
        if os.path.isfile(os.path.join(root, path)):
            skipped[path] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return dict(list(skipped.items())[:10000])
