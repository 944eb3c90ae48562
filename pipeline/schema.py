"""The frontmatter schema: inferred from every file's frontmatter (each field's type, `mixed`
when several, file counts, few values with counts), merged with the optional overlay
(`.markdownvdb.schema.yml`), which documents and never rejects a file; each field's type also
decides its typed `fm:<field>` column in the index."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

from kernel import index_format
from kernel.config import SCHEMA_OVERLAY_FILE
from kernel.safe_open import read_own

TYPES = ("string", "number", "boolean", "date", "list", "object", "mixed")
# A field's values are listed (with counts) when it has at most this many distinct values.
VALUE_LIMIT = 100
# Values longer than this are never listed: they are prose, not categories.
VALUE_MAX_CHARS = 80

ISO_DATE = index_format.ISO_DATE
OVERLAY_KEYS = ("description", "type", "allowed", "required")


class OverlayError(ValueError):
    """The overlay file cannot be used; the message names the file and the problem."""


# -- values -------------------------------------------------------------------------------


def value_type(value: Any) -> str | None:
    """The schema type of one frontmatter value; None for null (the field counts as absent)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "date" if ISO_DATE.match(value) else "string"
    if isinstance(value, list):
        return "list"
    return "object"


parse_date = index_format.frontmatter_date
text_of = index_format.frontmatter_text


def _text(value: Any) -> str:
    """`text_of` with the common case (a string) inlined: inference calls it per value."""
    return value if type(value) is str else text_of(value)


def merge_types(types: Iterable[str]) -> str:
    """One type for a field: dates among plain strings are strings; several kinds: mixed."""
    kinds = set(types)
    if kinds == {"date", "string"}:
        return "string"
    if len(kinds) == 1:
        return kinds.pop()
    return "mixed" if kinds else "none"


# -- records ------------------------------------------------------------------------------


@dataclass
class OverlayField:
    description: str | None = None
    type: str | None = None
    allowed: list[str] | None = None
    required: bool = False


@dataclass
class Overlay:
    fields: dict[str, OverlayField] = field(default_factory=dict)
    digest: str | None = None  # sha256 of the file; None when there is no overlay
    error: str | None = None  # the file exists but cannot be used

    @property
    def path(self) -> str:
        return SCHEMA_OVERLAY_FILE


@dataclass
class FieldSchema:
    name: str
    type: str
    inferred_type: str = "none"
    type_counts: dict[str, int] = field(default_factory=dict)
    files: int = 0
    distinct: int = 0
    values: list[tuple[str, int]] | None = None
    description: str | None = None
    allowed: list[str] | None = None
    required: bool = False
    declared: bool = False

    @property
    def column(self) -> str | None:
        if self.files == 0:
            return None
        return index_format.FRONTMATTER_COLUMN_PREFIX + self.name


@dataclass
class Problem:
    path: str
    field: str
    problem: str


@dataclass
class SchemaResult:
    fields: dict[str, FieldSchema]
    problems: list[Problem]
    overlay: Overlay


# -- inference ----------------------------------------------------------------------------


@dataclass
class FieldStats:
    """What inference knows of one field, kept so that an edit only subtracts the old
    frontmatter of the files it changed and adds their new one."""

    present: int = 0  # files whose frontmatter has the key, null or not
    files: int = 0  # files with a non-null value
    kinds: Counter = field(default_factory=Counter)  # type -> files
    values: Counter = field(default_factory=Counter)  # value text -> files (lists: elements)
    # Distinct values when `values` holds only some of them (an incremental pack loads the
    # values of low-cardinality fields alone); None: `values` is complete.
    distinct: int | None = None

    @property
    def distinct_values(self) -> int:
        return len(self.values) if self.distinct is None else self.distinct


def count(stats: dict[str, FieldStats], metadatas: Iterable[dict[str, Any]]):
    """Add the frontmatter of some files to `stats` (and return it)."""
    for metadata in metadatas:
        for name, value in metadata.items():
            entry = stats.get(name)
            if entry is None:
                entry = stats[name] = FieldStats()
            entry.present += 1
            kind = value_type(value)
            if kind is None:
                continue
            entry.kinds[kind] += 1
            entry.files += 1
            if kind == "list":
                entry.values.update({_text(v) for v in value if v is not None})
            else:
                entry.values[_text(value)] += 1
    return stats


