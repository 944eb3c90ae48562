"""Metadata filters: `Filter(field, op, value)`, their CLI spelling (docs/filters.md) and
their masks: evaluated on the typed `fm:<field>` columns of `files` with Arrow compute, one
boolean per file, gathered to one per chunk; no document's JSON is loaded."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel import index_format
from kernel.index_format import frontmatter_date, frontmatter_text

if TYPE_CHECKING:
    from query.schema import FieldInfo, Schema
    from query.snapshot import Reader, Snapshot

COMPARISONS = ("<=", ">=", "!=", "=", "<", ">")  # longest first, for parsing
RANGES = ("<", "<=", ">", ">=")
OPS = ("=", "!=", *RANGES, "exists", "missing")
SYNTAX = "field=value, field=a,b, field!=value, field>=n (also <, <=, >), field? (present), !field"


class FilterError(ValueError):
    """A filter that cannot be applied: malformed, unknown field, or a value of the wrong
    type. The message lists what would have worked."""


@dataclass(frozen=True)
class Filter:
    """One metadata condition as the user wrote it: field, operator, value(s)."""

    field: str
    op: str = "="
    value: Any = None  # "=" / "!=": one value or a tuple of values (any of them)
    ignore_case: bool = False
    # `--tag`: the body's inline #tags (the `files.tags` column) count as values too
    inline_tags: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise FilterError(f"unknown filter operator {self.op!r}; use one of {', '.join(OPS)}")
        if isinstance(self.value, list):
            object.__setattr__(self, "value", tuple(self.value))

    @property
    def values(self) -> tuple[Any, ...]:
        return self.value if isinstance(self.value, tuple) else (self.value,)

    def __str__(self) -> str:
        if self.op == "exists":
            return f"{self.field}?"
        if self.op == "missing":
            return f"!{self.field}"
        shown = ",".join(frontmatter_text(v).replace(",", "\\,") for v in self.values)
        return f"{self.field}{self.op}{shown}"


def parse_filter(text: str) -> Filter:
    """A CLI filter string as a Filter with string values (typed later by the schema)."""
    raw = text.strip()
    for i, ch in enumerate(raw):
        if ch not in "<>!=":
            continue
        op = raw[i : i + 2] if raw[i : i + 2] in COMPARISONS else raw[i]
        if op not in COMPARISONS:
            continue
        name, value = raw[:i].strip(), raw[i + len(op) :].strip()
        if not name:
            if op == "!=" or not raw.startswith("!"):
                raise FilterError(f"filter {text!r} has no field name; forms: {SYNTAX}")
            continue  # `!field...`: handled below
        if value == "":
            raise FilterError(f"filter {text!r} has no value after {op!r}; forms: {SYNTAX}")
        values = split_values(value)
        if op in RANGES and len(values) > 1:
            raise FilterError(f"filter {text!r}: {op!r} takes one value, not a list")
        return Filter(name, op, values[0] if len(values) == 1 else values)
    if raw.endswith("?") and len(raw) > 1:
        return Filter(raw[:-1].strip(), "exists")
    if raw.startswith("!") and len(raw) > 1:
        return Filter(raw[1:].strip(), "missing")
    raise FilterError(f"cannot read filter {text!r}; forms: {SYNTAX}")


def split_values(raw: str) -> tuple[str, ...]:
    """`a,b,c` -> ('a', 'b', 'c'); `\\,` stays a comma inside a value."""
    parts, current, escaped = [], [], False
    for ch in raw:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current).strip())
    values = tuple(p for p in parts if p)
    if not values:
        raise FilterError(f"no value in {raw!r}")
    return values


# -- typing by the schema -----------------------------------------------------------------


@dataclass(frozen=True)
class TypedFilter:
    """A Filter with its field's schema and its values in the field's column type."""

    filter: Filter
    info: FieldInfo
    values: tuple[Any, ...]  # converted to the field's column type


def resolve(filters: Iterable[Filter], schema: Schema) -> list[TypedFilter]:
    """Check each filter against the schema and convert its values; raise FilterError."""
    out = []
    for f in filters:
        info = schema.get(f.field)
        if info is None and not schema.present:
            raise FilterError(
                "this index has no frontmatter schema (built by an older mdvdb): "
                "run `mdvdb ingest` to add it"
            )
        if info is None:
            known = ", ".join(schema.field_names()) or "(none: no file has frontmatter)"
            raise FilterError(f"unknown field {f.field!r} in filter {str(f)!r}; known: {known}")
        if f.op in RANGES and info.type not in ("number", "date"):
            raise FilterError(
                f"filter {str(f)!r}: {f.op!r} needs a number or date field; "
                f"{f.field!r} is {info.type}"
            )
        if f.op in ("=", "!=") and info.type == "object":
            raise FilterError(
                f"filter {str(f)!r}: {f.field!r} holds nested values; "
                f"only {f.field}? and !{f.field} apply"
            )
        bare = f.op in ("exists", "missing")
        values = () if bare else tuple(_typed(f, info, v) for v in f.values)
        out.append(TypedFilter(f, info, values))
    return out


def _typed(f: Filter, info: FieldInfo, value: Any) -> Any:
    kind = info.type
    if kind == "number":
        if isinstance(value, bool):
            raise FilterError(f"filter {str(f)!r}: {f.field!r} is a number field")
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            raise FilterError(
                f"filter {str(f)!r}: {f.field!r} is a number field; {value!r} is not a number"
            ) from None
    if kind == "date":
        moment = frontmatter_date(value)
        if moment is None:
            raise FilterError(
                f"filter {str(f)!r}: {f.field!r} is a date field; "
                f"{value!r} is not an ISO date like 2024-01-31"
            )
        return moment
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1"):
            return True
        if text in ("false", "no", "0"):
            return False
        raise FilterError(f"filter {str(f)!r}: {f.field!r} is a boolean field; use true or false")
    text = frontmatter_text(value)
    return text.lower() if f.ignore_case else text


# -- evaluation ---------------------------------------------------------------------------


def file_mask(
    snapshot: Snapshot, filters: Sequence[Filter], schema: Schema | None = None
) -> np.ndarray | None:
    """One boolean per file, True where every filter holds; None when there are none."""
    if not filters:
        return None
    if schema is None:
        from query.schema import load_schema

        schema = load_schema(snapshot)
    files = snapshot.table("files")
    mask = np.ones(files.num_rows, dtype=bool)
    tag_facets = [f for f in filters if f.inline_tags]
    for f in tag_facets:
        mask &= _tag_mask(files, f, schema)
    for typed in resolve([f for f in filters if not f.inline_tags], schema):
        mask &= _evaluate(files, typed)
    return mask


def _tag_mask(files, f: Filter, schema: Schema) -> np.ndarray:
    """Files with the tag in their frontmatter field (if some file has it) or inline."""
    values = tuple(frontmatter_text(v).lower() for v in f.values)
    inline = _list_contains(index_format.arrow_array(files, "tags"), values, True)
    if schema.get(f.field) is None:
        return inline
    return inline | _evaluate(files, resolve([f], schema)[0])


def _evaluate(files, typed: TypedFilter) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    f, info = typed.filter, typed.info
    n = files.num_rows
    if info.column is None or info.column not in files.column_names:
        # Declared in the overlay but in no file: nothing has it, everything misses it.
        return np.full(n, f.op == "missing")
    column = index_format.arrow_array(files, info.column)
    present = _numpy(pc.is_valid(column))
    if f.op == "exists":
        return present
    if f.op == "missing":
        return ~present
    if f.op in RANGES:
        scalar = pa.scalar(typed.values[0], column.type)
        compare = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
        return _numpy(compare[f.op](column, scalar))
    if pa.types.is_list(column.type):
        matched = _list_contains(column, typed.values, f.ignore_case)
    else:
        if f.ignore_case and pa.types.is_string(column.type):
            column = pc.utf8_lower(column)
        matched = _numpy(pc.is_in(column, value_set=pa.array(typed.values, column.type)))
    return matched if f.op == "=" else present & ~matched


def _list_contains(column, values: tuple[Any, ...], ignore_case: bool) -> np.ndarray:
    """Files whose list holds any of `values`: match the flat items, scatter to parents."""
    import pyarrow as pa
    import pyarrow.compute as pc

    flat = pc.list_flatten(column)
    if ignore_case:
        flat = pc.utf8_lower(flat)
    hits = _numpy(pc.is_in(flat, value_set=pa.array(values, pa.string())))
    parents = pc.list_parent_indices(column).to_numpy()
    mask = np.zeros(len(column), dtype=bool)
    mask[parents[hits]] = True
    return mask


def _numpy(booleans) -> np.ndarray:
    """An Arrow boolean result as NumPy, null counted as False."""
    import pyarrow.compute as pc

    return np.asarray(pc.fill_null(booleans, False).to_numpy(zero_copy_only=False), dtype=bool)


# -- listing ------------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class FileMatch:
    """A file that passes the filters (the no-query answer)."""

    path: str
    title: str
    file_id: int
    metadata: dict[str, Any]
    id: str = ""  # the document id (kernel/doc_ids.py)
    source: str | None = None  # its named source (MDVDB_SOURCES), when the project names them

    def to_json(self) -> dict[str, Any]:
        data = {"path": self.path, "title": self.title, "metadata": self.metadata, "id": self.id}
        if self.source is not None:
            data["source"] = self.source
        return data


def matching_files(
    index: Reader,
    filters: Sequence[Filter],
    limit: int | None = None,
    within: np.ndarray | None = None,
) -> tuple[list[FileMatch], int]:
    """Files passing every filter (and `within`, one boolean per file), in path order, at
    most `limit`; and how many there are."""
    import json

    snap = index.snapshot
    files = snap.table("files")
    mask = file_mask(snap, filters)
    if within is not None:
        mask = within if mask is None else mask & within
    ids = np.arange(files.num_rows) if mask is None else np.flatnonzero(mask)
    total = int(ids.shape[0])
    chosen = ids if limit is None else ids[:limit]
    from kernel import doc_ids, index_format

    rows = files.select(["path", "title", "frontmatter"]).take(chosen).to_pylist()
    long_ids = snap.meta.get(index_format.DOC_IDS_META_KEY)
    return [
        FileMatch(
            r["path"],
            r["title"],
            int(i),
            json.loads(r["frontmatter"] or "{}"),
            doc_ids.id_of(r["path"], long_ids),
        )
        for r, i in zip(rows, chosen, strict=True)
    ], total


def candidate_mask(
    index: Reader, filters: Sequence[Filter] = (), mask: np.ndarray | None = None
) -> np.ndarray | None:
    """The search hook: chunks a search may return (files passing `filters`, and `mask` if
    given, one boolean per chunk); None when nothing restricts the search."""
    files = file_mask(index.snapshot, filters)  # a chunk passes when its file does
    chunks = None if files is None else files[index.snapshot.chunk_file_ids]
    if mask is None:
        return chunks
    return mask if chunks is None else chunks & mask


def count_matches(scores: np.ndarray, min_score: float, candidates: np.ndarray | None) -> int:
    """How many candidate chunks reach `min_score` (the N of "top k of N")."""
    passing = scores >= min_score
    if candidates is not None:
        passing &= candidates
    return int(np.count_nonzero(passing))
