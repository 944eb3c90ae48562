"""`kernel.file_hash.sha256_file` reads a file in unbuffered pieces (a whole Markdown file
in one read): the digest equals hashlib's over the bytes at every size around a piece."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kernel import file_hash


def test_the_digest_is_the_bytes_digest_at_every_size_around_a_piece(tmp_path: Path):
    piece = file_hash._PIECE
    for size in (0, 1, 4095, piece - 1, piece, piece + 1, 3 * piece + 17):
        path = tmp_path / f"f{size}.md"
        data = os.urandom(size)
        path.write_bytes(data)
        expected = hashlib.sha256(data).hexdigest()
        assert file_hash.sha256_file(path, tmp_path) == expected, size
        assert file_hash.sha256_file(str(path), None) == expected, size