def fields_of(stats: dict[str, FieldStats]) -> dict[str, FieldSchema]:
    """The inferred schema of the counted files, in the order of `stats`."""
    out = {}
    for name, entry in stats.items():
        counts = entry.values
        inferred = merge_types(entry.kinds)
        listable = (
            inferred not in ("object", "none")
            and entry.distinct_values <= VALUE_LIMIT
            and all(len(v) <= VALUE_MAX_CHARS for v in counts)
        )
        values = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if listable else None
        out[name] = FieldSchema(
            name=name,
            type=inferred,
            inferred_type=inferred,
            type_counts=dict(entry.kinds),
            files=entry.files,
            distinct=entry.distinct_values,
            values=values,
        )
    return out


# -- overlay ------------------------------------------------------------------------------


def load_overlay(root: Path) -> Overlay:
    """Read the overlay; a broken one gives an Overlay with `error` set and no fields."""
    path = root / SCHEMA_OVERLAY_FILE
    try:
        raw = read_own(path)  # never through a link, never a FIFO, at most 1 MiB
    except OSError as exc:
        return Overlay(error=f"{SCHEMA_OVERLAY_FILE}: cannot read ({exc.strerror or exc})")
    if raw is None:
        return Overlay()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        return Overlay(fields=parse_overlay(raw), digest=digest)
    except OverlayError as exc:
        return Overlay(digest=digest, error=f"{SCHEMA_OVERLAY_FILE}: {exc}")


def overlay_digest(root: Path) -> str | None:
    """What the overlay on disk is, for doit's up-to-date check: its SHA-256, None when
    absent, or why it cannot be read (the schema stage then runs and reports it)."""
    try:
        raw = read_own(root / SCHEMA_OVERLAY_FILE)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return None if raw is None else hashlib.sha256(raw).hexdigest()


