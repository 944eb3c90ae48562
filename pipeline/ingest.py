"""`mdvdb ingest`: take the writer lock, run the doit stages, report what changed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mdvdb.config import Config
from pipeline import tasks
from pipeline.lock import WriterLock, describe_command


class IngestError(RuntimeError):
    """A stage failed; the previous index is intact."""


def relative_paths(config: Config, paths: list[str]) -> list[str]:
    """Root-relative POSIX paths; a path outside the project root is refused."""
    out = []
    for raw in paths:
        path = Path(raw)
        absolute = (path if path.is_absolute() else Path.cwd() / path).resolve()
        try:
            out.append(absolute.relative_to(config.root).as_posix())
        except ValueError:
            raise IngestError(f"{raw}: outside the project root {config.root}") from None
    return out


def run(
    config: Config,
    paths: list[str] | None = None,
    full: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    wait: bool = True,
    on_wait: Callable[[str], None] | None = None,
) -> tasks.IngestReport:
    from doit.cmd_base import ModuleTaskLoader
    from doit.doit_cmd import DoitMain

    started = time.perf_counter()
    only = relative_paths(config, paths) if paths else None
    lock = WriterLock(config.state_path, command=describe_command())
    lock.acquire(wait=wait, on_wait=on_wait)
    ctx = tasks.RunContext(config=config, only=only, full=full, progress=progress)
    tasks.set_context(ctx)
    try:
        if full:
            with ctx.state.transaction():
                ctx.state.db.execute("DELETE FROM parsed")
                ctx.state.db.execute("DELETE FROM chunks")
        args = [
            "run",
            "--db-file",
            str(config.state_path / "doit.sqlite3"),
            "--backend",
            "sqlite3",
            "--reporter",
            "zero",
        ]
        if full:
            args.append("--always-execute")
        code = DoitMain(ModuleTaskLoader(tasks), extra_config={"GLOBAL": {}}).run(
            [*args, *tasks.STAGES]
        )
        if ctx.error is not None:
            raise ctx.error
        if code != 0:
            raise IngestError(
                f"ingest failed (doit exit code {code}); the previous index is intact"
            )
        if not ctx.report.published and not config.index_path.exists():
            raise IngestError("ingest finished without an index; run `mdvdb ingest --full`")
        # Lets the next run trust discover's change list instead of diffing every cache.
        ctx.state.set_value("clean_run", tasks._build_settings(ctx))
        ctx.report.seconds = time.perf_counter() - started
        return ctx.report
    finally:
        ctx.close()
        tasks.set_context(None)
        lock.release()
