"""`mdvdb serve`: the warm process (the CLI forwards `search` and `get` to it), its status and
stop; with `--ray`, a sharded index deployed on Ray Serve (mdvdb/serve_ray.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass

from kernel.options import Spec, declared, option
from mdvdb.cli import warm  # imported by every CLI call already
from mdvdb.cli.errors import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    line,
    load,
    print_json,
    user_errors,
)
from mdvdb.cli.parser import Command

# A background server's log is started afresh once it grows past this.
LOG_KEEP_BYTES = 1 << 20


@dataclass(frozen=True)
class ServeOptions:
    idle_timeout: float | None = option(
        None,
        Spec(
            float,
            "Exit after this many idle seconds (default MDVDB_SERVE_IDLE_TIMEOUT, 600).",
            ("--idle-timeout",),
            minimum=0.1,
        ),
    )
    background: bool = option(
        False,
        Spec(
            bool,
            "Start detached and return once it answers; if one already runs, say so and "
            "leave it alone.",
            ("--background",),
        ),
    )
    stop: bool = option(
        False, Spec(bool, "Stop the warm process serving this project.", ("--stop",))
    )
    show_status: bool = option(
        False,
        Spec(bool, "Whether one runs (pid, uptime, calls): exit 0, else 1.", ("--status",)),
    )
    ray: str | None = option(
        None,
        Spec(
            str,
            "Deploy this sharded index on Ray Serve at this Ray address (auto, HOST:PORT, or "
            "local: a Ray started for this process) and serve it until stopped "
            "(docs/scale-out.md).",
            ("--ray",),
            metavar="ADDRESS",
        ),
    )
    listen: str = option(
        "127.0.0.1:8000",
        Spec(str, "HOST:PORT of the HTTP search endpoint with --ray.", ("--listen",)),
    )
    groups: int | None = option(
        None,
        Spec(int, "Shard groups with --ray (default: one per shard).", ("--groups",), minimum=1),
    )
    replicas: int = option(
        1, Spec(int, "Replicas of each shard group with --ray.", ("--replicas",), minimum=1)
    )
    cpus: float = option(
        1.0,
        Spec(
            float, "CPUs each shard-group replica reserves with --ray.", ("--cpus",), minimum=0.01
        ),
    )
    token_file: str | None = option(
        None,
        Spec(
            str,
            "With --ray: the HTTP endpoint's bearer token file (0600). Default: one generated "
            "in the state folder (serve-http.token).",
            ("--token-file",),
        ),
    )


def serve(
    root: str | None,
    as_json: bool,
    idle_timeout: float | None,
    background: bool,
    stop: bool,
    show_status: bool,
    ray: str | None,
    listen: str,
    groups: int | None,
    replicas: int,
    cpus: float,
    token_file: str | None,
) -> int:
    with user_errors():
        if sum((background, stop, show_status)) > 1:
            raise CliError("--background, --stop and --status go alone", EXIT_USAGE)
        config = load(root)
        if ray is not None:
            if background or stop or show_status:
                raise CliError("--ray serves in the foreground, alone", EXIT_USAGE)
            _serve_ray(config, ray, listen, groups, replicas, cpus, token_file)
            return EXIT_OK
        timeout = config.serve_idle_timeout if idle_timeout is None else idle_timeout
        folder = config.state_path
        if show_status:
            return show_running(folder, as_json)
        if stop:
            stop_server(folder)
            return EXIT_OK
        running = warm.ping(folder)
        if running:
            message = f"already serving {running['socket']} (pid {running['pid']})"
            if background:  # idempotent: the one that runs is what was asked for
                line(f"mdvdb: {message}")
                return EXIT_OK
            raise CliError(message)
        if background:
            _start_detached(config.root, timeout, folder)
        else:
            _serve_here(config, folder, timeout)
    return EXIT_OK


COMMAND = Command(
    "serve",
    declared(ServeOptions),
    serve,
    help="Keep the index and model loaded; `mdvdb search`/`get` use it while it runs."
    "\n\nListens on a Unix socket in the state folder (0600, no TCP port), re-indexes changed "
    "files as they change (MDVDB_WATCH=false turns that off) and exits by itself after the "
    "idle timeout. Without it every command works the same, only slower. With --ray it "
    "deploys a sharded index on Ray Serve instead: shard groups with replicas and an HTTP "
    "search endpoint that answers as `mdvdb search --json`.",
)


def _serve_ray(config, address: str, listen: str, groups, replicas, cpus, token_file) -> None:
    """The sharded index on Ray Serve, in the foreground until SIGTERM or Ctrl-C."""
    from kernel import shards as shard_files

    manifest = shard_files.read_manifest(config.shards_path)
    if manifest is None:
        raise CliError(
            f"no sharded index at {config.shards_path}: --ray serves the shard files of "
            "MDVDB_SHARDS >= 2 (run `mdvdb ingest` first)"
        )
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CliError(f"--listen: expected HOST:PORT, got {listen!r}", EXIT_USAGE)
    try:
        from mdvdb import serve_ray
    except ImportError as exc:
        raise CliError(
            f"--ray needs Ray Serve ({exc.name} is missing): pip install 'markdown-vdb[ray]'"
        ) from None
    from mdvdb.mcp_server import http_token

    _, where = http_token(config, token_file, serve_ray.TOKEN_NAME)
    try:
        place = (host.strip("[]"), int(port))
        serve_ray.run(config, address, place, groups, replicas, cpus, where)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CliError(f"--ray {address}: {first}") from None


def _serve_here(config, folder, timeout: float) -> None:
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
        server.run(preload=lambda: _preload(config), started=start_watch)
    except warm.ServeError as exc:
        raise CliError(str(exc)) from None


def _preload(config) -> None:
    """Map the index and load the model before accepting calls, so the first one is warm."""
    from query import open_index

    index = open_index(config=config)
    with suppress(Exception):  # no index yet: the forwarded command reports it as usual
        # Only the local model is worth warming: a remote provider would bill a request at
        # every server start (and fail quietly when it is down).
        if index.snapshot.vectors.shape[0] and config.embedding_provider == "local":
            from query import query_vector

            query_vector(index, "warm up")
            index.warm_up()  # a local encoder's queries: its int8 session, loaded now


def _start_detached(root, timeout: float, folder) -> None:
    from kernel import private

    private.state_folder(folder)  # 0700, and no symlink to write through
    log_path = folder / warm.LOG_NAME
    holder = warm.lock_holder(folder)  # one is starting (loading the model): wait for it
    child = None if holder is not None else _spawn(root, timeout, log_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = warm.ping(folder, timeout=1.0)
        if running:
            ours = child is not None and running["pid"] == child.pid
            line(
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
    with suppress(OSError):
        if log_path.stat().st_size > LOG_KEEP_BYTES:
            log_path.unlink()
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


def show_running(folder, as_json: bool) -> int:
    """Whether a warm process serves `folder` (pid, uptime, calls): 0 if one does, else 1."""
    running = warm.ping(folder)
    absent = None if running else _not_serving(folder)
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
        line(absent)
    return EXIT_OK if running else EXIT_ERROR


def _not_serving(folder) -> str:
    """`not serving SOCKET`, after removing a stale socket file there."""
    note = " (removed a stale socket)" if warm.remove_stale_socket(folder) else ""
    return f"not serving {folder / warm.SOCKET_NAME}{note}"


def stop_server(folder) -> None:
    """Ask the warm process to stop and wait until it has let go of its lock."""
    reply = warm.ask(folder, {"op": "stop"})
    if not reply or not reply.get("stopping"):
        line(f"mdvdb: {_not_serving(folder)}")
        return
    # It finishes the call in hand and the running ingest, then lets go of its lock.
    deadline = time.monotonic() + 120
    while warm.lock_holder(folder) is not None:
        if time.monotonic() > deadline:
            raise CliError(f"pid {reply['pid']} did not stop within 120 s")
        time.sleep(0.05)
    line(f"mdvdb: stopped the warm process (pid {reply['pid']})")
