"""`mdvdb watch`: keep the index current while files change."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass

from kernel.options import Spec, declared, option
from mdvdb.cli.errors import EXIT_OK, line, load, user_errors
from mdvdb.cli.parser import Command


@dataclass(frozen=True)
class WatchOptions:
    debounce_ms: int | None = option(
        None,
        Spec(
            int,
            "Quiet time that closes a batch (MDVDB_WATCH_DEBOUNCE_MS).",
            ("--debounce-ms",),
            minimum=0,
        ),
    )


def watch(root: str | None, debounce_ms: int | None) -> int:
    with user_errors():
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
        line(f"watch: watching {folders} (Ctrl-C to stop)", err=True)
        Watcher(config, stop=stop, debounce_ms=debounce_ms).run()
        line("watch: stopped", err=True)
    return EXIT_OK


COMMAND = Command(
    "watch",
    declared(WatchOptions),
    watch,
    help="Re-index changed files as they change; one log line per batch. Ctrl-C stops "
    "it.\n\nRuns even when MDVDB_WATCH=false: that setting only stops commands that would "
    "start a watcher on their own.",
    json=False,
)
