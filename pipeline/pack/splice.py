"""Splicing: a new table as runs of zero-copy slices of the previous index's rows plus fresh
rows (rows are in path and file order, so an edit keeps a few long runs). `source` arrays say,
for every new row, which previous row it repeats, or -1 for the next fresh row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

# Past this many runs (edits scattered all over a large corpus), slices cost more in
# per-piece overhead than one gather: `take` the old rows instead.
MAX_RUNS = 2000


def runs(source: np.ndarray) -> list[tuple[int, int]]:
    """(first row of the previous table or -1 for fresh rows, length) of each maximal run of
    consecutive old rows or of fresh rows, in new-row order."""
    source = np.asarray(source, dtype=np.int64)
    if not len(source):
        return []
    fresh = source < 0
    breaks = np.ones(len(source), dtype=bool)
    breaks[1:] = (fresh[1:] != fresh[:-1]) | (~fresh[1:] & (source[1:] != source[:-1] + 1))
    starts = np.flatnonzero(breaks)
    lengths = np.diff(np.r_[starts, len(source)])
    firsts = np.where(fresh[starts], -1, source[starts])
    return list(zip(firsts.tolist(), lengths.tolist(), strict=True))


def splice(old, fresh, source: np.ndarray):
    """A table (or array) whose row i is `old[source[i]]`, or the next row of `fresh` when
    `source[i] < 0`. Tables come back chunked (one chunk per run), arrays as chunked arrays."""
    pieces = runs(source)
    if len(pieces) > MAX_RUNS:
        return _gathered(old, fresh, np.asarray(source, dtype=np.int64))
    parts, taken = [], 0
    for first, length in pieces:
        if first >= 0:
            parts.append(old.slice(first, length))
        else:
            parts.append(fresh.slice(taken, length))
            taken += length
    if taken != (len(fresh) if fresh is not None else 0):
        raise ValueError(f"splice used {taken} fresh rows of {len(fresh)}")
    return _concat(parts, old if old is not None else fresh)


def rows_of(table, rows: np.ndarray):
    """The rows at `rows` (ascending) of a table or chunked array, as slices of their runs
    (`take` would first combine every chunk)."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.r_[0, breaks]
    lengths = np.diff(np.r_[starts, len(rows)])
    parts = [table.slice(int(rows[a]), int(n)) for a, n in zip(starts, lengths, strict=True)]
    return _concat(parts, table)


def _gathered(old, fresh, source: np.ndarray):
    """The same rows by one `take` of the old ones, then a merge with the fresh ones."""
    kept = np.flatnonzero(source >= 0)
    if fresh is None or not len(fresh):
        return old.take(pa.array(source[kept]))
    both = _concat([old.take(pa.array(source[kept])), fresh], old)
    order = np.empty(len(source), dtype=np.int64)
    order[kept] = np.arange(len(kept))
    order[source < 0] = len(kept) + np.arange(len(source) - len(kept))
    return both.take(pa.array(order))


def _concat(parts: list, like):
    if isinstance(like, pa.Table):
        if not parts:
            return like.slice(0, 0)
        return pa.concat_tables(parts)
    chunks = [c for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    return pa.chunked_array(chunks, type=like.type)
