"""The merged frontmatter schema as the read side sees it, from the `schema` and
`schema_problems` tables, kept per published snapshot."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kernel import index_format
from kernel.config import SCHEMA_OVERLAY_FILE

if TYPE_CHECKING:
    from query.snapshot import Reader, Snapshot


@dataclass
class FieldInfo:
    """One frontmatter field: what the files hold and what the overlay says about it."""

    name: str
    type: str  # string | number | boolean | date | list | object | mixed | none
    inferred_type: str
    type_counts: dict[str, int]
    files: int
    distinct: int
    values: list[tuple[str, int]] | None  # (value, files) when few distinct values
    description: str | None = None
    allowed: list[str] | None = None
    required: bool = False
    declared: bool = False
    column: str | None = None  # typed column of the `files` table; None: no file has it


@dataclass
class SchemaProblem:
    path: str
    field: str
    problem: str


@dataclass
class Schema:
    fields: dict[str, FieldInfo] = field(default_factory=dict)
    problems: list[SchemaProblem] = field(default_factory=list)
    overlay_digest: str | None = None  # of the overlay the index was built with
    overlay_error: str | None = None
    present: bool = True  # False: the index was built before schemas were indexed

    def field_names(self) -> list[str]:
        return list(self.fields)

    def get(self, name: str) -> FieldInfo | None:
        return self.fields.get(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "fields": [asdict(f) for f in self.fields.values()],
            "problems": [asdict(p) for p in self.problems],
            "overlay": {"digest": self.overlay_digest, "error": self.overlay_error},
        }


_CACHE: dict[tuple, Schema] = {}


def load_schema(snapshot: Snapshot | Reader) -> Schema:
    """The schema of one mapped snapshot (cached for as long as that snapshot is current);
    given a `Reader`, of its current snapshot (`Index.schema()` is the public form)."""
    snapshot = getattr(snapshot, "snapshot", snapshot)
    key = (str(snapshot.file.path), snapshot.file.inode, snapshot.file.mtime_ns)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _read(snapshot)
        _CACHE.clear()
        _CACHE[key] = cached
    return cached


def _read(snapshot: Snapshot) -> Schema:
    overlay = snapshot.meta.get("schema_overlay") or {}
    schema = Schema(overlay_digest=overlay.get("digest"), overlay_error=overlay.get("error"))
    table = snapshot.table("schema")
    schema.present = table is not None
    if table is not None:
        for row in table.to_pylist():
            values = json.loads(row["values"]) if row["values"] else None
            schema.fields[row["field"]] = FieldInfo(
                name=row["field"],
                type=row["type"],
                inferred_type=row["inferred_type"],
                type_counts=json.loads(row["type_counts"] or "{}"),
                files=row["files"],
                distinct=row["distinct"],
                values=[(v, c) for v, c in values] if values is not None else None,
                description=row["description"],
                allowed=row["allowed"],
                required=bool(row["required"]),
                declared=bool(row["declared"]),
                column=row["column"],
            )
    problems = snapshot.table("schema_problems")
    if problems is not None:
        schema.problems = [SchemaProblem(**row) for row in problems.to_pylist()]
    return schema


def overlay_is_stale(index: Reader) -> bool:
    """The overlay on disk differs from the one the index was built with."""
    from kernel.safe_open import read_own

    try:  # read as ingest reads it: never through a link, never a FIFO, at most 1 MiB
        raw = read_own(index.config.root / SCHEMA_OVERLAY_FILE)
        digest = None if raw is None else hashlib.sha256(raw).hexdigest()
    except OSError:
        digest = None
    return digest != load_schema(index.snapshot).overlay_digest


def field_strings(snapshot: Snapshot, info: FieldInfo | None):
    """A field's typed column as one flat array of strings, list items one by one (None when
    no file has the field): what value listings and counts are taken over."""
    import pyarrow as pa
    import pyarrow.compute as pc

    files = snapshot.table("files")
    if info is None or info.column is None or info.column not in files.column_names:
        return None
    column = index_format.arrow_array(files, info.column)
    if pa.types.is_list(column.type):
        column = pc.list_flatten(column)
    if not pa.types.is_string(column.type):
        column = pc.cast(column, pa.string())
    return column.drop_null()


def value_counts(snapshot: Snapshot, info: FieldInfo) -> list[tuple[str, int]]:
    """Every value of one field with the number of files holding it (list items one by one),
    most common first: the whole distribution, where `FieldInfo.values` stops at a few."""
    import pyarrow.compute as pc

    column = field_strings(snapshot, info)
    if column is None:
        return []
    counted = pc.value_counts(column).to_pylist()
    return sorted(((c["values"], c["counts"]) for c in counted), key=lambda vc: (-vc[1], vc[0]))
