"""The frontmatter schema at pack time, kept up to date by difference: the index carries the
counts inference is made of (`schema_fields`, `schema_values`; docs/architecture.md, "The
index file"), so an edit subtracts the old frontmatter of the files that left or changed and
adds the fresh files'; the typed `fm:` columns of fields whose type did not change are spliced."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pipeline.pack.splice import rows_of, splice
from pipeline.schema import (
    VALUE_LIMIT,
    FieldSchema,
    FieldStats,
    Problem,
    SchemaResult,
    check,
    count,
    fields_of,
    merge,
    problems_table,
    schema_table,
    stored_overlay,
    typed_column,
)

if TYPE_CHECKING:
    from pipeline.plan import Plan
    from pipeline.state import State

FIELDS_TABLE = "schema_fields"
VALUES_TABLE = "schema_values"
FIELDS_SCHEMA = pa.schema(
    [
        ("field", pa.string()),
        ("present", pa.int64()),  # files whose frontmatter has the key, null or not
        ("files", pa.int64()),  # files with a non-null value
        ("type_counts", pa.string()),  # JSON {type: files}
    ]
)
VALUES_SCHEMA = pa.schema([("field", pa.string()), ("value", pa.string()), ("count", pa.int64())])


def _decode(raws: list[str | None]) -> list[dict[str, Any]]:
    return [json.loads(raw) if raw else {} for raw in raws]


class _Frontmatter:
    """The new `files` table's frontmatter, decoded only as far as it is needed."""

    def __init__(self, files: pa.Table):
        self.column = files.column("frontmatter")
        self._all: list[dict[str, Any]] | None = None

    def all(self) -> list[dict[str, Any]]:
        if self._all is None:
            self._all = _decode(self.column.to_pylist())
        return self._all

    def rows(self, rows: np.ndarray) -> list[dict[str, Any]]:
        if self._all is not None:
            return [self._all[i] for i in rows.tolist()]
        return _decode(rows_of(self.column, rows).to_pylist())


# -- the counts as tables ---------------------------------------------------------------


def _sorted_values(table: pa.Table) -> pa.Table:
    return table.sort_by([("field", "ascending"), ("value", "ascending")]).cast(VALUES_SCHEMA)


def fields_table(stats: dict[str, FieldStats]) -> pa.Table:
    names = sorted(stats)
    return pa.Table.from_arrays(
        [
            pa.array(names, pa.string()),
            pa.array([stats[n].present for n in names], pa.int64()),
            pa.array([stats[n].files for n in names], pa.int64()),
            pa.array([json.dumps(dict(stats[n].kinds), sort_keys=True) for n in names]),
        ],
        schema=FIELDS_SCHEMA,
    )


def values_table(stats: dict[str, FieldStats]) -> pa.Table:
    names, values, counts = [], [], []
    for name, entry in stats.items():
        names.extend([name] * len(entry.values))
        values.extend(entry.values)
        counts.extend(entry.values.values())
    return _sorted_values(
        pa.Table.from_arrays(
            [pa.array(names, pa.string()), pa.array(values, pa.string()), pa.array(counts)],
            names=VALUES_SCHEMA.names,
        )
    )


def _previous_stats(previous) -> tuple[dict[str, FieldStats], pa.Table] | None:
    if previous is None:
        return None
    fields, values = previous.tables.get(FIELDS_TABLE), previous.tables.get(VALUES_TABLE)
    if fields is None or values is None:
        return None
    stats = {}
    for name, present, files, kinds in zip(*fields.to_pydict().values(), strict=True):
        stats[name] = FieldStats(present=present, files=files, kinds=Counter(json.loads(kinds)))
    return stats, values


