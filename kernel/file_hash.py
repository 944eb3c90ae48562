"""The SHA-256 of a file's bytes: what the index records per file (`files.sha256`).

The write side hashes a file it (re)reads (`pipeline.discover`), the read side hashes it again
to check an index against the folder (`query.verify`): one function for both, so the two can
never disagree on what "the file's hash" is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file"]


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
