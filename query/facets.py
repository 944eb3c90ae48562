"""Facets (`--tag`, `--category`): case-insensitive literal filters over configured fields,
and the values an agent can pick from when it asked for one no file has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from query.filters import Filter

if TYPE_CHECKING:
    from query.index import Index


@dataclass(frozen=True)
class Facet:
    flag: str  # the CLI flag, for messages ("--tag")
    field: str  # the frontmatter field behind it (config tag_field / category_field)
    value: str

    def filter(self) -> Filter:
        return Filter(self.field, "=", self.value, ignore_case=True)


def facets_of(index: Index, tag: str | None, category: str | None) -> list[Facet]:
    config = index.config
    out = []
    if tag is not None:
        out.append(Facet("--tag", config.tag_field, tag))
    if category is not None:
        out.append(Facet("--category", config.category_field, category))
    return out


def known_values(index: Index, field: str) -> list[str]:
    """Every value of `field` in the index (list items one by one), sorted, no duplicates."""
    import pyarrow.compute as pc

    from query.schema import field_strings, load_schema

    snap = index.snapshot
    column = field_strings(snap, load_schema(snap).get(field))
    if column is None:
        return []
    return sorted(v for v in pc.unique(column).to_pylist() if v != "")


def unmatched(index: Index, facet: Facet) -> list[str] | None:
    """None when some file has the facet's value (any case); else the values there are."""
    values = known_values(index, facet.field)
    wanted = facet.value.lower()
    if any(v.lower() == wanted for v in values):
        return None
    return values
