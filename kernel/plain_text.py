"""Markdown and HTML reduced to the words a reader sees, line by line (search excerpts,
near-duplicate signatures).
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)[^\n]*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]\n]+)\]\((?:[^()\n]|\([^)\n]*\))*\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_REF_DEF = re.compile(r"^[ \t]{0,3}\[[^\]]+\]:[ \t]+\S.*$", re.MULTILINE)
_AUTOLINK = re.compile(r"<((?:https?|mailto|ftp):[^>\s]+)>")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE)
_HEADING_TAIL = re.compile(r"[ \t]+#+[ \t]*$", re.MULTILINE)
_QUOTE = re.compile(r"^[ \t]{0,3}(?:>[ \t]?)+", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?", re.MULTILINE)
_RULE = re.compile(r"^[ \t]{0,3}(?:[-*_][ \t]*){3,}$", re.MULTILINE)
_TABLE_RULE = re.compile(
    r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", re.MULTILINE
)
# Runs of emphasis characters; `_unemphasise` keeps those inside a word (`snake_case`).
_MARKERS = re.compile(r"[*_]{1,3}|~~")
_PIPE = re.compile(r"[ \t]*\|[ \t]*")
_SPACES = re.compile(r"\t[ \t]*| [ \t]+")
_LINK_TARGET = re.compile(r"\]\((?:[^()\n]|\([^)\n]*\))*\)")
# A backslash escape (`\#Tag`, `\*`) is held as a private-use character while the markup
# goes, so the character it escapes is shown and never read as markup.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_HELD = 0xE000
_RESTORE = {_HELD + c: chr(c) for c in range(0x21, 0x7F)}


def _hold(match: re.Match) -> str:
    return chr(_HELD + ord(match.group(1)))


def _keep_lines(match: re.Match) -> str:
    return "\n" * match.group(0).count("\n") or " "


def _unemphasise(match: re.Match) -> str:
    """Drop an emphasis marker that opens (before a non-space, not after a word character)
    or closes (after a non-space, not before a word character); keep the rest."""
    text, start, end = match.string, match.start(), match.end()
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    opens = not (before.isalnum() or before == "_") and not after.isspace()
    closes = not before.isspace() and not (after.isalnum() or after == "_")
    return "" if opens or closes else match.group(0)


def plain(text: str) -> str:
    """The visible text of Markdown (with inline HTML), same number of lines."""
    escaped = "\\" in text
    if escaped:
        text = _ESCAPE.sub(_hold, text)
    if "<!--" in text:
        text = _COMMENT.sub(_keep_lines, text)
    if "```" in text or "~~~" in text:
        text = _FENCE.sub("", text)
    if "]:" in text:
        text = _REF_DEF.sub("", text)
    if "<" in text:
        text = _AUTOLINK.sub(r"\1", text)
        text = _TAG.sub(_keep_lines, text)
    if "[" in text:
        text = _IMAGE.sub(r"\1", text)
        text = _LINK.sub(r"\1", text)
        text = _REF_LINK.sub(r"\1", text)
    if "#" in text:
        text = _HEADING.sub("", text)
        if "#\n" in text or text.rstrip().endswith("#"):
            text = _HEADING_TAIL.sub("", text)
    if "---" in text:
        text = _TABLE_RULE.sub("", text)
    if "---" in text or "***" in text or "___" in text:
        text = _RULE.sub("", text)
    if ">" in text:
        text = _QUOTE.sub("", text)
    if "- " in text or "* " in text or "+ " in text or ". " in text or ") " in text:
        text = _BULLET.sub("", text)
    if "`" in text:
        text = text.replace("`", "")
    if "*" in text or "_" in text or "~~" in text:
        text = _MARKERS.sub(_unemphasise, text)
    if "|" in text:
        text = _PIPE.sub(" ", text)
    if "&" in text:
        import html  # here: its entity table costs a search whose excerpts have no '&'

        text = html.unescape(text)
    if escaped:
        text = text.translate(_RESTORE)
    return _SPACES.sub(" ", text) if "  " in text or "\t" in text else text


def flat(text: str) -> str:
    """`plain` on one line: blank lines dropped, the rest joined by single spaces."""
    return " ".join(line.strip() for line in plain(text).split("\n") if line.strip())


def signature_text(text: str) -> str:
    """What near-duplicate signatures read: the text without HTML tags and link targets (a
    copy in another version folder links to that version's pages)."""
    if "<" in text:
        text = _TAG.sub(" ", text)
    if "](" in text:
        text = _LINK_TARGET.sub("]", text)
    return text
