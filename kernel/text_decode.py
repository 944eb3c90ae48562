"""A note's bytes as text, whatever its encoding: what ingest indexes and `mdvdb get` shows
(docs/architecture.md, "Decoding a note").
"""

from __future__ import annotations

__all__ = ["decode"]

# Longest first: the UTF-32-LE mark begins with the UTF-16-LE one.
_MARKS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def decode(raw: bytes) -> tuple[str, str | None]:
    """(text with "\\n" line ends, the problem to report or None)."""
    problem = None
    if raw[:1] in (b"\xff", b"\xfe", b"\x00"):
        for mark, codec in _MARKS:
            if raw.startswith(mark):
                text = raw[len(mark) :].decode(codec, errors="replace")
                if "\ufffd" in text:
                    problem = f"not valid {codec.upper()}; decoded with replacement characters"
                return _finish(text, problem)
    if b"\x00" in raw:
        codec = _utf16_without_mark(raw)
        if codec is not None:
            text = raw.decode(codec, errors="replace")
            return _finish(text, f"no byte-order mark; read as {codec.upper()}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        if any(ch > "\x7f" and ch != "\ufffd" for ch in text):
            problem = f"not valid UTF-8 at byte {exc.start}; decoded with replacement characters"
        else:  # no UTF-8 sequence anywhere: a legacy 8-bit encoding
            try:
                text = raw.decode("cp1252")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            problem = f"not UTF-8 (first bad byte at {exc.start}); read as Windows-1252"
    return _finish(text, problem)


def _utf16_without_mark(raw: bytes) -> str | None:
    """utf-16-le / utf-16-be when the NULs sit on one side of the byte pairs (Latin text in
    UTF-16: every high byte 0), else None."""
    if len(raw) % 2:
        return None
    pairs = len(raw) // 2
    even, odd = raw[0::2].count(0), raw[1::2].count(0)
    if odd >= pairs * 0.3 and even <= odd * 0.05:
        return "utf-16-le"
    if even >= pairs * 0.3 and odd <= even * 0.05:
        return "utf-16-be"
    return None


def _finish(text: str, problem: str | None) -> tuple[str, str | None]:
    if text.startswith("\ufeff"):  # UTF-8's mark, or a second one
        text = text[1:]
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
        nul = "holds NUL bytes (shown as U+FFFD)"
        problem = f"{problem}; {nul}" if problem else nul
    return text.replace("\r\n", "\n").replace("\r", "\n"), problem
