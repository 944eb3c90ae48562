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
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def run_fast(argv: list[str]) -> int | None:
    if argv and argv[0] in FAST_COMMANDS:
        return importlib.import_module(FAST_COMMANDS[argv[0]]).fast_main(argv[1:])
    return None


def main() -> None:
    argv = sys.argv[1:]
    quiet_on_closed_pipe(argv)
    if argv == ["--version"]:
        sys.stdout.write(f"mdvdb {version()}\n")
        sys.exit(0)
    from mdvdb.cli.warm import forward

    code = forward(argv)
    if code is None:
        try:
            code = run_fast(argv)
            if code is None:
                code = run_typer()
        except SystemExit as done:  # a fast command's own exit (`user_errors`...)
            code = exit_code(done)
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
