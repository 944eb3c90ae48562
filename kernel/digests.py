"""BLAKE2b and SHA-256 without `hashlib`'s import.

`import hashlib` loads OpenSSL (libcrypto) to build its table of constructors: ~2-3 ms of a
cold `mdvdb search`, which needs only BLAKE2b (term hashes, shard of a path) and SHA-256 (the
model cache's stamps). CPython's built-in modules give the same digests (hashlib's own
`blake2b` is `_blake2.blake2b`); where one is missing, hashlib's is used.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b

try:
    from _sha256 import sha256  # Python 3.11
except ImportError:  # pragma: no cover - 3.12 renamed it
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256

__all__ = ["blake2b", "sha256"]
