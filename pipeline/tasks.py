"""The stages (`pipeline.stages`) as doit tasks, one per stage, chained by digests
(docs/architecture.md, "The pipeline: doit tasks, one per stage"). `mdvdb ingest` hands them
one `IngestRun` as a task parameter; a `dodo.py` of `from pipeline.tasks import *` gets the
same tasks with no run, each action opening its own under the writer lock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from doit import task_params
from doit.tools import config_changed, result_dep

from kernel.config import Config, load_config
from kernel.safe_open import Refused, real_folder, remove_where
from kernel.shards import manifest_path, published_file
from pipeline import stages
from pipeline.state import State

if TYPE_CHECKING:
    from pathlib import Path

    from kernel.providers.base import EmbeddingProvider

STAGES = ("discover", "parse", "chunk", "embed", "cluster", "schema", "pack")


def doit_config(config: Config, full: bool = False) -> dict[str, Any]:
    """doit's settings, written once: `dodo.py` and `mdvdb ingest` both use this."""
    settings: dict[str, Any] = {
        "default_tasks": list(STAGES),
        "backend": "sqlite3",
        "dep_file": str(config.state_path / "doit.sqlite3"),
        "reporter": "zero",
        "verbosity": 0,
    }
    if full:
        settings["always"] = True  # --always-execute
    return settings


@dataclass
class IngestRun:
    """One ingest: its options, the state and provider it opens on first use, and what each
    stage returned (a task parameter, never a module global)."""

    config: Config
    only: tuple[str, ...] | None = None
    full: bool = False
    progress: stages.Progress = stages._quiet
    outputs: dict[str, object] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    # CPU seconds of each stage, this process and the worker processes it waited for.
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    error: BaseException | None = None
    # A provider the caller owns (the watcher loads its model once): used, never closed.
    borrowed_provider: EmbeddingProvider | None = None
    upgrading_to: dict | None = None  # an upgrade's static stage: the model it upgrades to
    # Forked by discover for a big first clustering (`pipeline.cluster_helper`).
    cluster_helper: Any = None
    _state: State | None = None
    _provider: EmbeddingProvider | None = None

    def start_cluster_helper(self, files: int) -> None:
        """Told by discover's walk: a never-clustered folder of `files` files gets its full
        clustering's helper now, while the parent hashes."""
        from pipeline.cluster.keys import STATE_KEY, is_deferred
        from pipeline.cluster_helper import MIN_FILES, ClusterHelper

        config = self.config
        if (
            self.cluster_helper is not None
            or not config.clustering_enabled
            or config.shards > 1
            or config.executor != "local"
            or files < MIN_FILES
        ):
            return
        if self.state.get_value(STATE_KEY) and not is_deferred(self.state):
            return  # clustered before: this run assigns, or rebalances in process
        from pipeline.workers import worker_count

        if worker_count(config) > 1:
            self.cluster_helper = ClusterHelper.start()

    @property
    def state(self) -> State:
        if self._state is None:
            self._state = State(
                self.config.state_path, index_path=self.config.index_path, records=not self.full
            )
        return self._state

    @property
    def provider(self) -> EmbeddingProvider:
        if self._provider is None:
            from kernel.providers import get_provider
            from pipeline.embed import restore_dimensions

            self._provider = self.borrowed_provider or get_provider(self.config)
            restore_dimensions(self.state, self._provider)
        return self._provider

    def manifest(self) -> stages.Manifest:
        """The current files as the latest stage left them (else the stored manifest)."""
        for name in ("chunk", "parse", "discover"):
            output = self.outputs.get(name)
            if output is not None:
                return output if isinstance(output, stages.Manifest) else output.manifest  # type: ignore[attr-defined]
        return stages.Manifest.of_state(self.state)

    def problems(self) -> tuple[stages.Problem, ...]:
        return tuple(p for out in self.outputs.values() for p in getattr(out, "problems", ()))

    def close(self) -> None:
        # The schema stage's plan keeps the previous index mapped, and maybe a temp file.
        schema = self.outputs.get("schema")
        if isinstance(schema, stages.Schema):
            schema.abandon()
        self.outputs.clear()
        if self.cluster_helper is not None:
            self.cluster_helper.close()
            self.cluster_helper = None
        if self._state is not None:
            self._state.clusters_due = None  # a fit nobody waited for (an error) is dropped
            self._state.close()
            self._state = None
        if self._provider is not None and self._provider is not self.borrowed_provider:
            self._provider.close()
        self._provider = None


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the worker processes it reaped."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# -- the adapters: stage output <-> doit ----------------------------------------------------

