"""Facets (`--tag`, `--category`): case-insensitive literal filters over configured fields,
the values to pick from when one matches nothing, and the keyword rule: with a facet and a
query, a page must hold every query word lexically (docs/filters.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from query.filters import Filter

if TYPE_CHECKING:
    from query.snapshot import Reader


@dataclass(frozen=True)
class Facet:
    """A `--tag` / `--category` value and the frontmatter field it reads."""

    flag: str  # the CLI flag, for messages ("--tag")
    field: str  # the frontmatter field behind it (config tag_field / category_field)
    value: str

    def filter(self) -> Filter:
        inline = self.flag == "--tag"  # a note's inline #tags are tags too
        return Filter(self.field, "=", self.value, ignore_case=True, inline_tags=inline)


def facets_of(index: Reader, tag: str | None, category: str | None) -> list[Facet]:
    config = index.config
    out = []
    if tag is not None:
        out.append(Facet("--tag", config.tag_field, tag))
    if category is not None:
        out.append(Facet("--category", config.category_field, category))
    return out


def known_values(index: Reader, field: str) -> list[str]:
    """Every value of `field` in the index (list items one by one), sorted, no duplicates."""
    import pyarrow.compute as pc

    from query.schema import field_strings, load_schema

    snap = index.snapshot
    column = field_strings(snap, load_schema(snap).get(field))
    if column is None:
        return []
    return sorted(v for v in pc.unique(column).to_pylist() if v != "")


def inline_tags(index: Reader) -> list[str]:
    """Every inline #tag of the index (without `#`), sorted, no duplicates."""
    import pyarrow.compute as pc

    from kernel import index_format

    column = index_format.arrow_array(index.snapshot.table("files"), "tags")
    return sorted(v for v in pc.unique(pc.list_flatten(column)).to_pylist() if v)


def unmatched(index: Reader, facet: Facet) -> list[str] | None:
    """None when some file has the facet's value (any case); else the values there are."""
    values = known_values(index, facet.field)
    if facet.filter().inline_tags:
        values = sorted(set(values) | set(inline_tags(index)))
    wanted = facet.value.lower()
    if any(v.lower() == wanted for v in values):
        return None
    return values


def keyword_mask(index: Reader, query: str) -> np.ndarray | None:
    """One boolean per chunk: its page contains every word of `query` (the keyword rule);
    None when the query has no searchable word. Read from the postings: one slice per word."""
    from kernel import text_analysis
    from query.score.lexical import lexical_index

    hashes = np.unique(text_analysis.term_ids(query))
    if len(hashes) == 0:
        return None
    snap = index.snapshot
    file_ids = snap.chunk_file_ids
    n_files = snap.table("files").num_rows
    lexical = lexical_index(index)
    pages = np.ones(n_files, dtype=bool)
    for chunks in lexical.term_chunks(hashes):
        if chunks is None:
            pages[:] = False
            break
        having = np.zeros(n_files, dtype=bool)
        having[file_ids[chunks]] = True
        pages &= having
    return pages[file_ids]