def _updated(
    stats: dict[str, FieldStats], values: pa.Table, gone: list[dict], fresh: list[dict]
) -> pa.Table:
    """Subtract `gone`, add `fresh` (lists of frontmatter) to `stats` in place; the new values
    table."""
    import pyarrow.compute as pc

    plus, minus = count({}, fresh), count({}, gone)
    deltas: Counter = Counter()
    for sign, part in ((1, plus), (-1, minus)):
        for name, change in part.items():
            entry = stats.setdefault(name, FieldStats())
            entry.present += sign * change.present
            entry.files += sign * change.files
            for kind, n in change.kinds.items():
                entry.kinds[kind] += sign * n
            for value, n in change.values.items():
                deltas[(name, value)] += sign * n
    for name in [n for n, e in stats.items() if e.present <= 0]:
        del stats[name]
    for entry in stats.values():
        entry.kinds = Counter({k: n for k, n in entry.kinds.items() if n > 0})
    deltas = {key: n for key, n in deltas.items() if n}
    if deltas:
        change = pa.Table.from_arrays(
            [
                pa.array([k[0] for k in deltas], pa.string()),
                pa.array([k[1] for k in deltas], pa.string()),
                pa.array(list(deltas.values()), pa.int64()),
            ],
            names=VALUES_SCHEMA.names,
        )
        summed = (
            pa.concat_tables([values.cast(VALUES_SCHEMA), change])
            .group_by(["field", "value"])
            .aggregate([("count", "sum")])
        )
        summed = summed.filter(pc.greater(summed["count_sum"], 0))
        values = _sorted_values(
            pa.table(
                {
                    "field": summed["field"],
                    "value": summed["value"],
                    "count": summed["count_sum"],
                }
            )
        )
    _load_listable(stats, values)
    return values


def _load_listable(stats: dict[str, FieldStats], values: pa.Table) -> None:
    import pyarrow.compute as pc

    per_field = {
        row["values"]: row["counts"] for row in pc.value_counts(values.column("field")).to_pylist()
    }
    small = []
    for name, entry in stats.items():
        entry.distinct = per_field.get(name, 0)
        entry.values = Counter()
        if entry.distinct <= VALUE_LIMIT:
            small.append(name)
    if small:
        rows = values.filter(pc.is_in(values.column("field"), pa.array(small)))
        for name, value, n in zip(*rows.to_pydict().values(), strict=True):
            stats[name].values[value] = n


# -- pack's schema step ---------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaUpdate:
    """The schema of the files being packed (inferred, merged with the overlay, checked), its
    typed `fm:` columns, and the counts the next pack updates it from."""

    result: SchemaResult
    typed_names: tuple[str, ...]
    typed_columns: tuple[pa.Array | pa.ChunkedArray, ...]
    tables: dict[str, pa.Table]  # schema, schema_problems, schema_fields, schema_values
    overlay_meta: dict[str, Any]

    def with_typed_columns(self, files: pa.Table) -> pa.Table:
        # Collected, then one table: `append_column` per field copies the column list each
        # time (quadratic in the number of fields).
        if not self.typed_names:
            return files
        return pa.Table.from_arrays(
            [*files.columns, *self.typed_columns],
            names=[*files.column_names, *self.typed_names],
        )


def update(
    plan: Plan, state: State | None, fields: dict[str, FieldSchema] | None = None
) -> SchemaUpdate:
    """The schema of `plan.files`: by difference from the previous index's counts when it has
    them, else inferred over every file; merged with the stored overlay. `fields`: the schema
    to type the columns and check the files by instead (a shard: `global_fields`)."""
    files = plan.files
    overlay = stored_overlay(state)
    decoded = _Frontmatter(files)
    source = plan.file_source
    fresh_rows = np.flatnonzero(source < 0)
    previous = plan.previous
    known = _previous_stats(previous)
    gone_rows = np.zeros(0, dtype=np.int64)
    if known is None:
        stats = count({}, decoded.all())
        values = values_table(stats)
        fresh = decoded.rows(fresh_rows)
    else:
        stats, values = known
        old_files = previous.tables["files"]
        gone = np.ones(old_files.num_rows, dtype=bool)
        gone[source[source >= 0]] = False
        gone_rows = np.flatnonzero(gone)
        fresh = decoded.rows(fresh_rows)
        old = _decode(old_files.column("frontmatter").take(pa.array(gone_rows)).to_pylist())
        values = _updated(stats, values, old, fresh)
    if fields is None:
        fields = merge(fields_of(stats), overlay)
    problems = _problems(files, fields, overlay, previous, decoded, fresh_rows, fresh, gone_rows)
    result = SchemaResult(fields=fields, problems=problems, overlay=overlay)
    names, columns = _typed_columns(files, fields, plan, decoded, fresh)
    tables = {
        "schema": schema_table(result),
        "schema_problems": problems_table(result),
        FIELDS_TABLE: fields_table(stats),
        VALUES_TABLE: values,
    }
    overlay_meta = {"digest": overlay.digest, "error": overlay.error}
    return SchemaUpdate(result, tuple(names), tuple(columns), tables, overlay_meta)


