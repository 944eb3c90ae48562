"""The `mdvdb` command: a thin layer over the `pipeline` and `query` libraries.

Each command lives in its own module, which declares it (`COMMAND`, a `parser.Command`: its
options and the function that runs it) and imports heavy libraries inside that function, so
a command loads only what it uses. `main` imports the one module the command names, parses
its arguments with `mdvdb.cli.parser` and runs it; `--help` is printed by typer from the same
declarations (`mdvdb.cli.help`). A query forwarded to a warm `mdvdb serve` process does not
even parse here (`mdvdb.cli.warm`).
"""

from __future__ import annotations

import importlib
import sys

from mdvdb.cli.errors import EXIT_USAGE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mdvdb.cli.parser import Command

# command -> the module that declares it (`COMMAND`, or `module:NAME`), in `--help`'s order
COMMANDS = {
    "ingest": "mdvdb.cli.ingest",
    "search": "mdvdb.cli.search",
    "get": "mdvdb.cli.get",
    "links": "mdvdb.cli.links",
    "backlinks": "mdvdb.cli.links:BACKLINKS",
    "orphans": "mdvdb.cli.links:ORPHANS",
    "status": "mdvdb.cli.status",
    "serve": "mdvdb.cli.serve",
    "mcp": "mdvdb.cli.mcp",
    "grep": "mdvdb.cli.grep",
    "watch": "mdvdb.cli.watch",
    "schema": "mdvdb.cli.schema",
    "clusters": "mdvdb.cli.clusters",
    "doctor": "mdvdb.cli.doctor",
    "models": "mdvdb.cli.models",
}
# Commands that outlive their caller's pipes: they handle a closed pipe or socket themselves.
LONG_RUNNING = frozenset({"serve", "mcp", "watch"})
# Short commands that only read: their process needs neither OpenBLAS's thread per core (no
# product here is big enough to use them) nor the cyclic collector (the imports would pay for
# dozens of collections that find almost nothing, and the process ends with the command).
READ_ONLY = frozenset(
    {"search", "get", "links", "backlinks", "orphans", "status", "schema", "clusters", "grep"}
)
# A writing command's imports alone would run the collector's young generation many times for
# a few hundred objects: it starts collecting after this many allocations instead of 700.
YOUNG_OBJECTS = 20_000
DIST_NAME = "markdown-vdb"

__all__ = ["main", "run"]


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
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def command(name: str) -> Command:
    module, _, declared = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), declared or "COMMAND")


def run(argv: list[str]) -> int:
    """`mdvdb ARGV` in this process (the CLI, a warm server's call): its exit code."""
    from mdvdb.cli.parser import UsageError, parse

    if not argv or argv[0] in ("--help", "-h"):
        return show_help([command(name) for name in COMMANDS], bare=not argv)
    name = argv[0]
    if name not in COMMANDS:
        kind = "option:" if name.startswith("-") else "command"
        return _usage("mdvdb", f"no such {kind} {name}")
    chosen = command(name)
    try:
        values = parse(chosen, argv[1:])
    except UsageError as problem:
        before_dashes = argv[: argv.index("--")] if "--" in argv else argv
        if any(flag in before_dashes for flag in chosen.help_flags):
            return show_help([chosen], name)
        return _usage(f"mdvdb {name}", str(problem))
    try:
        return chosen.run(**values) or 0
    except UsageError as problem:  # arguments the declaration cannot judge alone
        return _usage(f"mdvdb {name}", str(problem))
    except SystemExit as done:  # a command's own exit (`user_errors`...)
        return exit_code(done)


def show_help(commands: list[Command], name: str | None = None, bare: bool = False) -> int:
    from mdvdb.cli.help import show  # typer: only for help

    return show(commands, name, bare)


def _usage(prog: str, problem: str) -> int:
    sys.stderr.write(f"{prog}: {problem} (see `{prog} --help`)\n")
    return EXIT_USAGE


def main() -> None:
    argv = sys.argv[1:]
    quiet_on_closed_pipe(argv)
    if argv == ["--version"]:
        sys.stdout.write(f"mdvdb {version()}\n")
        sys.exit(0)
    short = bool(argv) and argv[0] not in LONG_RUNNING
    if short:
        import gc

        if argv[0] in READ_ONLY:
            import os

            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # a user's own setting is kept
            gc.disable()
        else:
            gc.set_threshold(max(YOUNG_OBJECTS, gc.get_threshold()[0]), *gc.get_threshold()[1:])
    from mdvdb.cli import errors
    from mdvdb.cli.warm import forward

    errors.ONE_SHOT = short

    code = forward(argv)
    if code is None:
        if short and argv[0] in READ_ONLY:
            # One search: its products on this thread, no pool to start (a user's setting is
            # kept; set after `forward`, which hands MDVDB_* to a warm server).
            import os

            os.environ.setdefault("MDVDB_SEARCH_THREADS", "1")
        code = run(argv)
    sys.stdout.flush()
    if short:
        import gc

        gc.freeze()  # the exit's last collection leaves what the command built alone
    sys.exit(code)


def exit_code(done: SystemExit) -> int:
    """The exit code `sys.exit` would give: a message is printed to stderr, code 1."""
    code = done.code
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")
    return 1
