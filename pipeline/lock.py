"""One writer at a time: an exclusive `filelock` on the state folder.

The lock is an OS file lock (flock), so the kernel releases it when its holder dies: a lock
left by a killed process is never stale. A side file names the holder (pid, command, since
when) so a waiting writer can say whom it waits for.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from filelock import FileLock, Timeout


class LockBusy(RuntimeError):
    """Another writer holds the lock and the caller asked not to wait."""


class WriterLock:
    def __init__(self, state_dir: Path, command: str = "ingest"):
        from kernel import private

        private.state_folder(state_dir)  # 0700, and no symlink to write through
        self.path = state_dir / "writer.lock"
        self.info_path = state_dir / "writer.json"
        self.command = command
        self._lock = FileLock(str(self.path), mode=private.FILE_MODE)

    def holder(self) -> str:
        """Who holds the lock, from the side file. A side file naming a dead process is a
        leftover of a killed writer (the kernel freed its lock): the holder is a writer
        that has not written its own yet."""
        try:
            info = json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            return "another mdvdb process"
        if not isinstance(info, dict) or not _alive(info.get("pid")):
            return "another mdvdb process"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
        return f"pid {info.get('pid')} ({info.get('command')}) since {since}"

    def acquire(self, wait: bool = True, on_wait=None) -> None:
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
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


def describe_command() -> str:
    """`mdvdb ingest --full`, also when run as `python -m mdvdb`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name == "__main__.py":
        name = Path(sys.argv[0]).parent.name
    return " ".join([name, *sys.argv[1:]])[:200]


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