def global_fields(updates: list[SchemaUpdate], state: State | None) -> dict[str, FieldSchema]:
    """The schema over the files of several packs (the shards of one index): their counts
    summed, then inferred and merged with the overlay as one pack's would be."""
    from types import SimpleNamespace

    stats: dict[str, FieldStats] = {}
    parts = []
    for one in updates:
        known = _previous_stats(SimpleNamespace(tables=one.tables))
        if known is None:
            continue
        for name, entry in known[0].items():
            total = stats.setdefault(name, FieldStats())
            total.present += entry.present
            total.files += entry.files
            total.kinds.update(entry.kinds)
        parts.append(known[1].cast(VALUES_SCHEMA))
    if parts:
        summed = pa.concat_tables(parts).group_by(["field", "value"]).aggregate([("count", "sum")])
        values = _sorted_values(
            pa.table(
                {"field": summed["field"], "value": summed["value"], "count": summed["count_sum"]}
            )
        )
        _load_listable(stats, values)
    return merge(fields_of(stats), stored_overlay(state))


def column_types(fields: dict[str, FieldSchema]) -> dict[str, str]:
    """The type of each field that has an `fm:` column: what the typed columns depend on."""
    return {spec.name: spec.type for spec in fields.values() if spec.column is not None}


def _previous_types(previous) -> dict[str, str]:
    table = previous.tables.get("schema") if previous is not None else None
    if table is None:
        return {}
    names, types = table.column("field").to_pylist(), table.column("type").to_pylist()
    return dict(zip(names, types, strict=True))


def _typed_columns(
    files, fields: dict[str, FieldSchema], plan, decoded, fresh
) -> tuple[list[str], list[Any]]:
    """`fm:<field>` for every field some file has: spliced from the previous index when the
    field's type is the same (a kept row's value is then the same), else built over all."""
    previous = plan.previous
    old_files = previous.tables["files"] if previous is not None else None
    old_types = _previous_types(previous)
    names: list[str] = []
    columns: list[Any] = []
    all_rows = None
    for spec in fields.values():
        if spec.column is None:
            continue
        if (
            old_files is not None
            and old_types.get(spec.name) == spec.type
            and spec.column in old_files.column_names
        ):
            new = typed_column(spec.type, [m.get(spec.name) for m in fresh])
            column = splice(old_files.column(spec.column), new, plan.file_source)
        else:
            all_rows = decoded.all() if all_rows is None else all_rows
            column = typed_column(spec.type, [m.get(spec.name) for m in all_rows])
        names.append(spec.column)
        columns.append(column)
    return names, columns


def _declared(fields: dict[str, FieldSchema]) -> list[tuple]:
    return [(f.name, f.type, f.allowed, f.required) for f in fields.values() if f.declared]


def _problems(files, fields, overlay, previous, decoded, fresh_rows, fresh, gone_rows) -> list:
    """The overlay's problems: those of kept files carried over when the declared part of
    the schema is unchanged (a file's problems depend only on it and on that part)."""
    if not overlay.fields:
        return []
    old_schema = previous.tables.get("schema") if previous is not None else None
    old_problems = previous.tables.get("schema_problems") if previous is not None else None
    paths = files.column("path")
    if old_schema is None or old_problems is None or _declared(fields) != _old_declared(old_schema):
        return check(zip(paths.to_pylist(), decoded.all(), strict=True), fields)
    gone_paths = set(previous.tables["files"].column("path").take(pa.array(gone_rows)).to_pylist())
    kept = [
        Problem(p, f, text)
        for p, f, text in zip(*old_problems.to_pydict().values(), strict=True)
        if p not in gone_paths
    ]
    fresh_paths = rows_of(paths, fresh_rows).to_pylist()
    new = check(zip(fresh_paths, fresh, strict=True), fields)
    return sorted(kept + new, key=lambda p: p.path)


def _old_declared(table: pa.Table) -> list[tuple]:
    rows = table.to_pydict()
    return [
        (name, kind, allowed, required)
        for name, kind, allowed, required, declared in zip(
            rows["field"],
            rows["type"],
            rows["allowed"],
            rows["required"],
            rows["declared"],
            strict=True,
        )
        if declared
    ]
