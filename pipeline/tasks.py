"""The pipeline as doit tasks: one task per stage, chained by returned digests.

One task per *stage*, not per file: doit loads and checks every task on every run, which costs
10.7 s for a no-op at 100k files with a task per file against 0.6 s with a task per stage. Each
stage's action does the per-file work against its own SHA-256-keyed cache (`pipeline.state`),
and returns a digest of what it produced; the next stage depends on that digest through
`result_dep`, so a touched-but-unchanged file stops the chain at `discover`.

The caches, not doit's DB, are the source of truth: doit saves its DB only at the end of a run,
so a killed run just makes the next one re-check stages whose real work is already cached.

`mdvdb ingest` runs these tasks through `pipeline.ingest`, which sets the run context; a
`dodo.py` that does `from pipeline.tasks import *` runs them under plain `doit`, taking its
context from the configuration of the current folder.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doit.tools import config_changed, result_dep

from mdvdb.config import Config, load_config

STAGES = ("discover", "parse", "chunk", "embed", "cluster", "schema", "pack")


@dataclass
class IngestReport:
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    files: int = 0
    chunks: int = 0
    chunks_embedded: int = 0
    parsed: int = 0
    published: bool = False
    index_bytes: int = 0
    seconds: float = 0.0
    errors: list[tuple[str, str]] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    clustering: str = ""  # what the cluster stage did: full, assign, unchanged (or "")
    reused_files: int = 0  # files whose rows pack reused from the previous index

    @property
    def nothing_changed(self) -> bool:
        return not (self.added or self.changed or self.removed or self.published)

    def to_json(self) -> dict[str, Any]:
        """The record `mdvdb ingest --json` prints."""
        return {
            "files": self.files,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "chunks": self.chunks,
            "chunks_embedded": self.chunks_embedded,
            "published": self.published,
            "index_bytes": self.index_bytes,
            "seconds": round(self.seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "errors": [{"path": p, "problem": m} for p, m in self.errors],
        }


@dataclass
class RunContext:
    config: Config
    only: list[str] | None = None
    full: bool = False
    progress: Callable[[str, int, int], None] | None = None
    report: IngestReport = field(default_factory=IngestReport)
    error: BaseException | None = None
    manifest_digest: str | None = None
    # Current files after discover (path -> entry), kept in step with the manifest table.
    entries: dict[str, Any] | None = None
    # Shas discover saw added or changed; when the previous run finished cleanly and the
    # build settings are the same, later stages look only at these instead of diffing the
    # whole manifest against their caches.
    changed_shas: set[str] | None = None
    # Shas of the previous versions of changed and removed files (with changed_shas): the
    # only cache entries a trusted run can orphan.
    left_shas: set[str] = field(default_factory=set)
    _state: Any = None
    _provider: Any = None

    @property
    def state(self):
        if self._state is None:
            from pipeline.state import State

            # `--full` re-parses and re-chunks everything: only vectors come from the index.
            self._state = State(
                self.config.state_path, index_path=self.config.index_path, records=not self.full
            )
        return self._state

    @property
    def provider(self):
        if self._provider is None:
            from mdvdb.providers import get_provider
            from pipeline.embed import restore_dimensions

            self._provider = get_provider(self.config)
            restore_dimensions(self.state, self._provider)
        return self._provider

    def close(self) -> None:
        if self._state is not None:
            self._state.close()
            self._state = None
        if self._provider is not None:
            self._provider.close()
            self._provider = None

    def tick(self, stage: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(stage, done, total)


_CONTEXT: RunContext | None = None


def set_context(context: RunContext | None) -> None:
    global _CONTEXT
    _CONTEXT = context


def context() -> RunContext:
    """The current run; under plain `doit` it is made from the current folder's config, and
    the writer lock is taken for the life of the process."""
    global _CONTEXT
    if _CONTEXT is None:
        from pipeline.lock import WriterLock

        config = load_config()
        lock = WriterLock(config.state_path, command="doit")
        lock.acquire(wait=True)
        import atexit

        atexit.register(lock.release)
        _CONTEXT = RunContext(config=config)
    return _CONTEXT


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()


def _stage(name: str, body: Callable[[RunContext], dict]) -> Callable[[], dict | bool]:
    """Wrap a stage so that its exception reaches `mdvdb ingest` intact (doit would only
    print it) and its time is reported."""

    def action() -> dict | bool:
        ctx = context()
        started = time.perf_counter()
        try:
            return body(ctx)
        except BaseException as exc:  # noqa: BLE001 - re-raised by pipeline.ingest
            ctx.error = exc
            return False
        finally:
            ctx.report.stage_seconds[name] = time.perf_counter() - started

    action.__name__ = f"stage_{name}"
    return action


# -- stage bodies -------------------------------------------------------------------------


def _discover(ctx: RunContext) -> dict:
    from pipeline.discover import discover

    state = ctx.state
    old = state.manifest()
    # The published index is part of the cache: when it is not the one the last run wrote
    # (deleted, replaced), nothing is trusted and every stage re-checks its work.
    current = _published_is_current(ctx)
    clean = current and state.get_value("clean_run") == _build_settings(ctx)
    state.set_value("clean_run", None)
    manifest = {} if ctx.full else old
    found = discover(ctx.config, manifest, ctx.only)
    if not found.entries and ctx.only is None:
        _refuse_emptying(ctx.config, len(old))
    if ctx.full:
        found.removed = sorted(set(old) - set(found.entries))
        found.changed = [p for p in found.added if p in old]
        found.added = [p for p in found.added if p not in old]
    upserts = [found.entries[p] for p in (*found.added, *found.changed)]
    if ctx.full:
        upserts = list(found.entries.values())
    state.replace_manifest(upserts, found.removed)
    report = ctx.report
    report.added, report.changed = len(found.added), len(found.changed)
    report.removed, report.unchanged = len(found.removed), found.unchanged
    report.files = len(found.entries)
    report.errors.extend(found.errors)
    ctx.entries = found.entries
    ctx.manifest_digest = found.digest()
    if clean and not ctx.full:
        ctx.changed_shas = {found.entries[p].sha256 for p in (*found.added, *found.changed)}
        ctx.left_shas = {old[p].sha256 for p in (*found.changed, *found.removed) if p in old}
    return {"digest": ctx.manifest_digest}


def _refuse_emptying(config: Config, known: int) -> None:
    """Source folders that match nothing (a typo in MDVDB_SOURCE_DIRS, an unmounted drive)
    never replace an index that has files: publishing an empty one would look like success.
    Only configured source folders count: with the default (the root itself), an empty folder
    is one whose user deleted every note, and an empty index is the truth."""
    from pipeline.ingest import IngestError

    if config.origin("MDVDB_SOURCE_DIRS") == "the default":
        return
    if not known and config.index_path.is_file():
        from mdvdb import index_format

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


def _build_settings(ctx: RunContext) -> str:
    cfg = ctx.config
    return _digest(cfg.fingerprint(), cfg.clustering_enabled, str(cfg.index_path))


def _current(ctx: RunContext) -> dict[str, Any]:
    if ctx.entries is None:  # a stage run on its own (`doit pack`)
        ctx.entries = ctx.state.manifest()
    return ctx.entries


def _pending(ctx: RunContext, done: set[str] | None) -> list[str] | None:
    """Shas a stage must look at: discover's changes when they can be trusted, else None
    (the stage then diffs the whole manifest against its cache)."""
    if ctx.changed_shas is None:
        return None
    return sorted(ctx.changed_shas - (done or set()))


def _parse(ctx: RunContext) -> dict:
    state = ctx.state
    pending = _pending(ctx, None)
    if pending is None:
        todo = state.missing_parsed()
    else:
        known = set(state.get_parsed_shas(pending))
        by_sha = {e.sha256: e.path for e in _current(ctx).values()}
        todo = [(by_sha[s], s) for s in pending if s not in known]
    # A parse result is only needed to chunk: files already chunked (here, or in the
    # published index) are never parsed again.
    chunked = state.chunked(_chunk_key(ctx.config), [sha for _, sha in todo])
    todo = [(path, sha) for path, sha in todo if sha not in chunked]
    failed = _parse_files(ctx, todo)
    ctx.report.parsed = len(todo)
    _drop_unparsed(ctx, failed if pending is not None else None)
    return {"digest": _digest(_manifest_digest(ctx))}


def _parse_files(ctx: RunContext, todo: list[tuple[str, str]]) -> list[str]:
    """Parse (path, sha) pairs into the cache; returns the paths that failed (reported)."""
    from pipeline.parse import parse_document

    state = ctx.state
    batch: list[tuple[str, dict]] = []
    failed: list[str] = []
    for i, (path, sha) in enumerate(todo, 1):
        try:
            raw = (ctx.config.root / path).read_bytes()
        except OSError as exc:
            ctx.report.errors.append((path, f"cannot read: {exc.strerror or exc}"))
            failed.append(path)
            continue
        if hashlib.sha256(raw).hexdigest() != sha:
            # Changed between discover and parse: the next run picks the new version up.
            ctx.report.errors.append((path, "changed while indexing; indexed at next run"))
            failed.append(path)
            continue
        try:
            doc = parse_document(raw, path)
        except Exception as exc:  # a parser bug must not lose the rest of the run
            ctx.report.errors.append((path, f"cannot parse: {type(exc).__name__}: {exc}"))
            failed.append(path)
            continue
        if doc.error:
            ctx.report.errors.append((path, doc.error))
        batch.append((sha, doc.to_json()))
        if len(batch) >= 500:
            state.put_parsed(batch)
            batch.clear()
        ctx.tick("parse", i, len(todo))
    state.put_parsed(batch)
    return failed


def _drop_unparsed(ctx: RunContext, failed: list[str] | None) -> None:
    """Files that could not be read or parsed leave the manifest (reported, not indexed),
    so they are retried on the next run and never reach pack. `failed`: this run's failures
    when discover's changes are trusted (every other file was parsed by the last clean run);
    None: look for unparsed files over the whole manifest (~0.4 s at 100k files)."""
    state = ctx.state
    if failed is None:
        rows = state.db.execute(
            "SELECT path, sha256 FROM manifest WHERE sha256 NOT IN (SELECT sha256 FROM parsed)"
        ).fetchall()
        chunked = state.chunked(_chunk_key(ctx.config), {sha for _, sha in rows})
        failed = [path for path, sha in rows if sha not in chunked]
    if failed:
        state.replace_manifest([], failed)
        entries = _current(ctx)
        for path in failed:
            entries.pop(path, None)
        ctx.manifest_digest = None


def _manifest_digest(ctx: RunContext) -> str:
    """Digest of (path, sha) of every current file; computed once per run."""
    if ctx.manifest_digest is None:
        h = hashlib.sha256()
        for path, sha in ctx.state.db.execute("SELECT path, sha256 FROM manifest ORDER BY path"):
            h.update(f"{path}\0{sha}\n".encode())
        ctx.manifest_digest = h.hexdigest()
    return ctx.manifest_digest


def _chunk_key(config: Config) -> str:
    from pipeline.chunking import chunking_key

    return chunking_key(config.chunk_max_tokens, config.chunk_overlap_tokens)


def _chunk(ctx: RunContext) -> dict:
    from pipeline.chunking import chunk_document
    from pipeline.parse import ParsedDoc

    state, config = ctx.state, ctx.config
    key = _chunk_key(config)
    pending = _pending(ctx, None)
    todo = state.missing_chunks(key) if pending is None else state.missing_chunks_of(key, pending)
    # Parse results leave the cache once the index holds a file's chunks: a new chunking
    # parses those files again first.
    unparsed = set(todo) - set(state.get_parsed_shas(todo))
    if unparsed:
        by_sha = {e.sha256: e.path for e in _current(ctx).values()}
        again = [(by_sha[s], s) for s in sorted(unparsed) if s in by_sha]
        failed = _parse_files(ctx, again)
        ctx.report.parsed += len(again)
        _drop_unparsed(ctx, failed)  # the chunk loop skips them (no parse result)
    for start in range(0, len(todo), 500):
        part = todo[start : start + 500]
        parsed = state.get_parsed(part)
        out = []
        for sha, data in parsed.items():
            doc = ParsedDoc.from_json(data)
            chunks = chunk_document(doc, config.chunk_max_tokens, config.chunk_overlap_tokens)
            out.append(
                (
                    sha,
                    {
                        "title": doc.title,
                        "metadata": doc.metadata,
                        "error": doc.error,
                        "chunks": [c.to_json() for c in chunks],
                    },
                )
            )
        state.put_chunks(key, out)
        ctx.tick("chunk", min(start + 500, len(todo)), len(todo))
    return {"digest": _digest(_manifest_digest(ctx), key)}


def _embed(ctx: RunContext) -> dict:
    from pipeline.embed import embed_missing, model_key

    state, provider = ctx.state, ctx.provider
    key = model_key(provider)
    mark = f"{key}|{_chunk_key(ctx.config)}"
    # Only files not yet marked complete for this model and chunking: a one-file edit reads
    # one chunk record, not every file's.
    pending = _pending(ctx, None)
    todo = state.files_to_embed(mark, pending)
    docs = state.get_chunks(_chunk_key(ctx.config), todo)
    texts: dict[bytes, str] = {}
    for doc in docs.values():
        for c in doc["chunks"]:
            texts[bytes.fromhex(c["sha256"])] = c["embed_text"]
    rejected: list[bytes] = []
    ctx.report.chunks_embedded = embed_missing(
        state,
        provider,
        texts,
        ctx.config.embedding_batch_size,
        lambda done, total: ctx.tick("embed", done, total),
        rejected,
    )
    if rejected:
        _report_rejected(ctx, docs, set(rejected))
    state.mark_embedded(mark, list(docs))
    return {"digest": _digest(_manifest_digest(ctx), _chunk_key(ctx.config), key)}


def _report_rejected(ctx: RunContext, docs: dict[str, Any], rejected: set[bytes]) -> None:
    """One line per file with sections the provider gave no usable vector for."""
    paths: dict[str, list[str]] = {}
    for entry in _current(ctx).values():
        paths.setdefault(entry.sha256, []).append(entry.path)
    for sha, doc in docs.items():
        lines = [
            f"{c['start_line']}-{c['end_line']}"
            for c in doc["chunks"]
            if bytes.fromhex(c["sha256"]) in rejected
        ]
        if not lines:
            continue
        for path in paths.get(sha, []):
            ctx.report.errors.append(
                (
                    path,
                    f"the embedding provider returned an unusable vector (NaN, infinite or "
                    f"zero) twice for lines {', '.join(lines[:5])}; searched by keywords only",
                )
            )


def once_per_path(errors: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The first problem reported for each path: a file that discover and parse both
    stumble on is one problem to its user."""
    seen: set[str] = set()
    out = []
    for path, problem in errors:
        if path not in seen:
            seen.add(path)
            out.append((path, problem))
    return out


