"""Where and when a search looks: `--path` globs (gitignore syntax, as the walk applies it),
`--source` names (a file's most specific source folder) and `--since`/`--before` (the modified
time or a `date_field` filter), each a mask over files applied with the filters before ranking
(docs/search.md, "Where and when: paths, sources, dates, decay")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kernel.dates import DateError, moment
from query.filters import Filter

if TYPE_CHECKING:
    from query.snapshot import Reader, Snapshot

__all__ = [
    "Scope",
    "ScopeError",
    "SourceInfo",
    "file_sources",
    "scope_of",
    "source_of",
    "source_table",
]


class ScopeError(ValueError):
    """A glob, a source name or a date that cannot be used (a usage error)."""


@dataclass(frozen=True)
class SourceInfo:
    """One configured source: its name, folder (root-relative; "" the root) and description."""

    name: str
    folder: str
    description: str = ""

    def to_json(self) -> dict[str, str]:
        return {"path": self.folder or ".", "description": self.description}


@dataclass(eq=False, repr=False)
class Scope:
    """The scope of one request: a mask over files (None: every file) and the date filters
    on a frontmatter field."""

    files: np.ndarray | None
    filters: list[Filter]


def scope_of(
    index: Reader,
    paths: Sequence[str] = (),
    sources: Sequence[str] = (),
    since: str | None = None,
    before: str | None = None,
    date_field: str | None = None,
) -> Scope:
    """The files a request may return; ScopeError names what cannot be read."""
    import time

    snap = index.snapshot
    mask: np.ndarray | None = None
    if paths:
        mask = _and(mask, path_mask(snap, paths))
    if sources:
        mask = _and(mask, source_mask(index, sources))
    filters: list[Filter] = []
    now = time.time()
    bounds = [(op, _moment(flag, text, now)) for op, flag, text in _bounds(since, before)]
    if date_field:
        for op, when in bounds:
            iso = dt.datetime.fromtimestamp(when, dt.UTC).isoformat()
            filters.append(Filter(date_field, op, iso))
    elif bounds:
        from kernel import index_format

        mtimes = index_format.column_array(snap.table("files"), "mtime").to_numpy()
        for op, when in bounds:
            mask = _and(mask, mtimes >= when if op == ">=" else mtimes < when)
    return Scope(mask, filters)


def _bounds(since: str | None, before: str | None) -> list[tuple[str, str, str]]:
    found = [(">=", "since", since), ("<", "before", before)]
    return [(op, flag, text) for op, flag, text in found if text]


def _moment(flag: str, text: str, now: float) -> float:
    try:
        return moment(text, now)
    except DateError as exc:
        raise ScopeError(f"{flag}: {exc}") from None


def _and(mask: np.ndarray | None, other: np.ndarray) -> np.ndarray:
    return other if mask is None else mask & other


def path_mask(snap: Snapshot, globs: Sequence[str]) -> np.ndarray:
    """One boolean per file: its root-relative path matches the gitignore-style `globs`."""
    import pathspec

    lines = [g.strip() for g in globs if g.strip()]
    if not lines:
        raise ScopeError("--path: give a glob (docs/, *.md, notes/**/2026-*.md)")
    key = ("path_mask", tuple(lines))
    found = snap.cache.get(key)
    if found is None:
        try:
            spec = pathspec.GitIgnoreSpec.from_lines(lines)
        except (ValueError, TypeError) as exc:
            raise ScopeError(f"--path: {exc}") from None
        found = np.fromiter(
            (spec.match_file(p) for p in snap.paths), dtype=bool, count=len(snap.paths)
        )
        snap.cache[key] = found
    return found


def source_table(index: Reader) -> list[SourceInfo]:
    """The configured sources inside the root, in configuration order: names and folders
    only (`kernel.project_files.source_folders` also reads the ignore rules, which a search
    that names its results needs not)."""
    config = index.config
    out = []
    for source, path in zip(config.named_sources(), config.source_paths(), strict=True):
        try:
            rel = path.relative_to(config.root).as_posix()
        except ValueError:
            continue  # outside the root: its files are not under a root-relative folder
        out.append(SourceInfo(source.name, "" if rel == "." else rel, source.description))
    return out


def source_of(table: Sequence[SourceInfo], path: str) -> SourceInfo | None:
    """The most specific source of `table` holding the root-relative `path`."""
    inside = [s for s in table if not s.folder or path.startswith(s.folder + "/")]
    return max(inside, key=lambda s: len(s.folder), default=None)  # first of equals


def file_sources(index: Reader) -> tuple[list[SourceInfo], np.ndarray]:
    """The sources, and one number per file: its source by `source_of`'s rule (-1: none),
    computed for every file at once (NumPy's prefix test, shortest folder first so that a
    more specific one overrides; the first configured of equal folders last)."""
    table = source_table(index)
    snap = index.snapshot
    key = ("file_sources", tuple(table))
    found = snap.cache.get(key)
    if found is None:
        paths = np.array(snap.paths, dtype=str)
        found = np.full(len(paths), -1, dtype=np.int32)
        order = sorted(range(len(table)), key=lambda i: (len(table[i].folder), -i))
        for number in order:
            folder = table[number].folder
            inside = np.char.startswith(paths, folder + "/") if folder else True
            found[inside] = number
        snap.cache[key] = found
    return table, found


def source_mask(index: Reader, names: Sequence[str]) -> np.ndarray:
    """Files whose source is one of `names` (`NAME` or grep's `dir:NAME`, any case)."""
    table, owners = file_sources(index)
    wanted = []
    for raw in names:
        name = raw.strip().removeprefix("dir:").casefold()
        numbers = [i for i, s in enumerate(table) if s.name.casefold() == name]
        if not numbers:
            known = ", ".join(s.name for s in table) or "none"
            raise ScopeError(f"--source {raw!r}: no such source; sources: {known}")
        wanted.extend(numbers)
    return np.isin(owners, wanted)
