"""How `mdvdb grep` matches look: human text (per file a header, `Title:`, then `Lnn:` lines,
a long line cut around its match) or one JSON record a line, never coloured."""

from __future__ import annotations

import json
from collections.abc import Mapping

from kernel.terminal import printable
from query.grep.ripgrep import Match

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

MAX_LINE = 500
ELLIPSIS = "…"
COLOR_CHOICES = ("auto", "always", "never")

RESET = "\x1b[0m"
MATCH = "\x1b[1;31m"  # bold red
PATH = "\x1b[35m"  # magenta
LINE_NO = "\x1b[32m"  # green
LABEL = "\x1b[2m"  # dim


def use_color(choice: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    """--color always/never wins; for auto: NO_COLOR, then FORCE_COLOR, then a terminal."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    if environ.get("NO_COLOR"):
        return False
    force = environ.get("FORCE_COLOR")
    if force and force.lower() not in ("0", "false"):
        return True
    try:
        return stream.isatty() and environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def cut(text: str, spans: list[tuple[int, int]], width: int = MAX_LINE):
    """(shown text, spans within it, cut on the left, cut on the right), centred on the match."""
    if len(text) <= width:
        return text, spans, False, False
    start, end = spans[0] if spans else (0, 0)
    # Centre the first match; a match wider than the window starts it.
    left = start if end - start >= width else max(0, start - (width - (end - start)) // 2)
    left = min(left, len(text) - width)
    right = left + width
    shown = [
        (max(s, left) - left, min(e, right) - left) for s, e in spans if e > left and s < right
    ]
    return text[left:right], shown, left > 0, right < len(text)


def snippet(text: str, spans: list[tuple[int, int]], color: bool, width: int = MAX_LINE) -> str:
    shown, spans, cut_left, cut_right = cut(text, spans, width)
    if color and spans:
        parts, at = [], 0
        for s, e in sorted(spans):
            if s < at:  # overlapping submatches: colour the union once
                s = at
            if e <= s:
                continue
            parts += [_line(shown[at:s]), MATCH, _line(shown[s:e]), RESET]
            at = e
        parts.append(_line(shown[at:]))
        shown = "".join(parts)
    else:
        shown = _line(shown)
    return (ELLIPSIS if cut_left else "") + shown + (ELLIPSIS if cut_right else "")


def _line(text: str) -> str:
    """Folder text on one line of a terminal: control characters escaped."""
    return printable(text, one_line=True)


def _paint(code: str, text: str, color: bool) -> str:
    return f"{code}{text}{RESET}" if color else text


def header(match: Match, color: bool) -> str:
    """The lines that open a file's group of matches."""
    source, path = _line("[" + match.source + "]"), _line(match.path)
    head = f"{_paint(LABEL, source, color)} {_paint(PATH, path, color)}"
    if match.head.page_id:
        head += " " + _paint(LABEL, f"(page {_line(str(match.head.page_id))})", color)
    title = _line(str(match.head.title))
    return f"{head}\n{_paint(LABEL, 'Title:', color)} {title}\n\n"


def match_line(match: Match, color: bool) -> str:
    label = _paint(LINE_NO, f"L{match.line}:", color)
    return f"{label} {snippet(match.text, match.spans, color)}\n"


def json_record(match: Match) -> str:
    """One line of `mdvdb grep --json` (JSON Lines): `schema_version` first (docs/json.md)."""
    from kernel.version import JSON_SCHEMA_VERSION

    record = {"schema_version": JSON_SCHEMA_VERSION, **match.to_json()}
    return json.dumps(record, ensure_ascii=False) + "\n"


class HumanWriter:
    """Writes matches as they come, opening a new file group whenever the file changes."""

    def __init__(self, stream: TextIO, color: bool):
        self.stream = stream
        self.color = color
        self.current: tuple[str, str] | None = None

    def write(self, match: Match) -> None:
        out = ""
        key = (match.source, match.path)
        if key != self.current:
            out = ("\n" if self.current is not None else "") + header(match, self.color)
            self.current = key
        self.stream.write(out + match_line(match, self.color))
        self.stream.flush()


class JsonWriter:
    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, match: Match) -> None:
        self.stream.write(json_record(match))
        self.stream.flush()
