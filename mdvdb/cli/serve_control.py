"""`mdvdb serve --status` and `mdvdb serve --stop` without typer.

Harnesses ask whether a warm process runs, and stop it, around every session; each answer is
a socket ping, so typer's import and setup (with pydantic, ~0.15 s) would be nearly all of
its cost. `fast_main` reads `--status` or `--stop` with `--root` and `--json`
(`mdvdb.cli.plain_args`) and hands back None for anything else (starting a server, `--help`,
a usage error), which the typer command (`agents.serve`) then runs; both call `show_status`
and `stop_server`, so both print the same bytes and exit with the same code.
"""

from __future__ import annotations

import sys
import time

from mdvdb.cli.errors import EXIT_ERROR, EXIT_OK, CliError, load, print_json, user_errors
from mdvdb.cli.status import line

FLAGS = {"--status": "show_status", "--stop": "stop"}


def fast_main(argv: list[str]) -> int | None:
    from mdvdb.cli.plain_args import parse

    args = parse(argv, FLAGS)
    if args is None or len({"show_status", "stop"} & set(args)) != 1:
        return None
    with user_errors():
        folder = load(args.get("root")).state_path
        if args.get("show_status"):
            return show_status(folder, bool(args.get("as_json")))
        stop_server(folder)
    return EXIT_OK


def show_status(folder, as_json: bool) -> int:
    """Whether a warm process serves `folder` (pid, uptime, calls): 0 if one does, else 1."""
    from mdvdb.cli import warm

    running = warm.ping(folder)
    stale = False if running else warm.remove_stale_socket(folder)
    if as_json:
        shown = {k: v for k, v in (running or {}).items() if k != "code"}  # the reply's own
        print_json({"running": running is not None, **shown})
        sys.stdout.flush()
    elif running:
        line(
            f"serving {running['socket']}: pid {running['pid']}, up {running['uptime']:.0f} s, "
            f"{running['requests']} calls, idle timeout {running['idle_timeout']:g} s, "
            f"watching {'on' if running.get('watching') else 'off'}"
        )
    else:
        note = " (removed a stale socket)" if stale else ""
        line(f"not serving {folder / warm.SOCKET_NAME}{note}")
    return EXIT_OK if running else EXIT_ERROR


def stop_server(folder) -> None:
    """Ask the warm process to stop and wait until it has let go of its lock."""
    from mdvdb.cli import warm

    reply = warm.ask(folder, {"op": "stop"})
    if not reply or not reply.get("stopping"):
        stale = warm.remove_stale_socket(folder)
        note = " (removed a stale socket)" if stale else ""
        line(f"mdvdb: not serving {folder / warm.SOCKET_NAME}{note}")
        return
    # It finishes the call in hand and the running ingest, then lets go of its lock.
    deadline = time.monotonic() + 120
    while warm.lock_holder(folder) is not None:
        if time.monotonic() > deadline:
            raise CliError(f"pid {reply['pid']} did not stop within 120 s")
        time.sleep(0.05)
    line(f"mdvdb: stopped the warm process (pid {reply['pid']})")
