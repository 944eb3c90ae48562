"""Opening what a folder holds: never through a link, never a special file, never
unbounded (docs/security.md, "Round two"). Only `os` is imported (the warm client reads the
config).
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = [
    "MAX_FILE_SETTING",
    "OWN_FILE_LIMIT",
    "Refused",
    "kind_of",
    "open_regular",
    "open_source",
    "read_bounded",
    "read_own",
    "read_problem",
    "read_source",
    "real_folder",
    "remove_where",
    "too_big",
]

# The config, a .gitignore, the overlay: text a person writes, a few KB at most.
OWN_FILE_LIMIT = 1 << 20
MAX_FILE_SETTING = "MDVDB_MAX_FILE_BYTES"  # the limit on a source file (kernel/config.py)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class Refused(OSError):
    """A path mdvdb will not read: a link, a special file, too big, or not the file the walk
    saw. An OSError whose `strerror` is the one-line reason."""

    def __init__(self, reason: str, path: str | os.PathLike | None = None):
        super().__init__(f"{os.fspath(path)}: {reason}" if path is not None else reason)
        self.strerror = reason


def kind_of(mode: int) -> str:
    """What a non-regular file is, for the one line that refuses it."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _opened(path: str, flags: int) -> int:
    try:
        return os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & _NOFOLLOW:
            raise Refused(
                "a symlink; mdvdb does not read its own files through one", path
            ) from None
        if exc.errno == errno.ENXIO:  # a Unix socket, or a FIFO opened otherwise
            raise Refused("a socket, not a regular file", path) from None
        raise


def open_regular(path: str | os.PathLike, follow: bool = False, seen=None) -> int:
    """A read-only descriptor of the regular file at `path` (`O_NONBLOCK`; `O_NOFOLLOW` unless
    `follow`), which must match `seen` (the walk's stat) if given; else Refused."""
    path = os.fspath(path)
    fd = _opened(path, _READ | (0 if follow else _NOFOLLOW))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{kind_of(info.st_mode)}, not a regular file", path)
        ino = getattr(seen, "st_ino", None)
        if ino and (info.st_ino != ino or info.st_dev != seen.st_dev):
            raise Refused("replaced since the walk (not the file it found), skipped", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def too_big(size: int, limit: int, name: str, grew: bool = False) -> Refused:
    """The refusal of a file over `limit` bytes (`name`: the limit, as a user would set it)."""
    if grew:
        return Refused(f"grew past {name} ({limit:,} bytes) while read")
    return Refused(f"{size:,} bytes, over {name} ({limit:,} bytes)")


def read_bounded(fd: int, limit: int, name: str) -> bytes:
    """The whole regular file behind `fd` (closed here), at most `limit` bytes: a bigger one
    (by its size, or grown while read) is Refused (`too_big`, `name` naming the limit)."""
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise too_big(size, limit, name)
        parts, total = [], 0
        piece = min(size, limit) + 1  # one read for a file that did not grow, then EOF
        while part := os.read(fd, piece):
            parts.append(part)
            total += len(part)
            if total > limit:
                raise too_big(total, limit, name, grew=True)
            piece = min(1 << 20, limit + 1 - total)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def read_own(path: str | os.PathLike, limit: int = OWN_FILE_LIMIT) -> bytes | None:
    """One of mdvdb's own small files (config, .gitignore, overlay, manifest): its bytes,
    None when it is not there; Refused when it is a link, not a regular file or too big."""
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return read_bounded(fd, limit, "the limit for this file")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def open_source(path: str, root: str | None, seen=None) -> int:
    """A source file's descriptor (`open_regular`): a symlink is resolved and must land
    inside `root` (None: anywhere, MDVDB_FOLLOW_SYMLINKS_OUTSIDE_ROOT)."""
    try:
        return open_regular(path, seen=seen)
    except Refused:
        if not os.path.islink(path):
            raise
    target = os.path.realpath(path)
    if root is not None and not _inside(target, os.path.realpath(root)):
        raise Refused("symlink points outside the project root, skipped", path) from None
    return open_regular(target, seen=seen)


def read_source(path: str, root: str | None, limit: int, seen=None) -> bytes:
    """A source file's bytes (`open_source`), at most `limit` (MDVDB_MAX_FILE_BYTES)."""
    return read_bounded(open_source(path, root, seen), limit, MAX_FILE_SETTING)


def real_folder(path: str | os.PathLike) -> bool:
    """True for a folder that is really there (not a link to one), False when nothing is
    there; Refused when something else has the name (a link, a file, a FIFO)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        raise Refused(f"{kind_of(info.st_mode)} where mdvdb keeps its own folder (remove it)", path)
    return True


def remove_where(folder: str | os.PathLike, wanted) -> list[str]:
    """Remove (and return) the names `wanted` accepts in the real folder `folder`, through an
    `O_NOFOLLOW` descriptor: a link named `folder` is never entered, one inside is removed."""
    try:
        dir_fd = os.open(os.fspath(folder), os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    except OSError:
        return []
    removed = []
    try:
        for name in os.listdir(dir_fd):
            if not wanted(name):
                continue
            try:
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
            except OSError:  # gone already, or a folder
                pass
    finally:
        os.close(dir_fd)
    return removed


def read_problem(exc: OSError) -> str:
    """The one line for a file that was not read: a refusal says why and that it is
    skipped; any other error is "cannot read: ..."."""
    if isinstance(exc, Refused):
        reason = exc.strerror
        return reason if reason.endswith("skipped") else f"{reason}; skipped"
    return f"cannot read: {exc.strerror or exc}"