def parse_overlay(raw: bytes) -> dict[str, OverlayField]:
    """`fields: {name: {description, type, allowed, required}}`; raises OverlayError."""
    import yaml

    from pipeline.parse import YamlBoundError, load_yaml

    try:
        data = load_yaml(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise OverlayError("not valid UTF-8") from None
    except YamlBoundError as exc:
        raise OverlayError(f"not read: {exc}") from None
    except (ValueError, TypeError) as exc:  # a value YAML cannot build (a 5,000-digit int)
        first = str(exc).split(";")[0].splitlines()[0]
        raise OverlayError(f"not read: {first}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise OverlayError(f"invalid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("fields", {}), dict):
        raise OverlayError("expected a mapping with a `fields:` mapping of field names")
    unknown = sorted(set(map(str, data)) - {"fields"})  # keys may be numbers, or None
    if unknown:
        raise OverlayError(f"unknown top-level key {unknown[0]!r} (only `fields:` is read)")
    out = {}
    for name, spec in (data.get("fields") or {}).items():
        out[str(name)] = _overlay_field(str(name), spec)
    return out


def _overlay_field(name: str, spec: Any) -> OverlayField:
    if spec is None:
        return OverlayField()
    if isinstance(spec, str):
        return OverlayField(description=spec)
    if not isinstance(spec, dict):
        raise OverlayError(f"field {name!r}: expected a mapping of {', '.join(OVERLAY_KEYS)}")
    unknown = sorted(set(map(str, spec)) - set(OVERLAY_KEYS))
    if unknown:
        raise OverlayError(
            f"field {name!r}: unknown key {unknown[0]!r} (known: {', '.join(OVERLAY_KEYS)})"
        )
    kind = spec.get("type")
    if kind is not None and kind not in TYPES:
        raise OverlayError(f"field {name!r}: type {kind!r} is not one of {', '.join(TYPES)}")
    allowed = spec.get("allowed")
    if allowed is not None and not isinstance(allowed, list):
        raise OverlayError(f"field {name!r}: `allowed` must be a list")
    required = spec.get("required", False)
    if not isinstance(required, bool):
        raise OverlayError(f"field {name!r}: `required` must be true or false")
    description = spec.get("description")
    return OverlayField(
        description=None if description is None else str(description),
        type=kind,
        allowed=None if allowed is None else [text_of(v) for v in allowed],
        required=required,
    )


def merge(inferred: dict[str, FieldSchema], overlay: Overlay) -> dict[str, FieldSchema]:
    """Overlay fields first, in their order, then the rest by how many files have them."""
    merged: dict[str, FieldSchema] = {}
    for name, spec in overlay.fields.items():
        base = inferred.get(name) or FieldSchema(name=name, type="none")
        base.declared = True
        base.description = spec.description
        base.allowed = spec.allowed
        base.required = spec.required
        if spec.type is not None:
            base.type = spec.type
        merged[name] = base
    rest = sorted(
        (f for n, f in inferred.items() if n not in merged), key=lambda f: (-f.files, f.name)
    )
    merged.update((f.name, f) for f in rest)
    return merged


# -- checking against the overlay ---------------------------------------------------------


def _fits(kind: str, value: Any) -> bool:
    found = value_type(value)
    if kind == "mixed":
        return True
    if kind == "string":
        return found in ("string", "date")
    return found == kind


def check(rows: Iterable[tuple[str, dict[str, Any]]], fields: dict[str, FieldSchema]):
    """Problems of each file against the declared parts of the schema, in path order."""
    declared = [f for f in fields.values() if f.declared]
    problems = []
    for path, metadata in rows:
        for spec in declared:
            value = metadata.get(spec.name)
            if value is None:
                if spec.required:
                    problems.append(Problem(path, spec.name, "required field is missing"))
                continue
            # An undeclared type is the inferred one, which every value fits by construction.
            if spec.type != "none" and not _fits(spec.type, value):
                problems.append(
                    Problem(
                        path,
                        spec.name,
                        f"expected {spec.type}, found {value_type(value)} {_short(text_of(value))}",
                    )
                )
                continue
            if spec.allowed is not None:
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if text_of(item) not in spec.allowed:
                        problems.append(
                            Problem(
                                path,
                                spec.name,
                                f"value {_short(text_of(item))} is not one of: "
                                + ", ".join(spec.allowed),
                            )
                        )
    return problems


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


# -- the stage: the overlay, kept for pack's schema step ----------------------------------


OVERLAY_STATE_KEY = "schema_overlay"


def stage(root: Path, state: Any) -> Overlay:
    """The schema stage: read the overlay and keep it in the run's state for pack."""
    overlay = load_overlay(root)
    state.set_value(OVERLAY_STATE_KEY, asdict(overlay))
    return overlay


def stored_overlay(state: Any) -> Overlay:
    data = state.get_value(OVERLAY_STATE_KEY) if state is not None else None
    if not data:
        return Overlay()
    return Overlay(
        fields={k: OverlayField(**v) for k, v in data["fields"].items()},
        digest=data["digest"],
        error=data["error"],
    )


# -- typed columns and tables for pack ----------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | str):
        try:
            number = float(value)
        except (ValueError, OverflowError):  # not a number, or an int beyond float range
            return None
        return number if math.isfinite(number) else None
    return None


def _boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _string(value: Any) -> str | None:
    if type(value) is str:
        return value
    if value is None or isinstance(value, dict | list):
        return None
    return text_of(value)


def _texts(value: Any) -> list[str] | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    return [_text(v) for v in items if v is not None]


def _object(value: Any) -> str | None:
    return None if value is None else text_of(value)


def typed_column(kind: str, values: list[Any]) -> pa.Array:
    """One typed Arrow column for a field; values that do not fit the type become null."""
    import pyarrow as pa

    if kind == "number":
        return pa.array([_number(v) for v in values], pa.float64())
    if kind == "boolean":
        return pa.array([_boolean(v) for v in values], pa.bool_())
    if kind == "date":
        return pa.array([parse_date(v) for v in values], pa.timestamp("us"))
    if kind == "string":
        return pa.array([_string(v) for v in values], pa.string())
    if kind in ("list", "mixed"):
        return pa.array([_texts(v) for v in values], pa.list_(pa.string()))
    return pa.array([_object(v) for v in values], pa.string())


def schema_table(result: SchemaResult) -> pa.Table:
    import pyarrow as pa

    fields = list(result.fields.values())

    def col(fn, kind):
        return pa.array([fn(f) for f in fields], kind)

    return pa.Table.from_arrays(
        [
            col(lambda f: f.name, pa.string()),
            col(lambda f: f.type, pa.string()),
            col(lambda f: f.inferred_type, pa.string()),
            col(lambda f: json.dumps(f.type_counts, sort_keys=True), pa.string()),
            col(lambda f: f.files, pa.int64()),
            col(lambda f: f.distinct, pa.int64()),
            col(
                lambda f: None if f.values is None else json.dumps(f.values, ensure_ascii=False),
                pa.string(),
            ),
            col(lambda f: f.description, pa.string()),
            col(lambda f: f.allowed, pa.list_(pa.string())),
            col(lambda f: f.required, pa.bool_()),
            col(lambda f: f.declared, pa.bool_()),
            col(lambda f: f.column, pa.string()),
        ],
        schema=index_format.SCHEMA_TABLE_SCHEMA,
    )


def problems_table(result: SchemaResult) -> pa.Table:
    import pyarrow as pa

    problems = result.problems
    return pa.Table.from_arrays(
        [
            pa.array([p.path for p in problems], pa.string()),
            pa.array([p.field for p in problems], pa.string()),
            pa.array([p.problem for p in problems], pa.string()),
        ],
        schema=index_format.SCHEMA_PROBLEMS_SCHEMA,
    )
