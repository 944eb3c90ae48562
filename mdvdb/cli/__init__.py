"""The `mdvdb` command: a thin typer layer over the `pipeline` and `query` libraries.

Each command group lives in its own module that registers on `app` when imported (or through a
`register(app)` function, for a module that must not import typer itself); this module only
imports them. Commands import heavy libraries inside their bodies, so `mdvdb --help` never pays
for NumPy, Arrow or the model. A query forwarded to a warm `mdvdb serve` process does not even
import typer (see `mdvdb.cli.warm`), and `mdvdb grep`, `mdvdb ingest` and `mdvdb search` parse
their own arguments (`FAST_COMMANDS`), leaving to typer only what they cannot parse.
"""

from __future__ import annotations

import importlib
import sys

# Modules that register commands on `app`, in help order.
COMMAND_MODULES = (
    "mdvdb.cli.core",
    "mdvdb.cli.agents",
    "mdvdb.cli.grep",
    "mdvdb.cli.watch",
    "mdvdb.cli.metadata",
    "mdvdb.cli.clusters",
)
# Commands whose module parses its own arguments with `fast_main(argv)`, because typer's import
# alone would eat most of their time budget. `fast_main` returns the exit code, or None to leave
# `argv` to typer (usage errors and `--help` are worded by typer everywhere).
FAST_COMMANDS = {
    "clusters": "mdvdb.cli.cluster_list",
    "get": "mdvdb.cli.get",
    "grep": "mdvdb.cli.grep",
    "ingest": "mdvdb.cli.ingest",
    "mcp": "mdvdb.cli.mcp_stdio",  # over stdio
    "schema": "mdvdb.cli.schema",
    "search": "mdvdb.cli.search",
    "serve": "mdvdb.cli.serve_control",  # --status and --stop only
    "status": "mdvdb.cli.status",
}
# Commands that outlive their caller's pipes: they handle a closed pipe or socket themselves.
LONG_RUNNING = frozenset({"serve", "mcp", "watch"})
DIST_NAME = "markdown-vdb"

__all__ = ["main"]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DIST_NAME)
    except PackageNotFoundError:
        return "unknown"


def quiet_on_closed_pipe(argv: list[str]) -> None:
    """`mdvdb search ... | head -1`: when the reader goes away, end as Unix tools do (the
    default SIGPIPE action: no traceback, no message) instead of Python's BrokenPipeError
    at some write or at the final flush. Python ignores SIGPIPE; this restores the default
    for the short commands only (a server must outlive a client that hangs up)."""
    if argv and argv[0] in LONG_RUNNING:
        return
    import _signal

    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)


# A process that runs one short command and exits (every command but `LONG_RUNNING` ones, and
# the bare `mdvdb`/`--help`) skips costs that do nothing for it (`lean_start`):
# - compiling the methods `dataclasses` generates and the regular expressions its imports
#   compile: kept per user (`kernel.code_cache`; ~18% and ~5% of a cold search's work);
# - NumPy's docstrings, type hints, ctypes and platform (`kernel.lean_numpy`: ~30% of its
#   import), loaded for real if anything asks for them; `pyarrow.compute` without parsing
#   the docstrings of its options classes (`kernel.lean_arrow`: ~40% of its import);
# - for a read-only command (`READ_ONLY`): the cyclic garbage collector (its imports and
#   first query allocate enough objects for ~45 collections that find ~450 objects; reference
#   counting frees everything else), OpenBLAS's thread per core (no product big enough to use
#   them), and the interpreter's teardown (a last full collection and the unloading of NumPy,
#   tens of ms) once the output is flushed;
# - for the others (an ingest): most of the collector's passes. Its imports alone allocate
#   enough for ~100 young collections that find a few hundred objects; a young generation of
#   `YOUNG_OBJECTS` makes them a handful, and cyclic garbage is still collected (a long
#   ingest allocates far more than that).
# Only from `main`: a warm `mdvdb serve` runs `run_fast` in its own long-lived process, and a
# library user imports as usual.
READ_ONLY = frozenset({"search", "grep", "status", "get", "schema", "clusters"})
CACHE_GROUPS = frozenset({"ingest", "status", "get", "schema", "clusters", "grep", "serve"})
YOUNG_OBJECTS = 20_000  # the collector's first threshold in a short writing command (700)
# Commands whose `fast_main` may read the index without pyarrow (`one_shot`).
ONE_SHOT = frozenset({"search", "status", "get", "schema"})
# Writing commands whose process ends with `os._exit` once the state and the index are
# closed and durable, the lock released and the output flushed: an ingest after a one-file
# edit at 100k files spent ~0.2 s freeing what it built and ~0.2 s in the teardown.
ENDS_AFTER_WRITING = frozenset({"ingest"})