def _skipped_files(ctx: RunContext, errors: list[tuple[str, str]]) -> dict[str, list[int]]:
    """Reported files left out of the index, with their (size, mtime, ctime), so that `status`
    does not call them new until they change; carried over from the previous index for
    files this run did not look at (`mdvdb ingest PATH`, the watcher)."""
    from mdvdb import index_format

    entries = _current(ctx)
    root = ctx.config.root
    candidates = [path for path, _ in errors]
    try:
        candidates += list(index_format.read_meta(ctx.config.index_path).get("skipped") or {})
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


def _cluster(ctx: RunContext) -> dict:
    from pipeline import cluster
    from pipeline.embed import model_key

    config = ctx.config
    if not config.clustering_enabled:
        cluster.clear(ctx.state)
        return {"digest": "disabled"}
    provider = ctx.provider
    result = cluster.run_stage(
        ctx.state,
        _chunk_key(config),
        model_key(provider),
        provider.dimensions,
        config.clustering_max_clusters,
        config.clustering_rebalance_threshold,
        full=ctx.full,
    )
    ctx.report.clustering = result.mode
    return {"digest": _digest(_manifest_digest(ctx), result.digest())}


def _schema(ctx: RunContext) -> dict:
    """Read the schema overlay for pack, which infers the schema from every file's
    frontmatter as it assembles the `files` table (see `pipeline.schema`)."""
    from pipeline.schema import stage

    overlay = stage(ctx.config.root, ctx.state)
    if overlay.error:
        ctx.report.errors.append((overlay.path, overlay.error))
    return {"digest": _digest(overlay.digest, overlay.error)}