Body = Callable[[IngestRun], Any]


def _action(run: IngestRun | None, name: str, body: Body) -> Callable[[], dict | bool]:
    """The doit action of a stage: its output is kept on the run, its digest goes to doit;
    an exception reaches `mdvdb ingest` intact."""

    def action() -> dict | bool:
        if run is None:
            return _alone(name, body)
        started, cpu = time.perf_counter(), cpu_seconds()
        run.progress(name, 0, 0)  # the stage begins
        try:
            output = body(run)
        except BaseException as exc:  # noqa: BLE001 - re-raised by pipeline.ingest
            run.error = exc
            return False
        finally:
            run.seconds[name] = time.perf_counter() - started
            run.cpu_seconds[name] = cpu_seconds() - cpu
        run.outputs[name] = output
        return {"digest": output.digest}

    action.__name__ = f"stage_{name}"
    return action


def remove_stale_temp_files(config: Config) -> list[Path]:
    """Delete index temp files a killed writer left behind (safe only under the writer lock).
    Never through a link: the shards folder only when it is a real folder (a cloned repository
    can ship `.markdownvdb.index.shards -> ~`), each name unlinked relative to its folder."""
    from kernel.index_format import TEMP_SUFFIX

    index = config.index_path
    prefix = f".{index.name}."
    folder = index.parent
    removed = [
        folder / name
        for name in remove_where(
            folder, lambda name: name.startswith(prefix) and name.endswith(TEMP_SUFFIX)
        )
    ]
    try:
        sharded = real_folder(config.shards_path)
    except Refused:
        sharded = False  # a link or a file there: not ours to clean (a writer refuses it)
    if sharded:  # a sharded pack's temp files sit beside its shards
        shards = config.shards_path
        removed += [shards / n for n in remove_where(shards, lambda n: n.startswith("."))]
    return removed


def _alone(name: str, body: Body) -> dict:
    """A stage under plain `doit`: a run of its own under the writer lock, after deleting the
    temp files a killed writer left."""
    from pipeline.lock import WriterLock

    config = load_config()
    lock = WriterLock(config.state_path, command=f"doit {name}")
    lock.acquire(wait=True)
    run = None
    try:
        remove_stale_temp_files(config)
        run = IngestRun(config)
        output = run.outputs[name] = body(run)  # `close` aborts the writer schema began
        return {"digest": output.digest}
    finally:
        if run is not None:
            run.close()
        lock.release()


def _discover(run: IngestRun) -> stages.Manifest:
    return stages.discover(run.config, run.state, run.only, run.full, run.start_cluster_helper)


def _parse(run: IngestRun) -> stages.Parsed:
    # The local model embeds as files are parsed (on Ray, every local model); other
    # providers are the embed stage's business.
    from kernel.config import local_model_is_encoder

    config = run.config
    local = config.embedding_provider == "local" and (
        config.executor != "local" or not local_model_is_encoder(config.embedding_model)
    )
    provider = run.provider if local or run.borrowed_provider is not None else None
    helped = run.cluster_helper is not None
    return stages.parse(config, run.manifest(), run.state, run.progress, provider, helped)


def _chunk(run: IngestRun) -> stages.Chunked:
    return stages.chunk(run.config, run.manifest(), run.state, run.progress)


def _embed(run: IngestRun) -> stages.Embedded:
    return stages.embed(run.config, run.manifest(), run.state, run.provider, run.progress)


def _cluster(run: IngestRun) -> stages.Clustered:
    helper = run.cluster_helper
    return stages.cluster(run.config, run.manifest(), run.state, run.provider, run.full, helper)


def _schema(run: IngestRun) -> stages.Schema:
    return stages.schema(run.config, run.manifest(), run.state, run.provider)


def _pack(run: IngestRun) -> stages.Packed:
    schema = run.outputs.get("schema")
    assert schema is None or isinstance(schema, stages.Schema)
    parsed = run.outputs.get("parse")
    analysed = parsed.analysed if isinstance(parsed, stages.Parsed) else None
    manifest = run.manifest()
    return stages.pack(
        run.config,
        manifest,
        run.state,
        run.provider,
        run.problems(),
        schema,
        analysed,
        looked(run, manifest),
        {"upgrading_to": run.upgrading_to} if run.upgrading_to else None,
    )


