"""Files and folders only their owner can read (0600, 0700), never written through a
symlink (docs/security.md, "Exposure to other local users"). Only `os` is imported.
"""

from __future__ import annotations

import os
import stat

from kernel.safe_open import kind_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# A FIFO opened for writing would wait for a reader: with this the open fails instead.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# The one socket a state folder holds: `mdvdb serve`'s (mdvdb/cli/warm.py).
SERVE_SOCKET = "serve.sock"


class UnsafePath(ValueError):
    """A path mdvdb would have to write through a symlink, or one of the wrong kind."""


def make_dir(path: Path | str) -> None:
    """Create `path` (and missing parents) 0700; an existing folder is left as it is."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        make_dir(parent)
    try:
        os.mkdir(path, DIR_MODE)
        os.chmod(path, DIR_MODE)  # mkdir's mode goes through the umask
    except FileExistsError:
        if not os.path.isdir(path):
            raise UnsafePath(f"{path} exists and is not a folder") from None


def state_folder(path: Path | str) -> None:
    """Make the state folder ready for a writer: created 0700, tightened to 0700 when the
    user owns it, and refused when it holds a symlink (mdvdb would write through it)."""
    path = os.fspath(path)
    make_dir(path)
    try:
        info = os.stat(path)
        if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != DIR_MODE:
            os.chmod(path, DIR_MODE)
    except (OSError, AttributeError):
        pass
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_symlink():
                raise UnsafePath(
                    f"{entry.path} is a symlink; mdvdb never writes through one "
                    "(delete it: the state folder holds only caches)"
                )
            if entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False):
                continue
            mode = entry.stat(follow_symlinks=False).st_mode
            if entry.name != SERVE_SOCKET or not stat.S_ISSOCK(mode):
                raise UnsafePath(
                    f"{entry.path} is {kind_of(mode)}, not a regular file; mdvdb never opens "
                    "one (delete it: the state folder holds only caches)"
                )


def _regular_or_refused(fd: int, path: Path | str) -> None:
    """Close `fd` and refuse `path` unless it is a regular file (a FIFO, a device)."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafePath(f"{path} is {kind_of(mode)}, not a regular file; mdvdb never writes one")


def _refusal(path: Path | str, exc: OSError) -> OSError:
    """What an open for writing that failed means: a link or a FIFO is refused (one line)."""
    import errno

    if os.path.islink(path):
        return UnsafePath(f"{path} is a symlink; mdvdb never writes through one")
    if exc.errno == errno.ENXIO:  # a FIFO with no reader, or a socket
        return UnsafePath(f"{path} is not a regular file; mdvdb never writes one")
    return exc


def touch(path: Path | str) -> None:
    """Create an empty 0600 file unless one is there (SQLite then gives its -wal and -shm
    files the same mode); a symlink at `path` is refused, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _NONBLOCK
    try:
        fd = os.open(os.fspath(path), flags, FILE_MODE)
    except OSError as exc:
        raise _refusal(path, exc) from None
    _regular_or_refused(fd, path)
    os.close(fd)


def write_file(path: Path | str, data: bytes, exclusive: bool = False) -> None:
    """Write `data` to a 0600 file, never through a symlink; `exclusive`: fail if it exists."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _NONBLOCK
    flags |= os.O_EXCL if exclusive else 0  # truncated below, once it is known to be a file
    try:
        fd = os.open(os.fspath(path), flags, FILE_MODE)
    except OSError as exc:
        raise _refusal(path, exc) from None
    _regular_or_refused(fd, path)
    try:
        os.ftruncate(fd, 0)
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