def _pack(ctx: RunContext) -> dict:
    from mdvdb.fusion_models import fusion_settings
    from pipeline.embed import model_key
    from pipeline.pack import PackInput, pack

    config, state, provider = ctx.config, ctx.state, ctx.provider
    key, chunk_key = model_key(provider), _chunk_key(config)
    digest = _digest(_manifest_digest(ctx), chunk_key, key)
    entries = list(_current(ctx).values())  # pack puts them in path order
    ctx.report.errors = once_per_path(ctx.report.errors)
    meta = {
        "digest": digest,
        "provider": provider.name,
        "model": provider.model,
        "dimensions": provider.dimensions,
        "fusion": fusion_settings(provider.name, provider.model),
        "config": config.fingerprint(),
        "errors": [list(e) for e in ctx.report.errors][:1000],
        "skipped": _skipped_files(ctx, ctx.report.errors),
        "mdvdb_version": _version(),
    }
    inp = PackInput(
        entries=entries,
        dimensions=provider.dimensions,
        build_key=f"{key}|{chunk_key}",
        load_documents=lambda shas: state.get_chunks(chunk_key, shas),
        load_vectors=lambda shas: state.get_embeddings(
            key, shas, provider.dimensions, missing_ok=True
        ),
        meta=meta,
        state=state,
    )
    ctx.report.index_bytes, ctx.report.chunks = pack(config.index_path, inp)
    for path in inp.damaged:
        ctx.report.errors.append(
            (os.path.basename(path), "the previous index was damaged; rebuilt from the caches")
        )
    ctx.report.reused_files = inp.reused_files
    ctx.report.published = True
    state.set_value("published_digest", digest)
    if ctx.changed_shas is None:
        state.prune(chunk_key)
    elif ctx.left_shas:
        state.prune(chunk_key, ctx.left_shas)
    # What the new index holds leaves the caches (pipeline.state: the index is the cache).
    state.hand_over(chunk_key, key, keep_vectors=not getattr(provider, "cheap_to_recompute", False))
    return {"digest": digest}


