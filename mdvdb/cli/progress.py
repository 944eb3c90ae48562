"""`mdvdb ingest`'s progress on a terminal: each stage, files and chunks done, rate, ETA (rich).

It draws only when the run reports, never from a thread of its own (a live thread would stop
the ingest from forking its pool: `pipeline.workers.pool_is_safe`); rich is imported only
when the display starts.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["IngestProgress"]

# What each counted event counts (`pipeline.stages.Progress`).
UNITS = {"parse": "files", "chunk": "files", "embed": "chunks", "upgrade": "chunks"}
REDRAW_S = 0.1  # seconds between two redraws
# The display starts at this count, or at any count after this long (an edit never has one).
SHOW_FROM = 200
SHOW_AFTER_S = 1.0


class IngestProgress:
    """A `pipeline.stages.Progress` callback drawing on `stream` (default: `sys.stderr` now,
    before doit replaces it)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._bars: Any = None  # rich.progress.Progress, once something is counted
        self._tasks: dict[str, Any] = {}
        self._open: str | None = None  # the stage without a count running now
        self._since: dict[str, float] = {}  # when each counted line got its first count
        self._parse = (0, 0)  # files parsed, of files
        self._chunks = 0  # chunks cut by the parse so far
        self._last = 0.0
        self._quiet_until = time.monotonic() + SHOW_AFTER_S

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage == "chunks":  # parse's chunks so far: shown on parse's line
            self._chunks = done
            stage, done, total = "parse", self._parse[0], self._parse[1]
        counted = total > 0
        if self._bars is None:
            if not counted or (total < SHOW_FROM and time.monotonic() < self._quiet_until):
                return  # nothing worth a display yet (a one-file edit never gets one)
            self._start()
        if not counted:
            self._begin(stage)
        else:
            self._count(stage, done, total)
        now = time.monotonic()
        if now - self._last >= REDRAW_S or not counted or done >= total > 0:
            self._last = now
            self._bars.refresh()

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.stream, force_terminal=True, highlight=False)
        self._bars = Progress(
            TextColumn("{task.description:>10}"),
            BarColumn(bar_width=28),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[eta]}"),
            TimeElapsedColumn(),
            console=console,
            auto_refresh=False,  # no thread: redrawn by `__call__`
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._bars.start()

    def _task(self, stage: str) -> Any:
        if stage not in self._tasks:
            self._tasks[stage] = self._bars.add_task(stage, total=None, count="", rate="", eta="")
        return self._tasks[stage]

    def _begin(self, stage: str) -> None:
        """A stage without a count began: the ones before it are over."""
        self._finish_open()
        self._task(stage)
        self._open = stage

    def _count(self, stage: str, done: int, total: int) -> None:
        """`done` of `total`, the rate since this stage's first count and the time left."""
        self._finish_open()
        unit = UNITS.get(stage, "")
        now = time.monotonic()
        task = self._task(stage)
        since = self._since.setdefault(stage, now)
        count = f"{done:,}/{total:,} {unit}"
        if stage == "parse":
            self._parse = (done, total)
            count += f", {self._chunks:,} chunks"
        took = now - since
        rate = done / took if done and took > 0.05 else 0.0
        self._bars.update(
            task,
            completed=done,
            total=total,
            count=count,
            rate=f"{rate:,.0f} {unit}/s" if rate else "",
            eta=f"ETA {_clock((total - done) / rate)}" if rate and done < total else "",
        )

    def _finish_open(self) -> None:
        if self._open is not None:
            self._bars.update(self._tasks[self._open], total=1, completed=1)
            self._open = None

    def close(self) -> None:
        """The last state stays on the terminal; nothing when nothing was drawn."""
        if self._bars is not None:
            self._finish_open()
            self._bars.refresh()
            self._bars.stop()
            self._bars = None


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
