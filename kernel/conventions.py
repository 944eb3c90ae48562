"""Markdown as notes apps and docs sites write it, reduced to what is indexed and shown:
comments blanked, wikilinks as their text, inline `#tags` collected, outside code
(docs/architecture.md, "Markdown conventions").
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from kernel import wikilinks

__all__ = ["aliases_of", "indexed_lines", "tags_in", "unescape"]

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
# Where something may start: a code span's backticks or a comment's opening.
_OPENING = re.compile(r"`+|<!--|%%")
_BACKTICKS = re.compile(r"`+")
_TAG = re.compile(r"(?:(?<=\s)|^)#([^\s!-,.:-@\[-^`{-~]|[_\-/])+", re.UNICODE)
_TAG_CHARS = re.compile(r"^[\w\-/]+$")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_HTML_CODE = re.compile(r"<code\b[^<>]*>.*?</code>", re.IGNORECASE)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_CLOSERS = {"<!--": "-->", "%%": "%%"}


def unescape(text: str) -> str:
    """`text` without Markdown's backslash escapes: `\\#Tag` -> `#Tag`, `\\*` -> `*`."""
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


def tags_in(text: str) -> list[str]:
    """The inline tags of prose `text` (no code, no comments), without `#`, in order."""
    if "#" not in text:
        return []
    if "<" in text:  # no tags in HTML code or an HTML tag's attributes (`color: #fff`)
        text = _HTML_TAG.sub("", _HTML_CODE.sub(" ", text))
    out = []
    for match in _TAG.finditer(text):
        tag = match.group(0)[1:].rstrip("/")
        if tag and _TAG_CHARS.match(tag) and not tag.isdigit():
            out.append(tag)
    return out


def aliases_of(metadata: dict[str, Any]) -> list[str]:
    """Obsidian's other names of a note: frontmatter `aliases` (or `alias`), a list or one
    string; empty and non-text entries left out."""
    out: list[str] = []
    for key in ("aliases", "alias"):
        value = metadata.get(key)
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str | int | float) and not isinstance(item, bool):
                text = str(item).strip()
                if text and text not in out:
                    out.append(text)
    return out


def _prose(text: str, tags: list[str]) -> str:
    """A run of prose (outside code and comments): its wikilinks as their visible text, its
    tags added to `tags`."""
    text = wikilinks.visible(text)
    tags.extend(tags_in(text))
    return text


def _span_ends(line: str) -> dict[int, int]:
    """Where each run of backticks of `line` that opens a code span starts -> where the span
    ends (after the next run of the same length, found by bisection: n log n)."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
    by_size: dict[int, list[int]] = {}
    for i, (start, end) in enumerate(runs):
        by_size.setdefault(end - start, []).append(i)
    ends: dict[int, int] = {}
    i = 0
    while i < len(runs):
        start, end = runs[i]
        same = by_size[end - start]
        k = bisect.bisect_right(same, i)
        if k < len(same):  # closed by that run; what lies between is code
            ends[start] = runs[same[k]][1]
            i = same[k] + 1
        else:
            i += 1  # no closing run: literal backticks
    return ends


def _line(line: str, closer: str | None, tags: list[str]) -> tuple[str, str, str | None]:
    """One line outside a fence, in a comment ending at `closer` (None: outside one): the line
    as indexed, the line with only its comments blanked, and the comment open at its end."""
    out: list[str] = []
    kept: list[str] = []
    at = 0
    spans = _span_ends(line) if "`" in line else {}
    while at <= len(line):
        if closer is not None:
            end = line.find(closer, at)
            if end < 0:
                return "".join(out), "".join(kept), closer
            at, closer = end + len(closer), None
            continue
        match = _OPENING.search(line, at)
        stop = len(line) if match is None else match.start()
        out.append(_prose(line[at:stop], tags))
        kept.append(line[at:stop])
        if match is None:
            break
        token = match.group(0)
        if token.startswith("`"):
            stop = spans.get(match.start(), match.end())
            out.append(line[match.start() : stop])  # a code span, or stray backticks
            kept.append(line[match.start() : stop])
            at = stop
        else:
            at, closer = match.end(), _CLOSERS[token]
    return "".join(out), "".join(kept), closer


def indexed_lines(
    lines: list[str], start: int = 0
) -> tuple[list[str], list[str], list[tuple[int, str]]]:
    """`lines` from index `start` on as indexed, line for line; the inline tags found (each
    once, without case); and (index, the line with only its comments blanked) for each line
    whose wikilinks were replaced, for the link graph."""
    out = list(lines[:start])
    tags: list[str] = []
    linked: list[tuple[int, str]] = []
    fence: str | None = None
    closer: str | None = None
    for line in lines[start:]:
        if fence is not None:
            out.append(line)
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            continue
        if closer is None:
            opening = _FENCE.match(line)
            if opening is not None and not (
                opening.group(1)[0] == "`" and "`" in line[opening.end() :]
            ):
                fence = opening.group(1)
                out.append(line)
                continue
        text, kept, closer = _line(line, closer, tags)
        if kept != text and "[[" in kept:
            linked.append((len(out), kept))
        out.append(text)
    seen: set[str] = set()
    unique = [t for t in tags if not (t.lower() in seen or seen.add(t.lower()))]
    return out, unique, linked
