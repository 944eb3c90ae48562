"""The links a note holds, as written (wikilinks and embeds via `kernel.wikilinks`, Markdown
links and images, reference definitions), cached with its parse and resolved at pack
(`pipeline.pack.links`; docs/links.md, "What counts as a link")."""

from __future__ import annotations

import re
from urllib.parse import unquote

from kernel import wikilinks

TYPE_CHECKING = False
if TYPE_CHECKING:  # the cache key reads LINKS_VERSION on every run: no parser import here
    from pipeline.parse import ParsedDoc

__all__ = ["LINKS_VERSION", "RawLink", "extract_links"]

# Part of the chunk cache's key: a change of these rules re-extracts every file.
LINKS_VERSION = "l2"

# (line, kind, target, anchor, label): kind is wikilink, embed, markdown or image.
RawLink = tuple[int, str, str, str, str]

_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# `[label](dest "title")` and `![alt](dest)`; dest may be `<...>` (spaces allowed there).
_INLINE = re.compile(
    r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"
    r"\(\s*(<[^<>\n]*>|[^\s()<>]+)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
_DEFINITION = re.compile(r"^ {0,3}\[([^\]\n]+)\]:[ \t]*(<[^<>\n]*>|\S+)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def extract_links(doc: ParsedDoc) -> list[RawLink]:
    """Every link of a parsed note, in line order: the body with fenced code blanked out,
    read line by line where a line can hold one; the frontmatter for wikilinks only."""
    out: list[RawLink] = []
    lines = doc.lines
    if doc.link_lines:  # the body's wikilinks as written, not as their visible text
        lines = list(lines)
        for at, line in doc.link_lines:
            lines[at] = line
    for number, line in enumerate(lines[: doc.body_start - 1], 1):
        if "[[" in line:
            out.extend(link for _, link in _wikilinks(line, number))
    body = lines[doc.body_start - 1 :]
    text = "\n".join(body)
    if "[" not in text:
        return out
    if "```" in text or "~~~" in text:
        body = _without_fences(text).split("\n")
    first = doc.body_start
    for at in [i for i, line in enumerate(body) if "[" in line]:
        line = body[at]
        if "`" in line:
            line = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        found = _wikilinks(line, first + at) if "[[" in line else []
        if "](" in line or "]:" in line:
            found += _markdown(line, first + at)
            found.sort(key=lambda item: item[0])
        out.extend(link for _, link in found)
    return out


def _fences(text: str) -> list[tuple[int, int, str]]:
    """(start of its line, end, run) of each run of 3+ backticks or tildes that opens a
    line (at most 3 spaces in), in order. str.find, not a regex: far faster on big pages."""
    found = []
    for mark in ("```", "~~~"):
        at = text.find(mark)
        while at >= 0:
            end = at + 3
            while end < len(text) and text[end] == mark[0]:
                end += 1
            line_start = text.rfind("\n", 0, at) + 1
            if at - line_start <= 3 and not text[line_start:at].strip(" "):
                found.append((line_start, end, text[at:end]))
            at = text.find(mark, end)
    found.sort()
    return found


def _without_fences(text: str) -> str:
    """`text` with its fenced code blocks blanked out (same lines)."""
    parts, at, fence = [], 0, None
    for line_start, end, mark in _fences(text):
        if fence is None:
            fence = (mark, line_start)
        elif mark[0] == fence[0][0] and len(mark) >= len(fence[0]):
            parts.append(text[at : fence[1]])
            parts.append(_blank(text[fence[1] : end]))
            at, fence = end, None
    if fence is not None:  # an unclosed fence runs to the end
        parts.append(text[at : fence[1]])
        parts.append(_blank(text[fence[1] :]))
        at = len(text)
    parts.append(text[at:])
    return "".join(parts)


def _blank(text: str) -> str:
    return "\n" * text.count("\n")


def _wikilinks(line: str, number: int) -> list[tuple[int, RawLink]]:
    """(column, link) of each wikilink or embed of a line."""
    found = []
    for link in wikilinks.find(line):
        kind = "embed" if link.embed else "wikilink"
        found.append((link.start, (number, kind, link.target, link.heading, link.label)))
    return found


def _markdown(line: str, number: int) -> list[tuple[int, RawLink]]:
    """(column, link) of each inline link, image or reference definition of a line."""
    found = []
    for match in _INLINE.finditer(line):
        if line.startswith("[[", match.start(2) - 1) or match.group(2).startswith("["):
            continue  # a wikilink's brackets, read above
        link = _destination(match.group(3))
        if link is not None:
            kind = "image" if match.group(1) else "markdown"
            found.append((match.start(), (number, kind, link[0], link[1], match.group(2).strip())))
    definition = _DEFINITION.match(line) if "]:" in line else None
    if definition is not None:
        link = _destination(definition.group(2))
        if link is not None:
            found.append((0, (number, "markdown", link[0], link[1], definition.group(1).strip())))
    return found


def _destination(dest: str) -> tuple[str, str] | None:
    """(path, anchor) of a link destination that names a file of the folder (or `('', a)`
    for `#a` in the same file); None for a URL."""
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1]
    dest = dest.strip()
    if not dest or _SCHEME.match(dest) or dest.startswith("//"):
        return None
    path, _, anchor = dest.partition("#")
    path = path.split("?", 1)[0]
    return unquote(path), unquote(anchor)


def links_by_file(table, file_rows: list[int]) -> list[list[RawLink]]:
    """The raw links an index's `links` table holds for each of `file_rows` (its rows are
    grouped by file_id): what a chunk record's `links` would be."""
    import numpy as np

    from kernel.index_format import column_array

    if table is None or not table.num_rows:
        return [[] for _ in file_rows]
    file_ids = column_array(table, "file_id").to_numpy()
    wanted = np.asarray(file_rows, dtype=np.int64)
    starts = np.searchsorted(file_ids, wanted, side="left")
    ends = np.searchsorted(file_ids, wanted, side="right")
    take = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends, strict=True)] or [[]])
    import pyarrow as pa

    rows = pa.array(take.astype(np.int64))
    cols = [
        column_array(table, name).take(rows).to_pylist()
        for name in ("line", "kind", "target", "anchor", "label")
    ]
    out, at = [], 0
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        out.append([tuple(col[i] for col in cols) for i in range(at, at + b - a)])
        at += b - a
    return out
