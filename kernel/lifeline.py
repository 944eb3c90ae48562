"""The processes an ingest starts end when the ingest does, however it ends (SIGKILL too)
(docs/architecture.md, "Lifelines").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["GUARD_VARIABLE", "Guard", "die_with_parent", "keep_from_children", "let_go"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# Descriptors no forked child keeps (`keep_from_children`): the process's, not a run's.
_KEPT: set[int] = set()


def keep_from_children(fd: int) -> None:
    """Close `fd` first thing in every child this process forks, until `let_go(fd)`: the
    writer lock's descriptor (`pipeline.lock`), which a child would otherwise share."""
    _KEPT.add(fd)


def let_go(fd: int) -> None:
    _KEPT.discard(fd)


def _close_in_child() -> None:
    for fd in _KEPT:
        try:
            os.close(fd)
        except OSError:
            pass
    _KEPT.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def die_with_parent(parent: int) -> None:
    """Called first in a child forked by `parent` (its pid, read before the fork): the
    child is killed when the parent dies, and ends now if the parent died already."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request above
        os._exit(0)


# The guard's program (argv[1] the mark): wait for the pipe's end of file, then SIGKILL every
# process with the mark in its environment, again while a pass finds one.
_GUARD = """
import os, sys, time
mark = b"\\0" + sys.argv[1].encode() + b"\\0"
sys.stdin.buffer.read()
for _ in range(10):
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if mark in b"\\0" + fh.read():
                    os.kill(int(pid), 9)
                    found += 1
        except OSError:
            pass
    if not found:
        break
    time.sleep(0.2)
"""
GUARD_VARIABLE = "MDVDB_GUARDED_BY"


class Guard:
    """Processes started inside `marking()` (Ray's local cluster) carry a mark in their
    environment; the guard, an exec'd process reading a pipe only this process holds,
    SIGKILLs them all once this process ends, SIGKILL included, or calls `close`. Linux only."""

    def __init__(self) -> None:
        import secrets

        self.mark = f"{GUARD_VARIABLE}={os.getpid()}-{secrets.token_hex(8)}"
        self._pipe: int | None = None
        self._process = None
        if not sys.platform.startswith("linux"):
            return
        import subprocess

        read_end, self._pipe = os.pipe()  # close-on-exec: no other program inherits it
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-S", "-I", "-c", _GUARD, self.mark],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to our process group leaves it be
                cwd="/",
            )
        except OSError:
            os.close(self._pipe)
            self._pipe = None
        finally:
            os.close(read_end)

    @contextmanager
    def marking(self) -> Iterator[None]:
        """Processes started meanwhile (and theirs) carry the mark."""
        name, value = self.mark.split("=", 1)
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before

    def close(self) -> None:
        """Kill what is left of the marked processes, now; again: nothing."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            os.close(pipe)
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a guard that hangs is left to end alone
                pass
            self._process = None