def _version() -> str:
    from mdvdb.version import __version__

    return __version__


def _index_is_current(task: Any, values: dict) -> bool:
    """pack is up to date only while the published index is the one it last wrote."""
    return _published_is_current(context())


def _published_is_current(ctx: RunContext) -> bool:
    path: Path = ctx.config.index_path
    if not path.is_file():
        return False
    stamp = ctx.state.get_value("published_stamp")
    try:
        st = os.stat(path)
    except OSError:
        return False
    if stamp != [st.st_size, st.st_mtime_ns]:
        return False
    # The index this run's code can read: since the state keeps only what the index lacks,
    # an index of another format (written by an older mdvdb) cannot stand in for the parse,
    # chunk and embed caches, so those stages must run again.
    try:
        with open(path, "rb") as fh:
            header = fh.read(16)
    except OSError:
        return False
    from mdvdb.index_format import FORMAT_VERSION, MAGIC

    return header[:8] == MAGIC and int.from_bytes(header[8:12], "little") == FORMAT_VERSION


def _stamp_index(ctx: RunContext) -> None:
    st = os.stat(ctx.config.index_path)
    ctx.state.set_value("published_stamp", [st.st_size, st.st_mtime_ns])


def _pack_and_stamp(ctx: RunContext) -> dict:
    result = _pack(ctx)
    _stamp_index(ctx)
    return result


