"""The index's inverted-file (IVF) part: coarse lists of chunk rows, for a sub-linear first
pass (docs/architecture.md, "The IVF table").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TABLE = "ivf"
META_KEY = "ivf"
VERSION = 1


def schema(dimensions: int):
    import pyarrow as pa

    return pa.schema(
        [
            ("centroid", pa.list_(pa.float32(), dimensions)),
            ("rows", pa.list_(pa.int32())),  # ascending chunk ids of the list
        ]
    )


@dataclass(frozen=True)
class IvfLists:
    """The table as NumPy views over the map: `rows[offsets[j]:offsets[j + 1]]` are the
    chunk ids of list j, whose centroid is `centroids[j]`."""

    centroids: Any  # (k, d) float32
    offsets: Any  # (k + 1,) int
    rows: Any  # (n,) int32: every chunk exactly once

    @property
    def lists(self) -> int:
        return len(self.centroids)


def read(table, meta: dict[str, Any], n_chunks: int, dimensions: int) -> IvfLists | None:
    """The lists, or None when the index has none or they do not add up (`problems`)."""
    if table is None or not isinstance(meta.get(META_KEY), dict):
        return None
    try:
        lists = _arrays(table, dimensions)
    except Exception:  # noqa: BLE001 - a torn part is no first pass, never a crash
        return None
    if problems(lists, meta, n_chunks, dimensions, full=False):
        return None
    return lists


def _arrays(table, dimensions: int) -> IvfLists:
    import numpy as np

    from kernel import index_format

    offsets, rows = index_format.list_parts(table, "rows")
    column = index_format.column_array(table, "centroid")
    flat = column.values.to_numpy(zero_copy_only=True) if table.num_rows else np.zeros(0)
    centroids = flat.reshape(-1, dimensions) if dimensions else flat.reshape(0, 0)
    return IvfLists(np.asarray(centroids, dtype=np.float32), offsets, rows)


def problems(
    lists: IvfLists | None,
    meta: dict[str, Any],
    n_chunks: int,
    dimensions: int,
    full: bool = True,
    table=None,
) -> list[str]:
    """What is wrong with the IVF part (empty: sound). `full`: also check that every chunk
    is in exactly one list and every list ascends (a pass over n ids: `status --verify`)."""
    import numpy as np

    info = meta.get(META_KEY)
    if lists is None:
        if table is None:
            return [f"meta key {META_KEY!r} names IVF lists, table {TABLE} missing"] if info else []
        try:
            lists = _arrays(table, dimensions)
        except Exception as exc:  # noqa: BLE001
            return [f"table {TABLE}: unreadable ({type(exc).__name__}: {exc})"]
    if not isinstance(info, dict) or info.get("version") != VERSION:
        return [f"table {TABLE}: meta key {META_KEY!r} missing or of another version"]
    out = []
    k = lists.lists
    if k != info.get("lists") or lists.centroids.shape != (k, dimensions):
        out.append(f"table {TABLE}: {k} lists, meta says {info.get('lists')}")
    offsets = lists.offsets
    if len(offsets) != k + 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        out.append(f"table {TABLE}: list offsets do not ascend")
    elif len(lists.rows) != n_chunks or int(offsets[-1]) != n_chunks:
        out.append(f"table {TABLE}: {len(lists.rows)} rows listed for {n_chunks} chunks")
    if out or not full:
        return out
    rows = np.asarray(lists.rows)
    if len(rows) and (rows.min() < 0 or rows.max() >= n_chunks):
        return [f"table {TABLE}: a row id outside 0..{n_chunks - 1}"]
    seen = np.bincount(rows, minlength=n_chunks) if len(rows) else np.zeros(0)
    if len(seen) and (seen != 1).any():
        out.append(f"table {TABLE}: {int((seen != 1).sum())} chunk(s) not in exactly one list")
    if not np.isfinite(lists.centroids).all():
        out.append(f"table {TABLE}: a centroid is not finite")
    return out
