"""Document ids: a short, stable name for each indexed file, from the SHA-256 of its path
(docs/architecture.md, "Document ids").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

__all__ = ["ID_LENGTH", "as_id", "id_of", "lengthened", "short_id"]

ID_LENGTH = 8
_ID = re.compile(r"^#?([0-9a-fA-F]{6,64})$")


def _digest(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()


def short_id(path: str) -> str:
    """The id a path gets when no other path of its index shares it."""
    return _digest(path)[:ID_LENGTH]


def lengthened(paths: Iterable[str]) -> dict[str, str]:
    """{path: id} for the paths whose short ids collide, each lengthened until it differs
    from every other path of the group; empty when none collide (the usual case)."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        groups.setdefault(short_id(path), []).append(path)
    out: dict[str, str] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        digests = [_digest(p) for p in members]
        length = ID_LENGTH
        while len({d[:length] for d in digests}) < len(digests) and length < len(digests[0]):
            length += 1
        out.update((p, d[:length]) for p, d in zip(members, digests, strict=True))
    return out


def id_of(path: str, long_ids: Mapping[str, str] | None = None) -> str:
    """A path's id in an index whose meta lists `long_ids` (`lengthened`)."""
    return (long_ids.get(path) if long_ids else None) or short_id(path)


def as_id(text: str) -> str | None:
    """The id `text` names (`#abc12345` or `abc12345`, any case), lower-cased; None when it
    is not written as one."""
    match = _ID.match(text.strip())
    return match.group(1).lower() if match else None
