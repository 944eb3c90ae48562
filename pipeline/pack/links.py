"""Pack's link step: the `links` table of the new index, each link resolved over every indexed
path as Obsidian resolves it (docs/links.md, "What counts as a link"); raw links come from the
previous index for reused rows and from the chunk records for fresh ones."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from kernel import index_format
from kernel.project_files import MARKDOWN_SUFFIXES
from pipeline.links import RawLink

__all__ = ["RESOLUTION_VERSION", "Resolver", "raw_links", "resolved", "same_paths", "unresolved"]

RESOLUTION_VERSION = 1
_RAW = ("line", "kind", "target", "anchor", "label")


def raw_links(
    previous: index_format.IndexFile | None,
    file_source: np.ndarray,
    fresh: Sequence[Sequence[RawLink]],
) -> pa.Table:
    """The new index's links, grouped by new file id in line order: reused files' previous
    rows (renumbered) and the fresh files' (`fresh` true, unresolved)."""
    new_ids = np.arange(len(file_source), dtype=np.int32)
    kept = file_source >= 0
    parts: list[pa.Table] = []
    old = previous.tables.get(index_format.LINKS_TABLE) if previous is not None else None
    if old is not None and old.num_rows and kept.any():
        renumber = np.full(previous.tables["files"].num_rows, -1, dtype=np.int32)
        renumber[file_source[kept]] = new_ids[kept]
        old_ids = index_format.column_array(old, "file_id").to_numpy()
        now = renumber[old_ids]
        rows = np.flatnonzero(now >= 0)
        taken = old.select(["file_id", *_RAW, "resolved", "broken"]).take(pa.array(rows))
        taken = taken.set_column(0, "file_id", pa.array(now[rows], pa.int32()))
        parts.append(taken.append_column("fresh", pa.array(np.zeros(len(rows), dtype=bool))))
    fresh_ids = new_ids[~kept]
    ids = [int(f) for f, links in zip(fresh_ids, fresh, strict=True) for _ in links]
    columns = list(zip(*(link for links in fresh for link in links), strict=True)) or [()] * 5
    n = len(ids)
    parts.append(
        pa.Table.from_arrays(
            [pa.array(ids, pa.int32())]
            + [
                pa.array(list(c), pa.int32() if i == 0 else pa.string())
                for i, c in enumerate(columns)
            ]
            + [pa.nulls(n, pa.string()), pa.array(np.zeros(n, dtype=bool))]
            + [pa.array(np.ones(n, dtype=bool))],
            names=["file_id", *_RAW, "resolved", "broken", "fresh"],
        )
    )
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    order = np.argsort(index_format.column_array(table, "file_id").to_numpy(), kind="stable")
    return table.take(pa.array(order))


