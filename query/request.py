"""One search request as `mdvdb search` defines it, run by the library and printed by nobody.

Filter strings in the CLI spelling, tag/category facets (with the valid values when a facet
matches nothing), title-first tiers with a query or the files passing the filters without one,
then the agent shapes (`files`: one entry per file; `max_tokens`: a budget on excerpt text).
Every section list is diverse (query.collapse): near-duplicates once with their copies in
`also_in`, at most `per_file` sections of a file, one with `files`.
The MCP server runs searches through this so an agent gets the same answer as a person at the
command line; the outcome is plain data, so each front end only decides how to show it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from query.facets import Facet, facets_of, keyword_mask, unmatched
from query.filters import FileMatch, Filter, matching_files, parse_filter

if TYPE_CHECKING:
    from query.shaping import FileHit
    from query.snapshot import Reader
    from query.tiers import TieredResponse


class RequestError(ValueError):
    """A request that cannot run as given (nothing to search for, a limit below 1)."""


@dataclass
class SearchRequest:
    query: str | None = None
    filters: Sequence[str] = ()  # CLI spelling: field=v, field>=n, field?, !field ...
    tag: str | None = None
    category: str | None = None
    limit: int | None = None  # None: MDVDB_SEARCH_DEFAULT_LIMIT (10)
    files: bool = False  # one entry per file, no excerpts
    max_tokens: int | None = None  # budget on the total excerpt text
    mode: str | None = None
    min_score: float | None = None
    govern: bool | None = None
    explain: bool = False
    cluster: int | None = None
    per_file: int | None = None  # most sections of one file (None: MDVDB_SEARCH_PER_FILE)
    collapse: bool = True  # near-duplicate sections once, the copies in `also_in`

    def search_options(self) -> dict[str, Any]:
        options = {
            "mode": self.mode,
            "min_score": self.min_score,
            "govern": self.govern,
            "cluster": self.cluster,
            # `files`: one section per file, so N results are N distinct files
            "per_file": 1 if self.files else self.per_file,
        }
        options = {k: v for k, v in options.items() if v is not None}
        if self.explain:
            options["explain"] = True
        if not self.collapse:
            options["collapse"] = False
        return options


@dataclass
class NoSuchValue:
    """A facet value no file has: the answer is the values there are, not an empty list."""

    facet: Facet
    values: list[str]

    def message(self, shown: int = 200) -> str:
        if not self.values:
            return (
                f"No matches. Valid values: none (no file has a {self.facet.field!r} field; "
                "`mdvdb schema` lists the fields there are)"
            )
        listed = ", ".join(self.values[:shown])
        if len(self.values) > shown:
            listed += (
                f" ... and {len(self.values) - shown} more (`mdvdb schema {self.facet.field}` "
                "lists them all)"
            )
        return f"No matches. Valid values: {listed}"


@dataclass
class SearchOutcome:
    """Exactly one of `tiers` (a query), `listed` (no query) or `no_such_value` is set;
    `files` accompanies `tiers` when the request asked for files."""

    request: SearchRequest
    filters: list[Filter] = field(default_factory=list)
    tiers: TieredResponse | None = None
    files: list[FileHit] | None = None
    listed: list[FileMatch] | None = None
    total: int = 0  # matches before the limit
    no_such_value: NoSuchValue | None = None


def parse_filters(texts: Sequence[str]) -> list[Filter]:
    """CLI filter strings as Filters; FilterError names the one that cannot be read."""
    return [parse_filter(text) for text in texts]


def run(index: Reader, request: SearchRequest) -> SearchOutcome:
    """Run one request on `index`. Call it inside `index.pinned()` when other threads may
    publish a new index meanwhile: a tiered search reads the snapshot more than once."""
    if not (request.query or request.filters or request.tag or request.category):
        raise RequestError("give a query, a filter, a tag or a category")
    if request.limit is None:  # the one default, declared in mdvdb.config
        request = replace(request, limit=index.config.search_default_limit)
    if request.limit < 1:
        raise RequestError(f"limit must be at least 1, got {request.limit}")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise RequestError(f"max_tokens must be at least 1, got {request.max_tokens}")
    if request.per_file is not None and request.per_file < 0:
        raise RequestError(f"per_file must be 0 (no cap) or more, got {request.per_file}")
    if request.min_score is not None and not math.isfinite(request.min_score):
        raise RequestError(f"min_score must be a finite number, got {request.min_score}")
    facets = facets_of(index, request.tag, request.category)
    filters = parse_filters(request.filters) + [facet.filter() for facet in facets]
    outcome = SearchOutcome(request, filters)
    for facet in facets:
        values = unmatched(index, facet)
        if values is not None:
            outcome.no_such_value = NoSuchValue(facet, values)
            return outcome
    if not request.query:
        outcome.listed, outcome.total = matching_files(index, filters, limit=request.limit)
        return outcome
    _search(index, request, outcome)
    return outcome


def _search(index: Reader, request: SearchRequest, outcome: SearchOutcome) -> None:
    from query import shaping
    from query.tiers import tiered_search

    # With a tag or category, the query's words must be on the page (query.facets).
    keywords = (
        keyword_mask(index, request.query or "") if (request.tag or request.category) else None
    )
    response = tiered_search(
        index,
        request.query or "",
        outcome.filters,
        limit=request.limit,
        mask=keywords,
        **request.search_options(),
    )
    if request.max_tokens is not None:
        kept = shaping.within_budget([hit for _, hit in response.results], request.max_tokens)
        tiers = [tier for tier, _ in response.results][: len(kept)]
        response.results = list(zip(tiers, kept, strict=True))
    outcome.tiers = response
    outcome.total = response.total
    if request.files:
        outcome.files = shaping.by_file([hit for _, hit in response.results], request.limit)