def looked(run: IngestRun, manifest: stages.Manifest) -> stages.Looked:
    """What this run looked at again (`stages.Looked`)."""
    walk = (run.only if run.only else None) if "discover" in run.outputs else ()
    parsed = [
        path
        for name in ("parse", "chunk")
        for path, _ in getattr(run.outputs.get(name), "problems", ())
    ]
    in_rows = frozenset(p for p in parsed if p in manifest.entries) if parsed else frozenset()
    return stages.Looked(walk, "schema" in run.outputs, in_rows)


def _config(run: IngestRun | None) -> Config:
    return run.config if run is not None else load_config()


def _state_check(run: IngestRun | None, config: Config, test: Callable[[State], bool]):
    """An `uptodate` check of `test` on the run's state (plain `doit`: the folder's)."""

    def check(task: Any, values: dict) -> bool:
        if run is not None:
            return test(run.state)
        with State(config.state_path) as state:
            return test(state)

    return check


def _index_is_current(run: IngestRun | None, config: Config) -> Callable[..., bool]:
    """Up to date only while the published index is the one the last pack wrote."""
    return _state_check(run, config, lambda state: stages.published_is_current(config, state))


def _unset(run: IngestRun | None, config: Config, key: str) -> Callable[..., bool]:
    """Up to date only while the state holds no `key` (`stages.RETRY_UNPARSED`,
    `stages.UNPACKED_RESTAMPS`)."""
    return _state_check(run, config, lambda state: state.get_value(key) is None)


def _problems_recorded(run: IngestRun | None, config: Config) -> Callable[..., bool]:
    """pack is not up to date while the index records other problems than it would now (a
    walk's problem that changed no file still reaches `status`)."""

    def check(task: Any, values: dict) -> bool:
        if run is None:
            return True  # `doit pack` alone: no walk of this run to compare
        from kernel.shards import published_meta

        try:
            meta = published_meta(config)
        except Exception:  # noqa: BLE001 - no index, or an unreadable one: pack decides
            return False
        manifest = run.manifest()
        wanted = stages.problems_to_record(config, manifest, run.problems(), looked(run, manifest))
        return all(meta.get(k) == wanted.get(k) for k in ("errors", "errors_left_out"))

    return check


def _not_deferred(run: IngestRun | None, config: Config) -> Callable[..., bool]:
    """The cluster stage is not up to date while a fit left to the helper was never stored."""
    from pipeline.cluster.keys import is_deferred

    return _state_check(run, config, lambda state: not is_deferred(state))


def _settings(config: Config) -> dict[str, Any]:
    return {
        **config.fingerprint(),
        "clustering": config.clustering_enabled,
        "index": str(config.index_path),
    }


def _chunk_settings(config: Config) -> dict[str, Any]:
    return {"max": config.chunk_max_tokens, "overlap": config.chunk_overlap_tokens}


def _cluster_settings(config: Config) -> dict[str, Any]:
    return {
        **_settings(config),
        "max_clusters": config.clustering_max_clusters,
        "rebalance_threshold": config.clustering_rebalance_threshold,
        "rebalance_share": config.clustering_rebalance_share,
    }


def _pack_settings(config: Config) -> dict[str, Any]:
    """A new index format, analyzer, BM25F parameters or signature rebuilds the index."""
    from kernel.index_format import FORMAT_VERSION
    from pipeline.pack.versions import lexical_meta, near_duplicates_meta

    return {
        **_settings(config),
        "lexical": lexical_meta(),
        "format": FORMAT_VERSION,
        "shards": config.shards,
        "near_duplicates": near_duplicates_meta(),
    }


# -- doit task creators: `run` is a task parameter (`doit.api.run_tasks`) -------------------

# doit swaps sys.stdout and sys.stderr around each action unless told not to: process-wide,
# which in `mdvdb serve` would take a search's answer while the watcher ingests.
UNCAPTURED = {"verbosity": 0, "io": {"capture": False}}

RUN_PARAM = [{"name": "run", "default": None, "help": "the ingest run (API use only)"}]


@task_params(RUN_PARAM)
def task_discover(run: IngestRun | None = None):
    """Walk the source folders, re-hash what changed (stat manifest + SHA-256)."""
    config = _config(run)
    return {
        "actions": [_action(run, "discover", _discover)],
        "uptodate": [False],
        **UNCAPTURED,
        "clean": [lambda: _clean_state(config, run)],
    }


@task_params(RUN_PARAM)
def task_parse(run: IngestRun | None = None):
    """Frontmatter, heading tree and body of each new file content."""
    config = _config(run)
    return {
        "actions": [_action(run, "parse", _parse)],
        "uptodate": [
            result_dep("discover"),
            _index_is_current(run, config),
            _unset(run, config, stages.RETRY_UNPARSED),
        ],
        **UNCAPTURED,
    }