def _settings() -> dict:
    config = context().config
    return {
        **config.fingerprint(),
        "clustering": config.clustering_enabled,
        "index": str(config.index_path),
    }


# -- doit task creators -------------------------------------------------------------------


def task_discover():
    """Walk the source folders, re-hash what changed (stat manifest + SHA-256)."""
    return {
        "actions": [_stage("discover", _discover)],
        "uptodate": [False],
        "verbosity": 0,
        "clean": [_clean_state],
    }


def task_parse():
    """Frontmatter, heading tree and body of each new file content."""
    return {
        "actions": [_stage("parse", _parse)],
        # The published index is part of the cache (pipeline.state): without it, the work
        # it held is redone from here on.
        "uptodate": [result_dep("discover"), _index_is_current],
        "verbosity": 0,
    }


def task_chunk():
    """One chunk per heading section, windows for oversized ones."""
    return {
        "actions": [_stage("chunk", _chunk)],
        "uptodate": [result_dep("parse"), config_changed(_chunk_settings()), _index_is_current],
        "verbosity": 0,
    }


def task_embed():
    """Embed chunk texts with no cached vector for the current provider."""
    return {
        "actions": [_stage("embed", _embed)],
        "uptodate": [result_dep("chunk"), config_changed(_settings()), _index_is_current],
        "verbosity": 0,
    }


