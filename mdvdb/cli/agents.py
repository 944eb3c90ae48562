"""Commands for agents and their harnesses: `mdvdb serve` (the warm path) and `mdvdb mcp`."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Annotated

import typer

from mdvdb.cli.app import CliError, RootOption, app, load, user_errors


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
        typer.Option("--background", help="Start detached, return once it accepts calls."),
    ] = False,
    root: RootOption = None,
) -> None:
    """Keep the index and model loaded; `mdvdb search`/`get` use it while it runs.

    Listens on a Unix socket in the state folder (0600, no TCP port) and exits by itself
    after the idle timeout. Without it every command works the same, only slower.
    """
    with user_errors():
        config = load(root)
        from mdvdb.cli import warm

        timeout = config.serve_idle_timeout if idle_timeout is None else idle_timeout
        folder = config.state_path
        if warm.is_serving(folder):
            raise CliError(f"a warm process already serves {folder / warm.SOCKET_NAME}")
        if background:
            _start_detached(config.root, timeout, folder)
            return
        try:
            warm.serve(folder, timeout, on_ready=_preload(config))
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
                index.provider().embed(["warm up"])
        except Exception:  # no index yet: the forwarded command reports it as usual
            pass

    return ready


def _start_detached(root, timeout: float, folder) -> None:
    from mdvdb.cli import warm

    argv = [sys.executable, "-m", "mdvdb", "serve", "--root", str(root)]
    argv += ["--idle-timeout", str(timeout)]
    subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if warm.is_serving(folder):
            typer.echo(f"mdvdb: serving {folder / warm.SOCKET_NAME} (idle timeout {timeout:g} s)")
            return
        time.sleep(0.05)
    raise CliError("the warm process did not start within 60 s")


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

        mcp_server.run(config, http_port=http, token_file=token_file)
