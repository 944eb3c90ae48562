"""`mdvdb watch`: keep the index current while files change."""

from __future__ import annotations

from typing import Annotated

import typer

from mdvdb.cli.app import RootOption, app, load, user_errors


@app.command()
def watch(
    debounce_ms: Annotated[
        int | None,
        typer.Option(
            "--debounce-ms", min=0, help="Quiet time that closes a batch (MDVDB_WATCH_DEBOUNCE_MS)."
        ),
    ] = None,
    root: RootOption = None,
) -> None:
    """Re-index changed files as they change; one log line per batch. Ctrl-C stops it.

    Runs even when MDVDB_WATCH=false: that setting only stops commands that would start a
    watcher on their own."""
    with user_errors():
        import signal
        import threading

        config = load(root)
        from pipeline import Watcher

        stop = threading.Event()

        def on_signal(signum, frame) -> None:
            if stop.is_set():  # a second signal: stop now, the ingest cleans up after itself
                raise KeyboardInterrupt
            stop.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        folders = ", ".join(str(p) for p in config.source_paths())
        typer.echo(f"watch: watching {folders} (Ctrl-C to stop)", err=True)
        Watcher(config, stop=stop, debounce_ms=debounce_ms).run()
        typer.echo("watch: stopped", err=True)
