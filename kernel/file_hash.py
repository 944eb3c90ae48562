"""The SHA-256 of a file's bytes: what the index records per file (`files.sha256`).

The write side hashes a file it (re)reads (`pipeline.walk.discover`), the read side hashes it again
to check an index against the folder (`query.verify`): one function for both, so the two can
never disagree on what "the file's hash" is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file"]


# A Markdown file is read whole by the first read; a bigger one in pieces of this.
_PIECE = 1 << 20


def sha256_file(path: Path | str) -> str:
    """Unbuffered reads into one hash: a first build hashes every file of the folder, and
    `hashlib.file_digest` (a 256 KB buffer per call) through a buffered reader cost twice
    the CPU on tldr's 38k small files."""
    with open(path, "rb", buffering=0) as fh:
        digest = hashlib.sha256()
        while data := fh.read(_PIECE):
            digest.update(data)
        return digest.hexdigest()
