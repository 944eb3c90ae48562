"""What `get` names and how much of it comes back: the one reading of a document target (a
path, `PATH:START-END`, `PATH:START+COUNT`, a document id, a glob, a note name; docs/agents.md)
and the one pager of a document's content."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel import doc_ids, index_format
from query.shaping import CHARS_PER_TOKEN
from query.snapshot import QueryError, Snapshot

__all__ = ["AmbiguousName", "Page", "Wanted", "id_map", "page", "targets"]

_RANGE = re.compile(r"^(.+):(\d+)([-+])(\d+)$")
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Wanted:
    """One document a target names, and the lines asked for (None: all)."""

    path: str
    start_line: int | None = None
    end_line: int | None = None


class AmbiguousName(QueryError):
    """A note name that several indexed files have; `candidates` lists their paths."""

    def __init__(self, name: str, candidates: list[str]) -> None:
        self.name, self.candidates = name, candidates
        listed = ", ".join(candidates)
        super().__init__(f"{name}: {len(candidates)} files have this name; give a path: {listed}")


def id_map(snap: Snapshot) -> dict[str, str]:
    """{id: path} of every indexed file (built once per snapshot)."""
    found = snap.cache.get("doc_ids")
    if found is None:
        long_ids = snap.meta.get(index_format.DOC_IDS_META_KEY) or {}
        found = {doc_ids.id_of(path, long_ids): path for path in snap.paths}
        snap.cache["doc_ids"] = found
    return found


def targets(snap: Snapshot, target: str, known: set[str]) -> list[Wanted]:
    """The documents `target` names (`known`: the indexed paths); QueryError when none."""
    if target in known:
        return [Wanted(target)]
    ranged = _RANGE.match(target)
    if ranged is not None and ranged.group(1) in known:
        start, count = int(ranged.group(2)), int(ranged.group(4))
        end = start + count - 1 if ranged.group(3) == "+" else count
        if start < 1 or end < start:
            raise QueryError(f"{target}: a line range is START-END or START+COUNT, from line 1")
        return [Wanted(ranged.group(1), start, end)]
    wanted_id = doc_ids.as_id(target)
    if wanted_id is not None:
        ids = id_map(snap)
        found = ids.get(wanted_id) or [p for i, p in ids.items() if i.startswith(wanted_id)]
        if isinstance(found, str) or len(found) == 1:
            return [Wanted(found if isinstance(found, str) else found[0])]
        if found:
            longer = ", ".join(
                f"#{doc_ids.id_of(p, snap.meta.get(index_format.DOC_IDS_META_KEY))}" for p in found
            )
            raise QueryError(f"{target}: {len(found)} documents have ids that start so: {longer}")
    if _GLOB.search(target):
        pattern = _glob(target)
        matched = [Wanted(p) for p in snap.paths if pattern.fullmatch(p)]
        if not matched:
            raise QueryError(f"{target}: no indexed file matches")
        return matched
    if "/" not in target:
        named = _named(snap.paths, target)
        if len(named) == 1:
            return [Wanted(named[0])]
        if named:
            raise AmbiguousName(target, named)
    raise QueryError(f"{target}: not in the index")


def _named(paths: list[str], name: str) -> list[str]:
    """The paths whose file name is `name`, with or without its extension (case ignored)."""
    wanted = name.casefold()
    found = []
    for path in paths:
        file = path.rsplit("/", 1)[-1].casefold()
        if file == wanted or file.rsplit(".", 1)[0] == wanted:
            found.append(path)
    return found


def _glob(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over POSIX paths: `**/` any folders, `*` and `?` within one."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            inner = pattern[i + 1 : end]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


@dataclass(frozen=True)
class Page:
    """The part of a document's content that comes back."""

    content: str
    start_line: int  # 1-based lines of `content` in the file
    end_line: int
    total_lines: int
    offset: int  # characters of the asked lines skipped before `content`
    next_offset: int | None  # where the next page starts; None when this is the last


def page(
    text: str,
    start_line: int | None = None,
    end_line: int | None = None,
    max_tokens: int | None = None,
    offset: int = 0,
) -> Page:
    """The lines asked for (all by default), from character `offset` of them, at most
    `max_tokens` × `CHARS_PER_TOKEN` characters, cut at a line's end when one is in reach."""
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    total = len(lines)
    first = max(1, start_line or 1)
    last = min(total, end_line or total)
    asked = "\n".join(lines[first - 1 : last]) if first <= last else ""
    if text.endswith("\n") and last == total and asked:
        asked += "\n"
    offset = min(max(0, offset), len(asked))
    rest = asked[offset:]
    cut = None
    if max_tokens is not None and max_tokens > 0 and len(rest) > max_tokens * CHARS_PER_TOKEN:
        limit = max_tokens * CHARS_PER_TOKEN
        newline = rest.rfind("\n", 0, limit)
        cut = newline + 1 if newline >= 0 else limit
        rest = rest[:cut]
    shown_first = first + asked.count("\n", 0, offset)
    shown_last = shown_first + (rest[:-1] if rest.endswith("\n") else rest).count("\n")
    next_offset = offset + cut if cut is not None else None
    return Page(rest, shown_first, min(shown_last, last), total, offset, next_offset)
