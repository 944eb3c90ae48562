"""Obsidian's wikilinks and embeds, found in a text and reduced to what a reader sees: the one
reader of this syntax (docs/architecture.md, "Wikilinks").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WikiLink", "find", "visible"]

# No brackets or line break inside; the shortest run, so `[[a]] and [[b]]` are two links.
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\n]{1,1000}?)\]\]")
_LABEL = re.compile(r"\\?\|")


@dataclass(frozen=True)
class WikiLink:
    """One wikilink as written: `target` is '' for a link inside the same note (`[[#h]]`);
    `heading` is what follows `#` (a block reference keeps its `^`), '' if none."""

    target: str
    heading: str
    label: str
    embed: bool
    start: int
    end: int

    @property
    def text(self) -> str:
        """What Obsidian shows: the label, else the target and heading."""
        if self.label:
            return self.label
        return " ".join(part for part in (self.target, self.heading.lstrip("^")) if part)


def _link(match: re.Match) -> WikiLink:
    inner = match.group(2)
    parts = _LABEL.split(inner, maxsplit=1)
    where = parts[0].strip()
    label = parts[1].strip() if len(parts) > 1 else ""
    target, _, heading = where.partition("#")
    return WikiLink(
        target=target.strip(),
        heading=heading.strip(),
        label=label,
        embed=bool(match.group(1)),
        start=match.start(),
        end=match.end(),
    )


def find(text: str) -> list[WikiLink]:
    """Every wikilink in `text`, in order; an empty `[[ ]]` is not a link."""
    if "[[" not in text:
        return []
    links = (_link(m) for m in _WIKILINK.finditer(text))
    return [link for link in links if link.target or link.heading]


def visible(text: str) -> str:
    """`text` with each wikilink replaced by its visible text (line breaks kept)."""
    if "[[" not in text:
        return text
    out, last = [], 0
    for link in find(text):
        out.append(text[last : link.start])
        out.append(link.text)
        last = link.end
    out.append(text[last:])
    return "".join(out)
