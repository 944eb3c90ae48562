"""The `mdvdb` command: a thin layer over the `pipeline` and `query` libraries.

`main` imports the one module the command names (its `COMMAND` declaration), parses its
arguments with `mdvdb.cli.parser` and runs it; typer only prints `--help` (`mdvdb.cli.help`).
"""

from __future__ import annotations

import gc
import importlib
import os
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
# Short commands that only read: one OpenBLAS thread, no cyclic collector (the process ends).
READ_ONLY = frozenset(
    {"search", "get", "links", "backlinks", "orphans", "status", "schema", "clusters", "grep"}
)
# A writing command's young generation is collected after this many allocations, not 700.
YOUNG_OBJECTS = 20_000

__all__ = ["main", "run"]


def quiet_on_closed_pipe(argv: list[str]) -> None:
    """`mdvdb search ... | head -1`: a short command ends silently by SIGPIPE, as Unix tools
    do, when its reader goes away (a server must outlive a client that hangs up)."""
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
        from mdvdb.cli.help import show  # typer: only for help

        return show([command(name) for name in COMMANDS], bare=not argv)
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
            from mdvdb.cli.help import show

            return show([chosen], name)
        return _usage(f"mdvdb {name}", str(problem))
    try:
        return chosen.run(**values) or 0
    except UsageError as problem:  # arguments the declaration cannot judge alone
        return _usage(f"mdvdb {name}", str(problem))
    except SystemExit as done:  # a command's own exit (`user_errors`...)
        return exit_code(done)


def _usage(prog: str, problem: str) -> int:
    sys.stderr.write(f"{prog}: {problem} (see `{prog} --help`)\n")
    return EXIT_USAGE


def main() -> None:
    argv = sys.argv[1:]
    quiet_on_closed_pipe(argv)
    if argv == ["--version"]:
        from kernel.version import __version__

        sys.stdout.write(f"mdvdb {__version__}\n")
        sys.exit(0)
    short = bool(argv) and argv[0] not in LONG_RUNNING
    if short:
        if argv[0] in READ_ONLY:
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
            # One search: no thread pool (set after `forward`, which hands MDVDB_* to a warm
            # server; a user's setting is kept).
            os.environ.setdefault("MDVDB_SEARCH_THREADS", "1")
        code = run(argv)
    sys.stdout.flush()
    if short:
        gc.freeze()  # the exit's last collection leaves what the command built alone
    sys.exit(code)


def exit_code(done: SystemExit) -> int:
    """The exit code `sys.exit` would give: a message is printed to stderr, code 1."""
    code = done.code
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")
    return 1
