"""`mdvdb ingest`: take the writer lock, run the doit stages, report what changed."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kernel import private
from kernel.config import Config
from kernel.shards import published_file
from pipeline.lock import WriterLock, describe_command
from pipeline.report import IngestReport
from pipeline.stages import RETRY_UNPARSED, IngestError, Progress, build_settings
from pipeline.state import is_damage, stored_wrong
from pipeline.tasks import (
    STAGES,
    TASK_CREATORS,
    IngestRun,
    cpu_seconds,
    doit_config,
    remove_stale_temp_files,
)

if TYPE_CHECKING:
    from kernel.providers.base import EmbeddingProvider

__all__ = ["IngestError", "IngestReport", "ingest_folder", "relative_paths"]


def relative_paths(config: Config, paths: list[str]) -> list[str]:
    """Root-relative POSIX paths; a path outside the project root is refused. Only the folder
    part is resolved: a symlink named by the path is left to the walk's rules."""
    out = []
    for raw in paths:
        path = Path(os.path.abspath(raw))
        absolute = path if path == Path(path.anchor) else path.parent.resolve() / path.name
        try:
            out.append(absolute.relative_to(config.root).as_posix())
        except ValueError:
            raise IngestError(f"{raw}: outside the project root {config.root}") from None
    return out


def ingest_folder(
    config: Config,
    paths: list[str] | None = None,
    full: bool = False,
    progress: Progress | None = None,
    wait: bool = True,
    on_wait: Callable[[str], None] | None = None,
    provider: EmbeddingProvider | None = None,
) -> IngestReport:
    """One ingest under the writer lock: the doit tasks of `pipeline.tasks`, given one
    `IngestRun`. `provider`: an embedder the caller owns (the watcher), never closed here."""
    started, cpu_started = time.perf_counter(), cpu_seconds()
    only = tuple(relative_paths(config, paths)) if paths else None
    if config.executor != "local":
        from pipeline.ray_executor import check
        from pipeline.workers import ExecutorUnavailable

        try:
            check(config)  # a missing extra or an unreachable cluster: one line, nothing written
        except ExecutorUnavailable as exc:
            raise IngestError(str(exc)) from None
    lock = WriterLock(config.state_path, command=describe_command())
    lock.acquire(wait=wait, on_wait=on_wait)
    try:
        refuse_newer(config)
        options = {"only": only, "full": full, "borrowed_provider": provider}
        try:
            report = _ingest(config, options, progress, started, cpu_started)
        except Exception as exc:
            notice = set_aside_damaged_state(config, exc)
            if notice is None:
                raise
            report = _ingest(config, options, progress, started, cpu_started)
            report.errors.insert(0, notice)
        return report
    finally:
        lock.release()


def _ingest(config, options, progress, started, cpu_started) -> IngestReport:
    """One run of the stages or, while an upgrade is under way (`pipeline.upgrade`), the
    static model's index, this run's share of the upgrade, then the configured model's."""
    from pipeline import upgrade

    static = upgrade.static_stage(config)
    if static is None:
        return _run_once(config, options, progress, started, cpu_started)
    quick = {**options, "borrowed_provider": None, "upgrading_to": upgrade.target_of(config)}
    report = _run_once(static, quick, progress, started, cpu_started)
    searchable = time.perf_counter() - started  # the static index is published
    embedder, budget = options["borrowed_provider"], config.upgrade_seconds
    report.upgrade = upgrade.advance(config, embedder, budget, progress)
    report.upgrade["static_seconds"] = round(searchable, 3)
    if report.upgrade["complete"]:
        # every chunk is cached: the stages now build what a direct build would have
        final = _run_once(config, {**options, "full": False}, progress, started, cpu_started)
        report.published, report.index_bytes = True, final.index_bytes
    report.upgrade["published"] = report.upgrade["complete"]
    report.seconds = time.perf_counter() - started
    report.cpu_seconds = cpu_seconds() - cpu_started
    return report


