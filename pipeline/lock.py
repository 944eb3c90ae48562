"""One writer at a time: an exclusive OS file lock (flock) on the state folder, released by the
kernel when its holder dies; a side file names the holder (pid, command, since when) so a
waiting writer can say whom it waits for."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kernel import lifeline


class _Busy(Exception):
    """The lock is held and the caller asked not to wait."""


class _Flock:
    """An exclusive `flock` on one file, held through an open descriptor (POSIX), without
    `filelock`'s imports. The descriptor is closed in every forked child
    (`kernel.lifeline.keep_from_children`): a child alive after its parent was SIGKILLed
    would otherwise keep the folder locked for good."""

    def __init__(self, path: str, mode: int):
        self.path, self.mode = path, mode
        self.fd: int | None = None
        self.pid = 0  # the process that holds it

    @property
    def is_locked(self) -> bool:
        return self.fd is not None and self.pid == os.getpid()  # not in a forked child

    def acquire(self, timeout: float = -1) -> None:
        import fcntl

        if self.fd is not None:
            return
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK
        fd = os.open(self.path, flags, self.mode)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if timeout == 0:
                    raise _Busy from None
                fcntl.flock(fd, fcntl.LOCK_EX)  # waits; the kernel frees it if its holder dies
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.pid = fd, os.getpid()
        lifeline.keep_from_children(fd)

    def release(self) -> None:
        import fcntl

        fd, self.fd = self.fd, None
        if fd is None or self.pid != os.getpid():
            return  # a forked child: its copy was closed when it started
        lifeline.let_go(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class _PortableLock:
    """`filelock` where there is no `flock` (Windows), with `_Flock`'s interface."""

    def __init__(self, path: str, mode: int):
        from filelock import FileLock

        self._lock = FileLock(path, mode=mode)

    @property
    def is_locked(self) -> bool:
        return self._lock.is_locked

    def acquire(self, timeout: float = -1) -> None:
        from filelock import Timeout

        try:
            self._lock.acquire(timeout=timeout)
        except Timeout:
            raise _Busy from None

    def release(self) -> None:
        self._lock.release()


def _file_lock(path: str, mode: int) -> _Flock | _PortableLock:
    return _Flock(path, mode) if os.name == "posix" else _PortableLock(path, mode)


class LockBusy(RuntimeError):
    """Another writer holds the lock and the caller asked not to wait."""


class WriterLock:
    def __init__(self, state_dir: Path, command: str = "ingest"):
        from kernel import private

        private.state_folder(state_dir)  # 0700, and no symlink to write through
        self.path = state_dir / "writer.lock"
        self.info_path = state_dir / "writer.json"
        self.command = command
        self._lock = _file_lock(str(self.path), private.FILE_MODE)

    def holder(self) -> str:
        """Who holds the lock, in words (`writer_holder`)."""
        info = writer_holder(self.info_path.parent)
        if info is None:
            return "another mdvdb process"
        return f"pid {info['pid']} ({info['command']}) since {since_text(info['since'])}"

    def acquire(self, wait: bool = True, on_wait=None) -> None:
        try:
            self._lock.acquire(timeout=0)
        except _Busy:
            if not wait:
                raise LockBusy(f"another writer holds the index lock: {self.holder()}") from None
            if on_wait:
                on_wait(self.holder())
            self._lock.acquire()
        from kernel import private

        info = {"pid": os.getpid(), "command": self.command, "since": time.time()}
        private.write_file(self.info_path, json.dumps(info).encode())

    def release(self) -> None:
        if self._lock.is_locked:
            try:
                self.info_path.unlink()
            except FileNotFoundError:
                pass
            self._lock.release()

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def writer_holder(state_dir: Path) -> dict | None:
    """The writer holding the lock of `state_dir`, as its side file names it: pid, command,
    since; None when no live process is named (where /proc/locks lists the locks, a named
    process must hold the lock too: its pid may be another process's by now)."""
    from kernel.safe_open import read_own

    try:  # never through a link, never a FIFO, at most 64 KB
        info = json.loads(read_own(Path(state_dir) / "writer.json", 1 << 16) or b"")
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not _alive(info.get("pid")):
        return None
    if _flock_holders(Path(state_dir) / "writer.lock") not in (None, {info["pid"]}):
        return None
    since = info.get("since")
    return {
        "pid": info["pid"],
        "command": str(info.get("command", "")),
        "since": float(since) if isinstance(since, (int, float)) else None,
    }


def since_text(seconds: float | None) -> str:
    """A lock holder's `since` as people read it (local time)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds or 0))


def describe_command() -> str:
    """`mdvdb ingest --full`, also when run as `python -m mdvdb`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name == "__main__.py":
        name = Path(sys.argv[0]).parent.name
    return " ".join([name, *sys.argv[1:]])[:200]


def _flock_holders(path: Path) -> set[int] | None:
    """The pids /proc/locks names as holding a lock on `path` (waiters' "->" lines left
    out); None where it cannot be read (not Linux)."""
    try:
        inode = f":{os.stat(path).st_ino}"
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    holders = set()
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"
        fields = line.split()
        if "->" not in fields and len(fields) > 5 and fields[5].endswith(inode):
            try:
                holders.add(int(fields[4]))
            except ValueError:
                pass
    return holders


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
