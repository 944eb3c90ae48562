"""The warm socket's messages: `MDW1`, a 4-byte big-endian length, then one tagged value (`N`
None, `T`/`F`, `i`/`f` ASCII digits behind a length byte, `s` UTF-8, `l` list, `d` mapping of
string keys; 4-byte lengths and counts), decoded within bounds: anything else is a
`WireError`, never a hang (docs/security.md, "Servers that cannot be knocked over")."""

from __future__ import annotations

__all__ = [
    "HEADER",
    "MAGIC",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "WireError",
    "decode",
    "encode",
    "message_length",
]

MAGIC = b"MDW1"
HEADER = 8  # MAGIC and the length
MAX_DEPTH = 8
MAX_ITEMS = 65_536
_NUMBER_CHARS = 32


class WireError(ValueError):
    """Bytes that are not a message of this protocol (or over a bound); one line."""


def encode(value: object) -> bytes:
    """`value` (None, bool, int, float, str, list/tuple, dict of str) as one message."""
    out: list[bytes] = []
    _put(value, out, 0)
    body = b"".join(out)
    if len(body) >= 1 << 32:
        raise WireError("a message of 4 GiB or more")
    return MAGIC + len(body).to_bytes(4, "big") + body


def _put(value: object, out: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    if value is None:
        out.append(b"N")
    elif value is True or value is False:
        out.append(b"T" if value else b"F")
    elif isinstance(value, int | float):
        digits = repr(value if isinstance(value, float) else int(value)).encode("ascii")
        if len(digits) > _NUMBER_CHARS:
            raise WireError(f"a number of {len(digits)} digits")
        out.append((b"f" if isinstance(value, float) else b"i") + bytes([len(digits)]) + digits)
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")  # argv may hold undecodable bytes
        out.append(b"s" + len(raw).to_bytes(4, "big") + raw)
    elif isinstance(value, list | tuple | dict):
        if len(value) > MAX_ITEMS:
            raise WireError(f"{len(value)} items (the limit is {MAX_ITEMS})")
        out.append((b"d" if isinstance(value, dict) else b"l") + len(value).to_bytes(4, "big"))
        if isinstance(value, dict):
            for key, item in value.items():
                _put(str(key), out, depth + 1)
                _put(item, out, depth + 1)
        else:
            for item in value:
                _put(item, out, depth + 1)
    else:
        raise WireError(f"cannot send a {type(value).__name__}")


def message_length(header: bytes, cap: int) -> int:
    """The body length a message's `HEADER` announces; WireError if foreign or over `cap`."""
    if len(header) != HEADER or header[:4] != MAGIC:
        raise WireError("not a warm-socket message")
    size = int.from_bytes(header[4:], "big")
    if size > cap:
        raise WireError(f"a message of {size} bytes (the limit is {cap})")
    return size


def decode(data: bytes, cap: int) -> object:
    """The value of one whole message (header included), read within the bounds above."""
    size = message_length(data[:HEADER], cap)
    if len(data) != HEADER + size:
        raise WireError(f"a message of {len(data) - HEADER} bytes, {size} announced")
    value, end = _get(data, HEADER, 0)
    if end != len(data):
        raise WireError("bytes after the value")
    return value


def _count(data: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(data):
        raise WireError("cut short")
    return int.from_bytes(data[pos : pos + 4], "big"), pos + 4


def _get(data: bytes, pos: int, depth: int) -> tuple[object, int]:
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    if pos >= len(data):
        raise WireError("cut short")
    tag = data[pos : pos + 1]
    pos += 1
    if tag in (b"N", b"T", b"F"):
        return {b"N": None, b"T": True, b"F": False}[tag], pos
    if tag in (b"i", b"f"):
        size = data[pos] if pos < len(data) else _NUMBER_CHARS + 1
        digits = data[pos + 1 : pos + 1 + size]
        if size > _NUMBER_CHARS or len(digits) != size:
            raise WireError("a malformed number")
        try:
            return (int if tag == b"i" else float)(digits.decode("ascii")), pos + 1 + size
        except (UnicodeDecodeError, ValueError):
            raise WireError("a malformed number") from None
    if tag == b"s":
        size, pos = _count(data, pos)
        if size > len(data) - pos:
            raise WireError("a string longer than the message")
        try:
            return data[pos : pos + size].decode("utf-8", "surrogatepass"), pos + size
        except UnicodeDecodeError:
            raise WireError("a string that is not UTF-8") from None
    if tag in (b"l", b"d"):
        count, pos = _count(data, pos)
        # each item takes a byte at least (a key and value two): checked before allocating
        if count > MAX_ITEMS or count * (2 if tag == b"d" else 1) > len(data) - pos:
            raise WireError(f"{count} items announced")
        if tag == b"l":
            items = []
            for _ in range(count):
                item, pos = _get(data, pos, depth + 1)
                items.append(item)
            return items, pos
        mapping = {}
        for _ in range(count):
            key, pos = _get(data, pos, depth + 1)
            if not isinstance(key, str):
                raise WireError("a mapping key that is not a string")
            mapping[key], pos = _get(data, pos, depth + 1)
        return mapping, pos
    raise WireError(f"unknown tag {tag!r}")