@task_params(RUN_PARAM)
def task_chunk(run: IngestRun | None = None):
    """One chunk per heading section, windows for oversized ones."""
    config = _config(run)
    return {
        "actions": [_action(run, "chunk", _chunk)],
        "uptodate": [
            result_dep("parse"),
            config_changed(_chunk_settings(config)),
            _index_is_current(run, config),
            _unset(run, config, stages.RETRY_UNPARSED),
        ],
        **UNCAPTURED,
    }


@task_params(RUN_PARAM)
def task_embed(run: IngestRun | None = None):
    """Embed chunk texts with no cached vector for the current provider."""
    config = _config(run)
    return {
        "actions": [_action(run, "embed", _embed)],
        "uptodate": [
            result_dep("chunk"),
            config_changed(_settings(config)),
            _index_is_current(run, config),
        ],
        **UNCAPTURED,
    }


@task_params(RUN_PARAM)
def task_cluster(run: IngestRun | None = None):
    """Topic clusters of documents (stored in the index only)."""
    config = _config(run)
    return {
        "actions": [_action(run, "cluster", _cluster)],
        "uptodate": [
            result_dep("embed"),
            config_changed(_cluster_settings(config)),
            _not_deferred(run, config),
        ],
        **UNCAPTURED,
    }


@task_params(RUN_PARAM)
def task_schema(run: IngestRun | None = None):
    """Frontmatter schema of the files to publish, merged with the overlay."""
    from kernel.config import SCHEMA_OVERLAY_FILE
    from pipeline.schema import overlay_digest

    config = _config(run)
    overlay_file = config.root / SCHEMA_OVERLAY_FILE
    # The digest also catches the overlay's removal, which a file_dep cannot name.
    overlay = {"overlay": overlay_digest(config.root)}
    return {
        "actions": [_action(run, "schema", _schema)],
        "file_dep": [str(overlay_file)] if overlay_file.is_file() else [],
        "uptodate": [
            result_dep("embed"),
            config_changed({**_settings(config), **overlay}),
            _index_is_current(run, config),
            _unset(run, config, stages.UNPACKED_RESTAMPS),
        ],
        **UNCAPTURED,
    }


@task_params(RUN_PARAM)
def task_pack(run: IngestRun | None = None):
    """Assemble every table and publish the one index file atomically."""
    config = _config(run)
    return {
        "actions": [_action(run, "pack", _pack)],
        "uptodate": [
            result_dep("embed"),
            result_dep("cluster"),
            result_dep("schema"),
            # One config_changed per task: doit keeps a single saved value for all of them.
            config_changed(
                {**_pack_settings(config), "upgrading_to": run.upgrading_to if run else None}
            ),
            _index_is_current(run, config),
            _unset(run, config, stages.UNPACKED_RESTAMPS),
            _problems_recorded(run, config),
        ],
        "targets": [str(published_file(config))],
        **UNCAPTURED,
        "clean": [lambda: _clean_index(config)],
    }


def _clean_index(config: Config) -> None:
    path = config.index_path
    if path.exists():
        path.unlink()
    manifest = manifest_path(config.shards_path)
    if manifest.exists():
        manifest.unlink()


def _clean_state(config: Config, run: IngestRun | None) -> None:
    if run is not None:
        run.close()
    for name in ("cache.sqlite3", "cache.sqlite3-wal", "cache.sqlite3-shm"):
        target = config.state_path / name
        if target.exists():
            target.unlink()


TASK_CREATORS = {
    "task_discover": task_discover,
    "task_parse": task_parse,
    "task_chunk": task_chunk,
    "task_embed": task_embed,
    "task_cluster": task_cluster,
    "task_schema": task_schema,
    "task_pack": task_pack,
}


def __getattr__(name: str) -> Any:
    """`DOIT_CONFIG` for a `dodo.py` of one line, computed only when a dodo asks (PEP 562);
    makes the state folder so that `doit list` in a fresh clone can open doit's DB."""
    if name != "DOIT_CONFIG":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from kernel import private

    config = load_config()
    private.state_folder(config.state_path)
    settings = doit_config(config)
    private.touch(settings["dep_file"])  # 0600, as `mdvdb ingest` makes it
    return settings


# `DOIT_CONFIG` is served by `__getattr__` above.
__all__ = ["DOIT_CONFIG", "STAGES", "IngestRun", "doit_config", *TASK_CREATORS]  # noqa: F822