def lean_start(argv: list[str]) -> list:
    """Set up a short command's process (see above); the caches to save at its end."""
    import gc
    import os

    command = argv[0]
    if command not in READ_ONLY:
        gc.set_threshold(max(YOUNG_OBJECTS, gc.get_threshold()[0]), *gc.get_threshold()[1:])
    else:
        gc.disable()
        # OpenBLAS starts a thread per core when NumPy loads (~10-25 ms of a cold start);
        # a user's own setting is kept.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from kernel.code_cache import (
        cache_file,
        regex_cache_file,
        remember_generated_code,
        remember_regex_programs,
    )
    from kernel.lean_arrow import defer_compute_docs
    from kernel.lean_numpy import defer_numpy_extras

    # One pair of cache files per command (a search's stay small); a name from the user's
    # argv is never part of a file name.
    group = "" if command == "search" else command if command in CACHE_GROUPS else "other"
    caches = [
        remember_generated_code(cache_file(group)),
        remember_regex_programs(regex_cache_file(group)),
    ]
    defer_numpy_extras()
    defer_compute_docs()
    return [cache for cache in caches if cache is not None]


def save_caches(caches: list) -> None:
    for cache in caches:
        cache.save()


def run_fast(argv: list[str], one_shot: bool = False) -> int | None:
    """`one_shot` (a `ONE_SHOT` command, from `main`): the process ends after this command,
    so it may skip what only a long-lived process needs (the search reads its index without
    pyarrow); a warm server's calls share its mapped index instead."""
    if argv and argv[0] in FAST_COMMANDS:
        module = importlib.import_module(FAST_COMMANDS[argv[0]])
        if one_shot:
            return module.fast_main(argv[1:], one_shot=True)
        return module.fast_main(argv[1:])
    return None


def nothing_left_running() -> bool:
    """Whether a writing command may end with `os._exit`: every thread but the main one is
    a daemon (which an ordinary exit does not wait for either), no child process is left for
    multiprocessing's exit handler to join, and no Ray session is open for its own."""
    import threading

    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        return False
    if "ray" in sys.modules:
        return False
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is None or not multiprocessing.active_children()


def exit_now(code: int) -> None:
    """End a one-shot command without the interpreter's teardown: flush what it printed, then
    `os._exit`. If a flush fails (a closed pipe...), the ordinary exit reports it as before."""
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def main() -> None:
    argv = sys.argv[1:]
    quiet_on_closed_pipe(argv)
    if argv == ["--version"]:
        sys.stdout.write(f"mdvdb {version()}\n")
        sys.exit(0)
    from mdvdb.cli.warm import forward

    code = forward(argv)
    if code is not None:
        sys.stdout.flush()
        sys.exit(code)
    short = bool(argv) and argv[0] not in LONG_RUNNING and not argv[0].startswith("-")
    caches = lean_start(argv) if short else []
    read_only = short and argv[0] in READ_ONLY
    ends_now = short and argv[0] in ENDS_AFTER_WRITING
    if ends_now:
        import mdvdb.cli.ingest

        mdvdb.cli.ingest.PROCESS_ENDS = True
    try:
        code = run_fast(argv, short and argv[0] in ONE_SHOT)
        if code is None:
            code = run_typer()
    except SystemExit as done:  # a fast command's own exit (`user_errors`...)
        code = exit_code(done)
    save_caches(caches)
    if read_only or (ends_now and nothing_left_running()):
        exit_now(code)
    sys.stdout.flush()
    sys.exit(code)


def run_typer() -> int:
    """The command through typer; its exit code (typer's own `sys.exit`, caught)."""
    from mdvdb.cli.app import app

    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(app)
    try:
        app()
    except SystemExit as done:
        return exit_code(done)
    return 0


def exit_code(done: SystemExit) -> int:
    """The exit code `sys.exit` would give: a message is printed to stderr, code 1."""
    code = done.code
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")
    return 1
