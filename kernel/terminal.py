"""Text from the notes made safe to print on a terminal: control characters become
visible escapes (docs/security.md).
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, a carriage return not ending a line, DEL, C1 controls
# (0x9b is an 8-bit CSI), and the bidi embeddings, overrides and isolates.
_IN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]|\r(?!\n)")
# In a name or any one-line field, also tab, newline and every carriage return.
_IN_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, one_line: bool = False) -> str:
    """`text` with its control characters escaped; `one_line` also escapes line breaks and
    tabs (names, titles, headings, frontmatter values, error messages)."""
    pattern = _IN_LINE if one_line else _IN_TEXT
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)
