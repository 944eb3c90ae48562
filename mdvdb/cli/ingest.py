"""`mdvdb ingest`: index the source folders (only what changed since the last run)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kernel.options import Spec, declared, option
from kernel.terminal import printable
from mdvdb.cli.errors import EXIT_USAGE, CliError, line, load, print_json, user_errors
from mdvdb.cli.parser import Command


@dataclass(frozen=True)
class IngestOptions:
    paths: Sequence[str] = option((), Spec(str, "Only re-check these files.", repeat="many"))
    full: bool = option(False, Spec(bool, "Re-hash, re-parse, re-chunk all.", ("--full",)))
    quiet: bool = option(
        False, Spec(bool, "Print nothing when nothing changed.", ("--quiet", "-q"))
    )
    no_wait: bool = option(
        False, Spec(bool, "Exit 1 at once if another writer runs.", ("--no-wait",))
    )
    if_present: bool = option(
        False,
        Spec(
            bool,
            "For hooks: do nothing (exit 0, silent) unless the folder is set up "
            "(.markdownvdb or an index) and not switched off (.mdvdb-off).",
            ("--if-present",),
        ),
    )
    executor: str | None = option(
        None,
        Spec(
            str,
            "local, ray (a Ray cluster started for the run) or ray:ADDRESS "
            "(MDVDB_EXECUTOR; docs/scale-out.md).",
            ("--executor",),
        ),
    )
    dry_run: bool = option(
        False,
        Spec(
            bool,
            "List what an ingest would add, change and remove; write nothing.",
            ("--dry-run",),
        ),
    )


def run_ingest(
    paths: Sequence[str] = (),
    root: str | None = None,
    full: bool = False,
    quiet: bool = False,
    no_wait: bool = False,
    if_present: bool = False,
    as_json: bool = False,
    executor: str | None = None,
    dry_run: bool = False,
) -> None:
    """Index the source folders (only what changed since the last run) and print the report."""
    with user_errors():
        config = load(root)
        if executor is not None:
            choose_executor(config, executor)
        if if_present and (config.switched_off or not is_set_up(config)):
            return
        if dry_run:
            return dry_run_ingest(config, paths, as_json)
        from pipeline import LockBusy, ingest_folder

        if paths:
            refuse_missing(config, paths)

        def waiting(holder: str) -> None:
            if not quiet:
                line(f"mdvdb: waiting for the index lock held by {holder}", err=True)

        import io
        from contextlib import redirect_stdout

        from mdvdb.cli.progress import IngestProgress

        progress = IngestProgress(sys.stderr.isatty() and not quiet and not as_json)
        # What a library prints to stdout during the run goes nowhere (Ray's driver repeats a
        # dead worker's error there, which our one line reports).
        try:
            with redirect_stdout(io.StringIO()):
                report = ingest_folder(
                    config,
                    paths or None,
                    full=full,
                    progress=progress,
                    wait=not no_wait,
                    on_wait=waiting,
                )
        except LockBusy:
            if if_present:  # a hook: another writer (a watcher) is already bringing it up to date
                return
            raise
        except Exception as exc:  # the problems the run found before it failed, then the error
            if not as_json:
                _warn(getattr(exc, "problems", ()))
            raise
        finally:
            progress.close()
        if as_json:
            print_json(report.to_json())  # the library's report, as `mdvdb.ingest` gives it
            return
        if quiet and report.nothing_changed and not report.errors:
            return
        _warn(report.errors)
        if not _is_cwd(config.root):  # found upward from a subfolder: say which project
            line(printable(f"project root: {config.root}", one_line=True))
        line(
            f"{report.files} files: {report.added} added, {report.changed} changed, "
            f"{report.removed} removed, {report.unchanged} unchanged; "
            f"{report.chunks_embedded} chunks embedded; {report.seconds:.2f} s"
        )
        if report.upgrade is not None:
            line(_upgrade_line(report.upgrade))


def _upgrade_line(up: dict) -> str:
    """The upgrade to a contextual model this run advanced (docs/upgrade.md)."""
    if up["published"]:
        return f"upgrade to {up['model']}: done; its index is published"
    return (
        f"upgrade to {up['model']}: {up['done']} of {up['chunks']} chunks embedded, "
        f"{up['left']} left; searchable meanwhile with the static model (`mdvdb ingest` "
        "again or a running `mdvdb watch` continues)"
    )


def dry_run_ingest(config, paths: Sequence[str], as_json: bool) -> None:
    """`--dry-run`: what an ingest would add, change and remove; nothing written."""
    from pipeline import preview_ingest, relative_paths

    rels = relative_paths(config, list(paths)) if paths else None
    preview = preview_ingest(config, rels)
    # a path not on disk is fine when the index has it (the ingest would remove it)
    missing = [
        raw
        for raw, rel in zip(paths, rels or [], strict=True)
        if not os.path.lexists(raw)
        and not any(r == rel or r.startswith(f"{rel}/") for r in preview.removed)
    ]
    if missing:
        raise CliError(f"ingest: no such file or folder: {', '.join(missing)}")
    if as_json:
        print_json(preview.to_json())
        return
    _warn(preview.errors)
    for word, listed in (
        ("add", preview.added),
        ("change", preview.changed),
        ("remove", preview.removed),
    ):
        for path in listed:
            line(printable(f"{word:<7}{path}", one_line=True))
    line(
        f"dry run: {len(preview.added)} to add, {len(preview.changed)} to change, "
        f"{len(preview.removed)} to remove, {preview.unchanged} unchanged; nothing written"
    )


def _warn(problems) -> None:
    """One line per problem (path: what), the first 20."""
    for path, problem in problems[:20]:
        line(printable(f"warning: {path}: {problem}", one_line=True), err=True)
    if len(problems) > 20:
        line(f"warning: ... and {len(problems) - 20} more problems", err=True)


def _is_cwd(root) -> bool:
    try:
        return os.path.realpath(os.getcwd()) == str(root)
    except OSError:  # the current folder was deleted
        return False


def choose_executor(config, value: str) -> None:
    """`--executor` over MDVDB_EXECUTOR, parsed by the setting's own rule."""
    from kernel.config import SETTINGS_BY_ENV

    try:
        config.executor = SETTINGS_BY_ENV["MDVDB_EXECUTOR"].parse(value)
    except ValueError as exc:
        raise CliError(f"--executor: {exc}", EXIT_USAGE) from None
    config.origins["MDVDB_EXECUTOR"] = "--executor"


def is_set_up(config) -> bool:
    """Someone chose to use mdvdb here: a `.markdownvdb` file, or an index already built."""
    from kernel.dotenv import CONFIG_FILE

    return (config.root / CONFIG_FILE).is_file() or config.index_path.exists()


def refuse_missing(config, paths: list[str]) -> None:
    """A path not on disk is refused unless the index has it (re-checking it removes it)."""
    from pipeline import relative_paths

    gone = [p for p in paths if not os.path.lexists(p)]
    if not gone:
        return
    indexed = None
    if (config.state_path / "cache.sqlite3").exists():
        from pipeline import State, StateDamaged

        try:
            indexed = State(config.state_path)
        except StateDamaged:
            return  # the ingest sets the cache aside, rebuilds it and sees what is gone
    try:
        missing = [
            raw
            for raw, rel in zip(gone, relative_paths(config, gone), strict=True)
            if indexed is None or not indexed.has_path(rel)
        ]
    finally:
        if indexed is not None:
            indexed.close()
    if missing:
        raise CliError(f"ingest: no such file or folder: {', '.join(missing)}")


COMMAND = Command(
    "ingest",
    declared(IngestOptions),
    run_ingest,
    help="Index the source folders (only what changed since the last run).",
)
