"""The SHA-256 of a file's bytes: what the index records per file (`files.sha256`).

The write side hashes a file it (re)reads (`pipeline.walk.discover`), the read side hashes it again
to check an index against the folder (`query.verify`): one function for both, so the two can
never disagree on what "the file's hash" is. The file is opened as every source file is
(`kernel.safe_open.open_source`: never a FIFO, a link only inside the root, the file the walk
saw).
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
    """Unbuffered reads into one hash: a first build hashes every file of the folder, and
    `hashlib.file_digest` (a 256 KB buffer per call) through a buffered reader costs more
    CPU on many small files (docs/benchmarks.md, "Session 9: the clustering fit beside
    schema and pack, a cheaper walk (issue 18 item 1)"). `root`: where a symlink must land
    (None: anywhere); `seen`: the walk's stat of the file; `limit`: MDVDB_MAX_FILE_BYTES (a
    bigger file is Refused, and not read)."""
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