def task_cluster():
    """Topic clusters of documents (stored in the index only)."""
    return {
        "actions": [_stage("cluster", _cluster)],
        "uptodate": [result_dep("embed"), config_changed(_cluster_settings())],
        "verbosity": 0,
    }


def task_schema():
    """Frontmatter schema inferred from all files, merged with the overlay."""
    from pipeline.schema import overlay_digest

    overlay = {"overlay": overlay_digest(context().config.root)}
    return {
        "actions": [_stage("schema", _schema)],
        "uptodate": [result_dep("parse"), config_changed({**_settings(), **overlay})],
        "verbosity": 0,
    }


def task_pack():
    """Assemble every table and publish the one index file atomically."""
    return {
        "actions": [_stage("pack", _pack_and_stamp)],
        "uptodate": [
            result_dep("embed"),
            result_dep("cluster"),
            result_dep("schema"),
            # One config_changed per task: doit keeps a single saved value for all of them.
            config_changed(
                {
                    **_settings(),
                    "lexical": _lexical_settings(),
                    "format": _format_version(),
                    "near_duplicates": _duplicate_settings(),
                }
            ),
            _index_is_current,
        ],
        "verbosity": 0,
        "clean": [_clean_index],
    }


def _format_version() -> int:
    """A new index format rebuilds the index on the next plain `mdvdb ingest` (pack cannot
    reuse an index it cannot read, and would otherwise think the old one current)."""
    from mdvdb.index_format import FORMAT_VERSION

    return FORMAT_VERSION


def _duplicate_settings() -> dict:
    """The near-duplicate signature version: a new one recomputes them on the next ingest."""
    from pipeline.duplicates import meta

    return meta()


def _lexical_settings() -> dict:
    """The analyzer version and BM25F parameters: a new mdvdb that analyses text differently
    rebuilds the postings on the next plain `mdvdb ingest`."""
    from pipeline.lexical import lexical_meta

    return lexical_meta()


def _cluster_settings() -> dict:
    config = context().config
    return {
        **_settings(),
        "max_clusters": config.clustering_max_clusters,
        "rebalance_threshold": config.clustering_rebalance_threshold,
    }


def _chunk_settings() -> dict:
    config = context().config
    return {"max": config.chunk_max_tokens, "overlap": config.chunk_overlap_tokens}


def _clean_index() -> None:
    path = context().config.index_path
    if path.exists():
        path.unlink()


def _clean_state() -> None:
    ctx = context()
    ctx.close()
    for name in ("cache.sqlite3", "cache.sqlite3-wal", "cache.sqlite3-shm"):
        target = ctx.config.state_path / name
        if target.exists():
            target.unlink()