class Resolver:
    """Which indexed path a link names, over one index's paths."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = set(paths)
        self.folded = {}
        self.by_name: dict[str, list[str]] = {}
        for path in paths:
            self.folded.setdefault(path.casefold(), path)
            self.by_name.setdefault(_stem(path.rsplit("/", 1)[-1]).casefold(), []).append(path)

    def wikilink(self, target: str, source: str) -> str | None:
        if not target:
            return source
        target = target.replace("\\", "/").strip()
        if target.startswith(("./", "../")):
            return self._first([posixpath.normpath(posixpath.join(_folder(source), target))])
        wanted = _stem(target.lstrip("/")).casefold()
        name = wanted.rsplit("/", 1)[-1]
        found = [
            p
            for p in self.by_name.get(name, ())
            if (bare := _stem(p).casefold()) == wanted or bare.endswith("/" + wanted)
        ]
        if len(found) < 2:
            return found[0] if found else None
        here = [p for p in found if _folder(p) == _folder(source)]
        return min(here or found, key=lambda p: (p.count("/"), len(p), p))

    def markdown(self, target: str, source: str) -> str | None:
        if not target:
            return source
        target = target.replace("\\", "/")
        if target.startswith("/"):
            base = posixpath.normpath(target.lstrip("/") or ".")
        else:
            base = posixpath.normpath(posixpath.join(_folder(source), target))
        tries = [base, base + ".md", base + "/index.md", base + "/README.md"]
        if base.lower().endswith(".html"):
            tries.append(base[:-5] + ".md")
        return self._first([t for t in tries if not t.startswith("../") and t != ".."])

    def _first(self, tries: list[str]) -> str | None:
        for path in tries:
            if path.startswith("./"):
                path = path[2:]
            if path in self.paths:
                return path
        for path in tries:
            found = self.folded.get(path.casefold())
            if found is not None:
                return found
        return None


def resolved(table: pa.Table, paths: Sequence[str], only_fresh: bool = False) -> pa.Table:
    """`table` (from `raw_links`) with `resolved` and `broken` filled: every row, or with
    `only_fresh` only the fresh files' rows."""
    fresh = index_format.column_array(table, "fresh").to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(fresh) if only_fresh else np.arange(table.num_rows)
    table = table.drop_columns(["fresh"])
    if not len(rows):
        return table
    resolver = Resolver(paths)
    take = pa.array(rows)
    file_ids = index_format.column_array(table, "file_id").take(take).to_numpy()
    kinds = index_format.column_array(table, "kind").take(take).to_pylist()
    targets = index_format.column_array(table, "target").take(take).to_pylist()
    memo: dict[tuple[str, str, str], str | None] = {}
    out: list[str | None] = []
    broken: list[bool] = []
    for file_id, kind, target in zip(file_ids.tolist(), kinds, targets, strict=True):
        source = paths[file_id]
        key = (kind, target, _folder(source) if target else source)
        if key not in memo:
            wiki = kind in ("wikilink", "embed")
            memo[key] = (resolver.wikilink if wiki else resolver.markdown)(target, source)
        found = memo[key]
        out.append(found)
        broken.append(found is None and kind != "image" and _names_note(target))
    if len(rows) == table.num_rows:
        new_resolved, new_broken = pa.array(out, pa.string()), pa.array(broken, pa.bool_())
    else:
        import pyarrow.compute as pc

        mask = pa.array(fresh)
        old_resolved = index_format.column_array(table, "resolved")
        old_broken = index_format.column_array(table, "broken")
        new_resolved = pc.replace_with_mask(old_resolved, mask, pa.array(out, pa.string()))
        new_broken = pc.replace_with_mask(old_broken, mask, pa.array(broken, pa.bool_()))
    at = table.schema.get_field_index("resolved")
    table = table.set_column(at, "resolved", new_resolved)
    return table.set_column(at + 1, "broken", new_broken)


def unresolved(table: pa.Table) -> pa.Table:
    """`table` with empty `resolved` and `broken` columns (a sharded index's shards: no
    shard sees every path)."""
    n = table.num_rows
    table = table.select(["file_id", *_RAW])
    table = table.append_column("resolved", pa.nulls(n, pa.string()))
    return table.append_column("broken", pa.array(np.zeros(n, dtype=bool)))


def same_paths(previous: index_format.IndexFile | None, files: pa.Table) -> bool:
    """The new index has exactly the previous one's paths, and that one's links were
    resolved by these rules: its resolutions (and document ids) still hold."""
    if previous is None:
        return False
    meta = previous.meta.get(index_format.LINKS_META_KEY)
    if not isinstance(meta, dict) or meta.get("resolution") != RESOLUTION_VERSION:
        return False
    old = previous.tables["files"]
    if old.num_rows != files.num_rows:
        return False
    before = index_format.column_array(old, "path")
    return before.equals(index_format.column_array(files, "path"))


def _stem(path: str) -> str:
    lower = path.lower()
    for suffix in MARKDOWN_SUFFIXES:
        if lower.endswith(suffix):
            return path[: -len(suffix)]
    return path


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _names_note(target: str) -> bool:
    """A target with no extension, or a Markdown one (or `.html`, a built page)."""
    name = target.rstrip("/").rsplit("/", 1)[-1]
    if "." not in name.strip("."):
        return True
    return name.lower().endswith((*MARKDOWN_SUFFIXES, ".html"))
