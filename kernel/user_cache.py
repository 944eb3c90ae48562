"""The per-user cache: model-derived files kept once per user, never per project.

What lives here is derived from a model's own files and is the same for every project that
uses the model: the float32 copy of WordLlama's token table and the query-sized BPE
lookup DB. Each is named by the SHA-256 of the file it was derived from, so a new model
version gets new files and two versions never mix. Every write is a temp file in the same
folder plus `os.replace`: two processes building the same file at once each write their own
temp file and the last rename wins, with identical bytes; a reader never sees half a file.

Where: `MDVDB_CACHE_DIR` if set (tests point it at a temp folder), else the user cache folder
platformdirs gives for "mdvdb" (`$XDG_CACHE_HOME/mdvdb` or `~/.cache/mdvdb` on Linux,
`~/Library/Caches/mdvdb` on macOS, `%LOCALAPPDATA%\\mdvdb\\Cache` on Windows). On Linux the
folder is computed here without importing platformdirs (an import a cold `mdvdb search`
would pay for one path); `tests/test_footprint.py` checks the two agree.

Nothing here is needed: a cache that cannot be written (read-only home, full disk) only means
the slower path (read the model's own files) every time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import BinaryIO

ENV = "MDVDB_CACHE_DIR"
APP = "mdvdb"


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """The user cache folder (not created here)."""
    env = os.environ if environ is None else environ
    override = env.get(ENV, "").strip()
    if override:
        return Path(override).expanduser()
    if sys.platform.startswith("linux"):
        xdg = env.get("XDG_CACHE_HOME", "").strip()
        home = env.get("HOME") or os.path.expanduser("~")
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path(home) / ".cache"
        return base / APP
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP, appauthor=False))


def models_dir() -> Path:
    return cache_dir() / "models"


def source_sha256(path: Path) -> str:
    """SHA-256 of a model file, hashed once per (path, size, mtime, inode): the digest is
    remembered in a small stamp file, so a cold start reads 64 bytes instead of hashing the
    file (16 MB for the default model) every time."""
    st = path.stat()
    stamp_key = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    stamp = models_dir() / "stamps" / sha256(stamp_key.encode()).hexdigest()[:32]
    try:
        known = stamp.read_text(encoding="ascii").strip()
        if len(known) == 64:
            return known
    except (OSError, UnicodeDecodeError):
        pass
    digest = sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    sha = digest.hexdigest()
    atomic_write(stamp, lambda out: out.write(sha.encode("ascii")))
    return sha


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> bool:
    """Write `path` through a temp file in its folder and rename it into place; False (and
    nothing left behind) when the cache cannot be written."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