def _run_once(config, options, progress, started, cpu_started) -> IngestReport:
    """The stages of one ingest on one `IngestRun`, under the caller's writer lock."""
    from doit.cmd_base import ModuleTaskLoader

    from pipeline.doit_run import run_stages

    full = options["full"]
    run = IngestRun(config, **options)
    if progress is not None:
        run.progress = progress
    try:
        remove_stale_temp_files(config)
        remove_legacy_caches(config)
        run.state.reclaim()  # pages an older version's tables left (a VACUUM, once)
        doit_db = config.state_path / "doit.sqlite3"
        usable_doit_db(doit_db)
        private.touch(doit_db)  # 0600 (an empty file is an empty SQLite database)
        if full:
            run.state.forget_records()
        # Files an earlier run left out wait for this run's parse (`stages.RETRY_UNPARSED`).
        retry = run.state.get_value(RETRY_UNPARSED)
        loader = ModuleTaskLoader({**TASK_CREATORS, "DOIT_CONFIG": doit_config(config, full)})
        code = run_stages(
            loader, {name: {"run": run} for name in STAGES}, extra_config={"GLOBAL": {}}
        )
        if run.error is not None or code != 0:
            error = run.error or IngestError(
                f"ingest failed (doit exit code {code}); the previous index is intact"
            )
            # What the stages that ran reported goes with the failure: the caller shows it.
            found = IngestReport.of_outputs(run.outputs, run.seconds, 0.0).errors
            try:
                error.problems = found  # type: ignore[union-attr]
            except AttributeError:  # an exception type without a __dict__
                pass
            raise error
        report = IngestReport.of_outputs(run.outputs, run.seconds, time.perf_counter() - started)
        report.stage_cpu_seconds = dict(run.cpu_seconds)
        report.root = str(config.root)
        report.cpu_seconds = cpu_seconds() - cpu_started
        if not report.published and not published_file(config).exists():
            raise IngestError("ingest finished without an index; run `mdvdb ingest --full`")
        # Lets the next run trust discover's change list instead of diffing every cache.
        run.state.set_value("clean_run", build_settings(config))
        if retry is not None and run.state.get_value(RETRY_UNPARSED) == retry:
            run.state.delete_value(RETRY_UNPARSED)  # tried again; none failed this time
        return report
    finally:
        try:
            run.close()
        except Exception as exc:  # closing a damaged database: the error that found it wins
            if not is_damage(exc):
                raise


def refuse_newer(config: Config) -> None:
    """An index (or shard manifest or file) a newer mdvdb wrote is left alone: IngestError."""
    from kernel import index_format, shards

    newer = [(config.index_path, index_format.written_by_newer(config.index_path))]
    try:
        manifest = shards.read_manifest(config.shards_path)
    except shards.ShardsTooNew as exc:
        newer.append((shards.manifest_path(config.shards_path), exc.version))
    except shards.ShardsError:
        manifest = None
    else:
        for name in sorted(manifest.names()) if manifest is not None else ():
            path = config.shards_path / name
            newer.append((path, index_format.written_by_newer(path)))
    for path, version in newer:
        if version is not None:
            raise IngestError(
                f"{path} was written by a newer mdvdb (format {version}); this one will not "
                "replace it: upgrade mdvdb (pip install -U markdown-vdb), or delete it to "
                "rebuild the index with this version"
            )


STATE_DB = "cache.sqlite3"


def set_aside_damaged_state(config: Config, exc: BaseException) -> tuple[str, str] | None:
    """When `exc` says the cache database is damaged (and SQLite's own check agrees), rename
    it and its WAL aside so the next run builds a new one; the report's line, else None."""
    path = config.state_path / STATE_DB
    if not is_damage(exc) or (not stored_wrong(exc) and _passes_check(path)):
        return None
    aside = path.with_name(f"{STATE_DB}.damaged")  # the last one only: a cache can be big
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        except FileNotFoundError:
            pass
    (config.state_path / "doit.sqlite3").unlink(missing_ok=True)  # its "up to date" is stale
    problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    rel = os.path.relpath(aside, config.root) if aside.is_relative_to(config.root) else aside
    return (
        str(rel),
        f"the state cache was damaged ({problem}); set aside under this name and rebuilt "
        "from the files",
    )


def _passes_check(path: Path) -> bool:
    try:
        db = sqlite3.connect(path, timeout=60)
        try:
            return db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False


# What older versions kept in the state folder and this one does not (removed when seen).
LEGACY_STATE_FILES = ("local-*.f32.npy", "local-*-bpe-*.sqlite3", "lexical-cache.npz")


def remove_legacy_caches(config: Config) -> None:
    for pattern in LEGACY_STATE_FILES:
        for path in config.state_path.glob(pattern):
            try:
                path.unlink()
            except OSError:
                pass


def usable_doit_db(path: Path) -> None:
    """doit's DB only records which stages are up to date, so one SQLite cannot open is
    deleted rather than allowed to block every later run."""
    if path.exists() and not _passes_check(path):
        for name in (path.name, f"{path.name}-journal", f"{path.name}-wal", f"{path.name}-shm"):
            (path.parent / name).unlink(missing_ok=True)
