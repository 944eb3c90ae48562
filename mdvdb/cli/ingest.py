"""`mdvdb ingest` without typer: the hook and the editor call it after every save, and a run
that finds nothing to do should cost the walk, not ~0.1 s of typer and pydantic imports.

`fast_main` parses the forms hooks and people use (the flags, `--root DIR` / `--root=DIR`,
paths, `--`) and hands back None for anything else (`--help`, an unknown option, a missing
value), which typer then parses and reports. Both the typer command (`core.ingest`) and this
parser call `run_ingest`, so both print the same bytes.
"""

from __future__ import annotations

import sys
import time

from mdvdb.cli.errors import (
    EXIT_OK,
    EXIT_USAGE,
    JSON_FLAG,
    ROOT_FLAG,
    CliError,
    load,
    print_json,
    user_errors,
)

# flag -> the `run_ingest` argument it sets to True
FLAGS = {
    "--full": "full",
    "--quiet": "quiet",
    "-q": "quiet",
    "--no-wait": "no_wait",
    "--if-present": "if_present",
    JSON_FLAG: "as_json",
}
EXECUTOR_FLAG = "--executor"
# Set by `mdvdb.cli.main` when its process ends after this command (`exit_now`): the run
# leaves what it built for `os._exit` to drop. A library or long-lived caller leaves it False.
PROCESS_ENDS = False
# What the run built, kept until `os._exit` ends the process (`ingest_folder`'s
# `left_for_exit`): dropping it object by object would cost a big folder's edit ~0.2 s.
LEFT_FOR_EXIT: list[object] = []


def parse(argv: list[str]) -> dict | None:
    """`run_ingest`'s arguments, or None when typer should parse `argv`."""
    args: dict = {"paths": [], "root": None, "executor": None}
    rest = iter(argv)
    for token in rest:
        if token == "--":
            args["paths"].extend(rest)
            break
        if token in FLAGS:
            args[FLAGS[token]] = True
        elif token == EXECUTOR_FLAG:
            value = next(rest, None)
            if value is None or args["executor"] is not None:
                return None
            args["executor"] = value
        elif token.startswith(f"{EXECUTOR_FLAG}=") and args["executor"] is None:
            args["executor"] = token.partition("=")[2]
        elif token == ROOT_FLAG:
            value = next(rest, None)
            if value is None or args["root"] is not None:
                return None
            args["root"] = value
        elif token.startswith(f"{ROOT_FLAG}=") and args["root"] is None:
            args["root"] = token.partition("=")[2]
        elif token.startswith("-") and token != "-":
            return None  # --help, an unknown option, a repeated --root: typer's words
        else:
            args["paths"].append(token)
    return args


def fast_main(argv: list[str]) -> int | None:
    args = parse(argv)
    if args is None:
        return None
    run_ingest(**args)
    return EXIT_OK


class Progress:
    """A one-line progress display on a terminal; silent otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.last = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        width = 30
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(f"\r{stage:>8} [{bar}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run_ingest(
    paths: list[str] | None = None,
    root: str | None = None,
    full: bool = False,
    quiet: bool = False,
    no_wait: bool = False,
    if_present: bool = False,
    as_json: bool = False,
    executor: str | None = None,
) -> None:
    """Index the source folders (only what changed since the last run) and print the report."""
    from kernel.terminal import printable

    with user_errors():
        config = load(root)
        if executor is not None:
            choose_executor(config, executor)
        if if_present and (config.switched_off or not is_set_up(config)):
            return
        from pipeline import LockBusy, ingest_folder

        if paths:
            refuse_missing(config, paths)

        def waiting(holder: str) -> None:
            if not quiet:
                _line(f"mdvdb: waiting for the index lock held by {holder}", err=True)

        progress = Progress(sys.stderr.isatty() and not quiet and not as_json)
        held = hold_index(config) if PROCESS_ENDS else None
        try:
            report = ingest_folder(
                config,
                paths or None,
                full=full,
                progress=progress,
                wait=not no_wait,
                on_wait=waiting,
                left_for_exit=LEFT_FOR_EXIT if PROCESS_ENDS else None,
            )
        except LockBusy:
            if if_present:  # a hook: another writer (a watcher) is already bringing it up to date
                return
            raise
        finally:
            if held is not None:
                release_elsewhere(held)
        if as_json:
            print_json(report.to_json())  # the library's report, as `mdvdb.ingest` gives it
            return
        if quiet and report.nothing_changed and not report.errors:
            return
        for path, problem in report.errors[:20]:
            _line(printable(f"warning: {path}: {problem}", one_line=True), err=True)
        if len(report.errors) > 20:
            _line(f"warning: ... and {len(report.errors) - 20} more problems", err=True)
        if not _is_cwd(config.root):  # found upward from a subfolder: say which project
            _line(printable(f"project root: {config.root}", one_line=True))
        _line(
            f"{report.files} files: {report.added} added, {report.changed} changed, "
            f"{report.removed} removed, {report.unchanged} unchanged; "
            f"{report.chunks_embedded} chunks embedded; {report.seconds:.2f} s"
        )


def _is_cwd(root) -> bool:
    import os

    try:
        return os.path.realpath(os.getcwd()) == str(root)
    except OSError:  # the current folder was deleted
        return False


def hold_index(config) -> int | None:
    """A descriptor on the index as it is before the run (POSIX; None without one)."""
    import os

    if os.name != "posix":
        return None
    try:
        return os.open(config.index_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def release_elsewhere(fd: int) -> int | None:
    """Let a helper process drop the last reference to the index this run replaced.

    The publish's rename unlinks the previous file, but this process still maps it, so the
    kernel frees its pages and blocks when this process exits: ~0.2 s for a 516 MB index at
    100k files, added to every edit's wall. A helper holding `fd` (no other descriptor of
    ours: not stdout or stderr, which a hook waits on) takes that over; it reads its stdin,
    the other end of a pipe this process holds, so it ends (and the kernel frees the file)
    as soon as this process has. A file still linked (nothing replaced it) is just closed."""
    import os

    try:
        if os.fstat(fd).st_nlink > 0:
            return None
        import subprocess

        read_end, write_end = os.pipe()
        helper = subprocess.Popen(
            [sys.executable, "-S", "-I", "-c", "import os; os.read(0, 1)"],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            start_new_session=True,
            cwd="/",
        )
        os.close(read_end)
        # `write_end` stays open (inheritable by no one: `os.pipe` is close-on-exec) until
        # this process ends.
        return helper.pid
    except OSError:
        return None
    finally:
        os.close(fd)


def _line(text: str, err: bool = False) -> None:
    """typer.echo's bytes: the text and a newline, flushed."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}\n")
    stream.flush()


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
    """A path that is not on disk is fine when the index has it (re-checking it removes it);
    otherwise it is a typo, which used to pass in silence."""
    import os

    from pipeline import relative_paths

    gone = [p for p in paths if not os.path.lexists(p)]
    if not gone:
        return
    indexed = None
    if (config.state_path / "cache.sqlite3").exists():
        from pipeline import State

        indexed = State(config.state_path)
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
