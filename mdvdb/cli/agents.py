"""Commands for agents and their harnesses: `mdvdb serve` (the warm path) and `mdvdb mcp`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Annotated

import typer

from mdvdb.cli.app import (
    EXIT_USAGE,
    CliError,
    JsonOption,
    RootOption,
    app,
    load,
    user_errors,
)

# A background server's log is started afresh once it grows past this.
LOG_KEEP_BYTES = 1 << 20


@app.command()
def serve(
    idle_timeout: Annotated[
        float | None,
        typer.Option(
            "--idle-timeout",
            min=0.1,
            help="Exit after this many idle seconds (default MDVDB_SERVE_IDLE_TIMEOUT, 600).",
        ),
    ] = None,
    background: Annotated[
        bool,
        typer.Option(
            "--background",
            help="Start detached and return once it answers; if one already runs, say so "
            "and leave it alone.",
        ),
    ] = False,
    stop: Annotated[
        bool, typer.Option("--stop", help="Stop the warm process serving this project.")
    ] = False,
    show_status: Annotated[
        bool,
        typer.Option("--status", help="Whether one runs (pid, uptime, calls): exit 0, else 1."),
    ] = False,
    shards: Annotated[
        str | None,
        typer.Option(
            "--shards",
            help="Serve these shards of a sharded index (e.g. 0,1 or all) to a router over "
            "TCP (--listen), instead of the warm path (docs/scale-out.md).",
        ),
    ] = None,
    listen: Annotated[
        str,
        typer.Option("--listen", help="HOST:PORT for --shards (port 0: any free one)."),
    ] = "127.0.0.1:0",
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """Keep the index and model loaded; `mdvdb search`/`get` use it while it runs.

    Listens on a Unix socket in the state folder (0600, no TCP port), re-indexes changed
    files as they change (MDVDB_WATCH=false turns that off) and exits by itself after the
    idle timeout. Without it every command works the same, only slower. With
    MDVDB_SHARD_SERVERS set it is a router: the per-shard work goes to those servers.
    """
    with user_errors():
        if sum((background, stop, show_status)) > 1:
            raise CliError("--background, --stop and --status go alone", EXIT_USAGE)
        config = load(root)
        if shards is not None:
            if background or stop or show_status:
                raise CliError("--shards serves in the foreground, alone", EXIT_USAGE)
            return _serve_shards(config, shards, listen)
        from mdvdb.cli import warm

        timeout = config.serve_idle_timeout if idle_timeout is None else idle_timeout
        folder = config.state_path
        if show_status:
            from mdvdb.cli import serve_control

            raise typer.Exit(serve_control.show_status(folder, as_json))
        if stop:
            from mdvdb.cli import serve_control

            return serve_control.stop_server(folder)
        running = warm.ping(folder)
        if running:
            message = f"already serving {running['socket']} (pid {running['pid']})"
            if background:  # idempotent: the one that runs is what was asked for
                typer.echo(f"mdvdb: {message}")
                return
            raise CliError(message)
        if background:
            _start_detached(config.root, timeout, folder)
            return
        _serve_here(config, folder, timeout)


def _serve_shards(config, which: str, listen: str) -> None:
    """A shard server: the per-shard calls of some shards, over TCP, until SIGTERM."""
    import signal

    from kernel import shards as shard_files
    from query import ShardServer

    manifest = shard_files.read_manifest(config.shards_path)
    if manifest is None:
        raise CliError(f"no sharded index at {config.shards_path}: run `mdvdb ingest` first")
    if which.strip() == "all":
        served = list(range(manifest.shards))
    else:
        try:
            served = sorted({int(part) for part in which.split(",") if part.strip()})
        except ValueError:
            raise CliError(f"--shards: expected N,M,... or all: {which!r}", EXIT_USAGE) from None
        outside = [n for n in served if not 0 <= n < manifest.shards]
        if not served or outside:
            raise CliError(
                f"--shards: the index has shards 0-{manifest.shards - 1}, got {which!r}",
                EXIT_USAGE,
            )
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--listen: expected HOST:PORT, got {listen!r}", EXIT_USAGE)
    server = ShardServer(config.shards_path, served, manifest.shards)

    def on_signal(signum, frame) -> None:
        server.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def ready(bound: int) -> None:
        names = ",".join(map(str, served))
        typer.echo(f"serve: shards {names} of {config.root} on {host}:{bound}")
        sys.stdout.flush()

    try:
        server.serve(host.strip("[]"), int(port), ready)
    except OSError as exc:
        raise CliError(f"--listen {listen}: {exc}") from None


def _serve_here(config, folder, timeout: float) -> None:
    import signal

    from mdvdb.cli import warm

    log = sys.stderr  # the watcher's lines; commands run with their own stderr captured
    server = warm.WarmServer(
        folder, timeout, info={"root": str(config.root), "watching": config.watch}
    )

    def on_signal(signum, frame) -> None:
        server.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def line(text: str) -> None:
        log.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        log.flush()

    def start_watch():
        from pipeline import start_background

        line(f"serve: pid {os.getpid()} serving {folder / warm.SOCKET_NAME}")
        watcher = start_background(config, log=line)
        return watcher.stop if watcher else None

    try:
        server.run(preload=_preload(config), started=start_watch)
    except warm.ServeError as exc:
        raise CliError(str(exc)) from None


def _preload(config):
    """Map the index and load the model before accepting calls, so the first one is warm."""

    def ready() -> None:
        from query import open_index

        index = open_index(config=config)
        try:
            # Only the local model is worth warming: a remote provider would bill a request
            # at every server start (and fail quietly when it is down).
            if index.snapshot.vectors.shape[0] and config.embedding_provider == "local":
                from query import query_vector

                query_vector(index, "warm up")
                index.warm_up()  # a local encoder's queries: its int8 session, loaded now
        except Exception:  # no index yet: the forwarded command reports it as usual
            pass

    return ready


def _start_detached(root, timeout: float, folder) -> None:
    from kernel import private
    from mdvdb.cli import warm

    private.state_folder(folder)  # 0700, and no symlink to write through
    log_path = folder / warm.LOG_NAME
    holder = warm.lock_holder(folder)  # one is starting (loading the model): wait for it
    child = None if holder is not None else _spawn(root, timeout, log_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = warm.ping(folder, timeout=1.0)
        if running:
            ours = child is not None and running["pid"] == child.pid
            typer.echo(
                f"mdvdb: {'serving' if ours else 'already serving'} {running['socket']} "
                f"(pid {running['pid']}, idle timeout {running['idle_timeout']:g} s)"
            )
            return
        if child is not None and child.poll() is not None:
            if warm.lock_holder(folder) is None:
                raise CliError(f"the warm process exited: {_last_line(log_path)}")
            child = None  # another start won the race: wait for that one to answer
        time.sleep(0.05)
    raise CliError(f"the warm process did not answer within 120 s (log: {log_path})")


def _spawn(root, timeout: float, log_path) -> subprocess.Popen:
    try:
        if log_path.stat().st_size > LOG_KEEP_BYTES:
            log_path.unlink()
    except OSError:
        pass
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    argv = [sys.executable, "-m", "mdvdb", "serve", "--root", str(root)]
    argv += ["--idle-timeout", str(timeout)]
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log)


def _last_line(path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1].removeprefix("mdvdb: ") if lines else "no log"


@app.command()
def mcp(
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            min=1,
            max=65535,
            help="Serve MCP over HTTP on 127.0.0.1:PORT; requests need the bearer token.",
        ),
    ] = None,
    token_file: Annotated[
        str | None,
        typer.Option(
            "--token-file",
            help="With --http: the bearer token's file (0600). Default: one generated in "
            "the state folder (mcp-http.token), printed at start.",
        ),
    ] = None,
    root: RootOption = None,
) -> None:
    """Serve the index as MCP tools (stdio by default) for agents.

    Tools: search, grep, get_document, schema, clusters, status, ingest. Add to an MCP client as
    the command `mdvdb mcp --root /path/to/notes`.
    """
    with user_errors():
        config = load(root)
        from mdvdb import mcp_server

        mcp_server.serve(config, http_port=http, token_file=token_file)
