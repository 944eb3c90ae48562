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
    """Root-relative POSIX paths; a path outside the project root is refused.

    Only the folder part is resolved: a symlink named by the path stays itself, so the rules
    of the walk (a link escaping the root is reported and skipped) decide about it, not this.
    """
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
    left_for_exit: list[object] | None = None,
) -> IngestReport:
    """One ingest under the writer lock: the doit tasks of `pipeline.tasks`, given one
    `IngestRun` as their parameter. `provider`: an embedder to reuse (a long-lived caller
    such as the watcher loads its model once); it is not closed here. `left_for_exit`: the
    caller ends its process with `os._exit` right after (`mdvdb ingest`) and keeps this list
    until then, so what the run built is put there for the exit to drop instead of being
    freed object by object; the state and the index are closed and durable either way."""
    from doit.cmd_base import ModuleTaskLoader

    from pipeline.doit_run import run_stages

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
    run = IngestRun(
        config, only=only, full=full, borrowed_provider=provider, left_for_exit=left_for_exit
    )
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
        if run.error is not None:
            raise run.error
        if code != 0:
            raise IngestError(
                f"ingest failed (doit exit code {code}); the previous index is intact"
            )
        report = IngestReport.of_outputs(run.outputs, run.seconds, time.perf_counter() - started)
        report.stage_cpu_seconds = dict(run.cpu_seconds)
        report.cpu_seconds = cpu_seconds() - cpu_started
        if not report.published and not published_file(config).exists():
            raise IngestError("ingest finished without an index; run `mdvdb ingest --full`")
        # Lets the next run trust discover's change list instead of diffing every cache.
        run.state.set_value("clean_run", build_settings(config))
        if retry is not None and run.state.get_value(RETRY_UNPARSED) == retry:
            run.state.delete_value(RETRY_UNPARSED)  # tried again; none failed this time
        return report
    finally:
        run.close()
        lock.release()


# What older versions kept in the state folder and this one does not: the model table and the
# query BPE (now once per user, kernel.user_cache) and the lexical analysis cache (the index's
# postings are that cache now).
LEGACY_STATE_FILES = ("local-*.f32.npy", "local-*-bpe-*.sqlite3", "lexical-cache.npz")


def remove_legacy_caches(config: Config) -> None:
    for pattern in LEGACY_STATE_FILES:
        for path in config.state_path.glob(pattern):
            try:
                path.unlink()
            except OSError:
                pass


def usable_doit_db(path: Path) -> None:
    """doit's DB only records which stages are up to date (the caches hold the work), so a
    DB that SQLite cannot open is deleted rather than allowed to block every later run.
    A run killed mid-save leaves a hot journal, which SQLite rolls back by itself here."""
    if not path.exists():
        return
    try:
        db = sqlite3.connect(path, timeout=60)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("quick_check failed")
        finally:
            db.close()
    except sqlite3.DatabaseError:
        for name in (path.name, f"{path.name}-journal", f"{path.name}-wal", f"{path.name}-shm"):
            try:
                (path.parent / name).unlink()
            except FileNotFoundError:
                pass
