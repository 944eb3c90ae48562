"""Result diversity: each near-duplicate group once (the others as `also_in`), at most
`per_file` sections of a file, and boilerplate (a group in many files) left out
(docs/architecture.md, "Search"). One `Diversity` spans a whole response, title tiers included."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kernel.index_format import IndexFormatError

if TYPE_CHECKING:
    from query.results import SearchResult
    from query.snapshot import Reader, Snapshot

SIGNATURE_META_KEY = "near_duplicates"
ALSO_IN_SHOWN = 20  # copies listed per result (`also_in_count` has them all)
OVERSAMPLE = 3  # candidates fetched per wanted result before collapsing
MIN_EXTRA = 20
BOILERPLATE_MIN_FILES = 10  # a group in fewer files is a copy, not boilerplate
BOILERPLATE_SHARE = 0.02  # ... and in at least this share of the index's files


class DuplicatesUnavailable(IndexFormatError):
    """The index has no near-duplicate groups (written by an older mdvdb)."""


def groups_of(snapshot: Snapshot) -> np.ndarray:
    """Per chunk, its near-duplicate group (-1: no copy), zero-copy over the map."""
    found = snapshot.cache.get("duplicate_groups")
    if found is None:
        table = snapshot.table("near_duplicates")
        chunks = snapshot.table("chunks").num_rows
        if table is None or not snapshot.meta.get(SIGNATURE_META_KEY) or table.num_rows != chunks:
            raise DuplicatesUnavailable(
                f"{snapshot.file.path} has no near-duplicate groups (built by an older mdvdb): "
                "run `mdvdb ingest`"
            )
        if chunks == 0:
            found = np.zeros(0, np.int32)
        else:
            from kernel import index_format

            found = index_format.column_array(table, "group").to_numpy(zero_copy_only=True)
        snapshot.cache["duplicate_groups"] = found
    return found


def boilerplate_of(snapshot: Snapshot) -> np.ndarray | None:
    """Per chunk, whether it is boilerplate (see the module docstring); None when no chunk
    is. Once per snapshot."""
    if "boilerplate" in snapshot.cache:
        return snapshot.cache["boilerplate"]
    groups = groups_of(snapshot)
    files = snapshot.chunk_file_ids
    n_files = snapshot.table("files").num_rows
    found = None
    member = groups >= 0
    need = max(BOILERPLATE_MIN_FILES, math.ceil(BOILERPLATE_SHARE * n_files))
    if np.count_nonzero(member) >= need:
        # distinct (group, file) pairs, then files per group (return_counts: a plain
        # np.unique imports numpy.ma)
        pairs = groups[member].astype(np.int64) * n_files + files[member]
        per_pair = np.unique(pairs, return_counts=True)[0] // n_files
        group_ids, counts = np.unique(per_pair, return_counts=True)
        big = group_ids[counts >= need]
        if len(big):
            flag = np.zeros(len(groups), dtype=bool)
            flag[big] = True
            found = member & flag[np.where(member, groups, 0)]
    snapshot.cache["boilerplate"] = found
    return found


@dataclass(eq=False, repr=False)
class Diversity:
    """What one response already holds: near-duplicate groups and sections per file."""

    groups: np.ndarray | None  # per chunk; None: no collapsing
    file_ids: np.ndarray
    per_file: int = 0  # 0: no cap
    scope: np.ndarray | None = None  # chunks `also_in` may list (the filters), None: all
    used_groups: set[int] = field(default_factory=set)
    file_counts: dict[int, int] = field(default_factory=dict)
    boilerplate: np.ndarray | None = None  # per chunk, left out of the search; None: none

    def without_boilerplate(self, allowed: np.ndarray | None) -> np.ndarray | None:
        """`allowed` (one boolean per chunk, None: every chunk) less the boilerplate."""
        if self.boilerplate is None:
            return allowed
        return ~self.boilerplate if allowed is None else allowed & ~self.boilerplate

    @classmethod
    def of(
        cls,
        index: Reader,
        per_file: int | None = None,
        collapse: bool = True,
        scope: np.ndarray | None = None,
    ) -> Diversity:
        snap = index.snapshot
        cap = index.config.search_per_file if per_file is None else per_file
        if cap < 0:
            raise ValueError(f"per_file must be 0 (no cap) or more, got {cap}")
        groups = groups_of(snap) if collapse else None
        boilerplate = boilerplate_of(snap) if collapse else None
        return cls(groups, snap.chunk_file_ids, cap, scope, boilerplate=boilerplate)

    def fetch_size(self, wanted: int) -> int:
        """Candidates to rank for `wanted` results: more when some may be dropped."""
        if self.groups is None and not self.per_file:
            return wanted
        return wanted * OVERSAMPLE + MIN_EXTRA

    def select(self, order: Sequence[int], wanted: int, per_file: int | None = None) -> list[int]:
        """The first `wanted` ids of `order` (best first) that repeat no group already held
        and keep every file within its cap. Nothing is recorded: see `commit`."""
        cap = self.per_file if per_file is None else per_file
        ids = np.asarray(order, dtype=np.int64)
        groups = self.groups[ids].tolist() if self.groups is not None else [-1] * len(ids)
        files = self.file_ids[ids].tolist()
        used, counts, kept = set(self.used_groups), dict(self.file_counts), []
        for chunk, group, file in zip(ids.tolist(), groups, files, strict=True):
            if len(kept) >= wanted:
                break
            if group >= 0 and group in used:
                if cap == 1:  # one section a file: a copy already shown stands for its file
                    counts[file] = max(counts.get(file, 0), 1)
                continue
            held = counts.get(file, 0)
            if cap and held >= cap:
                continue
            kept.append(chunk)
            counts[file] = held + 1
            if group >= 0:
                used.add(group)
        return kept

    def commit(self, chunk_ids: Sequence[int]) -> None:
        """Record the sections a response returns, for the next search of the same response."""
        for chunk in chunk_ids:
            file = int(self.file_ids[chunk])
            self.file_counts[file] = self.file_counts.get(file, 0) + 1
            if self.groups is not None and self.groups[chunk] >= 0:
                self.used_groups.add(int(self.groups[chunk]))

    def attach_copies(
        self, index: Reader, results: list[SearchResult], scope: np.ndarray | None = None
    ) -> None:
        """Fill each result's `also_in`: the other members of its group inside `scope`."""
        if self.groups is None:
            return
        scope = self.scope if scope is None else scope
        snap = index.snapshot
        chunks = files = None
        for hit in results:
            if hit.chunk_id < 0 or self.groups[hit.chunk_id] < 0:
                continue
            members = self.groups == self.groups[hit.chunk_id]
            if scope is not None:
                members &= scope
            members[hit.chunk_id] = False
            copies = np.flatnonzero(members)
            if not len(copies):
                continue
            if chunks is None:
                chunks, files = snap.table("chunks"), snap.table("files")
            hit.also_in_count = int(len(copies))
            hit.also_in = [
                {
                    "path": files.column("path")[int(self.file_ids[c])].as_py(),
                    "start_line": chunks.column("start_line")[int(c)].as_py(),
                    "end_line": chunks.column("end_line")[int(c)].as_py(),
                }
                for c in copies[:ALSO_IN_SHOWN].tolist()
            ]


def other_files(hit: SearchResult) -> int:
    """How many files other than the hit's own hold a copy (from the listed copies, plus
    the ones not listed, each counted as a file of its own)."""
    listed = {copy["path"] for copy in hit.also_in} - {hit.path}
    return len(listed) + max(hit.also_in_count - len(hit.also_in), 0)
