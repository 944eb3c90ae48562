"""The SHA-256 of a file's bytes (`files.sha256`): one function for the walk and
`query.verify`, so the two never disagree.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kernel.safe_open import MAX_FILE_SETTING, open_source, too_big

__all__ = ["sha256_file"]


# A Markdown file is read whole by the first read; a bigger one in pieces of this.
_PIECE = 1 << 20


def sha256_file(
    path: Path | str, root: Path | str | None, seen=None, limit: int | None = None
) -> str:
    """Unbuffered reads into one hash (cheaper than `hashlib.file_digest` on many small files);
    `root`, `seen` as `kernel.safe_open.open_source` takes them; a file over `limit` is Refused."""
    fd = open_source(os.fspath(path), None if root is None else os.fspath(root), seen)
    try:
        size, total = os.fstat(fd).st_size, 0
        if limit is not None and size > limit:
            raise too_big(size, limit, MAX_FILE_SETTING)
        digest = hashlib.sha256()
        while data := os.read(fd, _PIECE):
            digest.update(data)
            total += len(data)
            if limit is not None and total > limit:
                raise too_big(total, limit, MAX_FILE_SETTING, grew=True)
        return digest.hexdigest()
    finally:
        os.close(fd)
