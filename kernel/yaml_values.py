"""Metadata values as a person reads them, in YAML's spelling (`true`, `null`, `[a, b]`):
the one printer of a frontmatter value in every human output.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

__all__ = ["yaml_value"]

# A string that YAML would read as something else (or that reads oddly bare) is quoted.
_PLAIN_SPECIAL = re.compile(
    r"^(?:true|false|yes|no|on|off|null|~|[-+]?[\d.]+(?:e[-+]?\d+)?)$", re.I
)
_NEEDS_QUOTES = re.compile(r"^[\s\-?:,\[\]{}#&*!|>'\"%@`]|[:#,\[\]{}]\s|\s$|^$|[\n\r\t]")


def yaml_value(value: Any, nested: bool = False) -> str:
    """`value` on one line as YAML's flow style writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dict):
        items = ", ".join(f"{_text(str(k), True)}: {yaml_value(v, True)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ", ".join(yaml_value(v, True) for v in value) + "]"
    return _text(str(value), nested)


def _text(text: str, nested: bool) -> str:
    """A string bare when YAML would read it back as the same string, else double-quoted."""
    special = _PLAIN_SPECIAL.match(text) or _NEEDS_QUOTES.search(text)
    if nested and not special and ("," in text or "]" in text or "}" in text):
        special = True
    if not special:
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'
