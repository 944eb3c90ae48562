"""The link graph's queries (links, backlinks, orphans, broken links) over the index's `links`
table; a sharded index keeps no resolved graph, so they refuse it in one line."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernel import index_format
from query.results import Link
from query.snapshot import QueryError, Snapshot

__all__ = ["Link", "backlinks", "broken_links", "links", "orphans"]

SHARDED = (
    "a sharded index (MDVDB_SHARDS > 1) has no link graph: links, backlinks and orphans "
    "need a one-file index (MDVDB_SHARDS=1, then `mdvdb ingest`)"
)


def _table(snap: Snapshot) -> Any:
    if index_format.LINKS_META_KEY not in snap.meta:
        if snap.meta.get("shards"):
            raise QueryError(SHARDED)
        raise QueryError("this index has no link graph: run `mdvdb ingest --full`")
    return snap.table(index_format.LINKS_TABLE)


def _rows(snap: Snapshot, table: Any, rows: np.ndarray) -> list[Link]:
    """The links at `rows` of the table."""
    paths = snap.paths
    names = ("file_id", "line", "kind", "target", "anchor", "label", "resolved", "broken")
    columns = {name: table.column(name) for name in names}
    out = []
    for i in rows.tolist():
        value = {name: columns[name][i].as_py() for name in names}
        source = paths[value.pop("file_id")]
        out.append(Link(source=source, **value))
    return out


def links(snap: Snapshot, file_id: int) -> list[Link]:
    """The links file `file_id` holds, in line order."""
    table = _table(snap)
    file_ids = table.column("file_id").to_numpy()
    lo, hi = np.searchsorted(file_ids, [file_id, file_id + 1])
    return _rows(snap, table, np.arange(lo, hi))


def backlinks(snap: Snapshot, path: str) -> list[Link]:
    """The links of other files that name `path`, by linking file and line."""
    table = _table(snap)
    resolved = table.column("resolved").to_pylist()
    own = snap.paths.index(path) if path in snap.paths else -1
    file_ids = table.column("file_id").to_numpy()
    rows = [i for i, target in enumerate(resolved) if target == path and file_ids[i] != own]
    return _rows(snap, table, np.asarray(rows, dtype=np.int64))


def orphans(snap: Snapshot) -> list[str]:
    """The indexed files no other file links to and that link to no other indexed file."""
    table = _table(snap)
    paths = snap.paths
    ids = {path: i for i, path in enumerate(paths)}
    file_ids = table.column("file_id").to_numpy()
    linked = np.zeros(len(paths), dtype=bool)
    for source, target in zip(file_ids.tolist(), table.column("resolved").to_pylist(), strict=True):
        at = ids.get(target) if target is not None else None
        if at is not None and at != source:
            linked[source] = linked[at] = True
    return [paths[i] for i in np.flatnonzero(~linked).tolist()]


def broken_links(snap: Snapshot) -> list[Link] | None:
    """Every broken link, by file and line; None for an index without a link graph."""
    try:
        table = _table(snap)
    except QueryError:
        return None
    if not snap.meta[index_format.LINKS_META_KEY].get("broken", 1):
        return []  # pack counted none: the column is not read
    return _rows(snap, table, _true_rows(table.column("broken")))


def _true_rows(column: Any) -> np.ndarray:
    """The rows of a boolean column that are true, from its bit-packed values."""
    column = column.chunk(0) if getattr(column, "num_chunks", 1) == 1 else column
    data = column.buffers()[1]
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    return np.flatnonzero(bits[column.offset : column.offset + len(column)])
