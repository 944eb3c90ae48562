"""The per-user cache: model-derived files kept once per user, named by their source's
SHA-256 (docs/architecture.md, "The per-user cache").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from hashlib import file_digest, sha256
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
    """SHA-256 of a model file, hashed once per (path, size, mtime, inode) and remembered in
    a small stamp file."""
    st = path.stat()
    stamp_key = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    stamp = models_dir() / "stamps" / sha256(stamp_key.encode()).hexdigest()[:32]
    try:
        known = stamp.read_text(encoding="ascii").strip()
        if len(known) == 64:
            return known
    except (OSError, UnicodeDecodeError):
        pass
    with open(path, "rb") as fh:
        sha = file_digest(fh, "sha256").hexdigest()
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
