"""One search request as `mdvdb search` defines it (filters, facets, tiers or the filter-only
listing, then the agent shapes), run for the CLI, the MCP server and the library alike: the
outcome is plain data, each front end decides how to show it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from query.facets import Facet, facets_of, keyword_mask, unmatched
from query.filters import FileMatch, Filter, matching_files, parse_filter
from query.scope import Scope, ScopeError, SourceInfo, scope_of
from query.search_options import OPTIONS, SearchRequest

__all__ = ["NoSuchValue", "RequestError", "SearchOutcome", "SearchRequest", "run_request"]

if TYPE_CHECKING:
    from query.rank.tiers import TieredResponse
    from query.shaping import FileHit
    from query.snapshot import Reader


class RequestError(ValueError):
    """A request that cannot run as given (nothing to search for, a limit below 1)."""


@dataclass(eq=False, repr=False)
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
    # why the query has no real evidence of a match here (query.rank.evidence): then
    # `tiers` holds no result and the answer is an honest empty one
    no_evidence: str | None = None
    # the named sources (MDVDB_SOURCES) of the results shown, by name: each result carries
    # its source's name, the response each source's folder and description once
    sources: dict[str, SourceInfo] | None = None
    in_scope: int | None = None  # files inside --path/--source/--since/--before (None: all)

    def sources_json(self) -> dict[str, dict[str, str]] | None:
        if self.sources is None:
            return None
        return {name: info.to_json() for name, info in self.sources.items()}


def run_request(index: Reader, request: SearchRequest) -> SearchOutcome:
    """Run one request on `index`. Call it inside `index.pinned()` when other threads may
    publish a new index meanwhile: a tiered search reads the snapshot more than once."""
    if not (request.query or request.restricted):
        raise RequestError("give a query, a filter, a tag, a category, a path, a source or a date")
    if request.limit is None:  # the one default, declared in kernel.config
        request = replace(request, limit=index.config.search_default_limit)
    for option in OPTIONS:  # the bounds the front ends declare (query.search_options)
        problem = option.bound_problem(getattr(request, option.name))
        if problem is not None:
            raise RequestError(problem)
    if request.min_score is not None and not math.isfinite(request.min_score):
        raise RequestError(f"min_score must be a finite number, got {request.min_score}")
    scope, decay = _scope(index, request), _half_life(index, request)
    facets = facets_of(index, request.tag, request.category)
    filters = [parse_filter(text) for text in request.filters] + [f.filter() for f in facets]
    outcome = SearchOutcome(request, filters + scope.filters)
    if scope.files is not None:
        outcome.in_scope = int(scope.files.sum())
    for facet in facets:
        values = unmatched(index, facet)
        if values is not None:
            outcome.no_such_value = NoSuchValue(facet, values)
            return outcome
    if not request.query:
        outcome.listed, outcome.total = matching_files(
            index, outcome.filters, limit=request.limit, within=scope.files
        )
        _name_sources(index, outcome, outcome.listed)
        return outcome
    _search(index, request, outcome, scope, decay)
    return outcome


def _scope(index: Reader, request: SearchRequest) -> Scope:
    """`--path`, `--source`, `--since`/`--before` as a file mask and date filters."""
    try:
        return scope_of(
            index,
            request.paths,
            request.sources,
            request.since,
            request.before,
            request.date_field,
        )
    except ScopeError as exc:
        raise RequestError(str(exc)) from None


def _half_life(index: Reader, request: SearchRequest) -> float:
    """`--decay`'s half-life in seconds (`off`: 0), else MDVDB_SEARCH_DECAY's."""
    if request.decay is None:
        return index.config.search_decay
    from kernel.dates import DateError, half_life

    try:
        return half_life(request.decay)
    except DateError as exc:
        raise RequestError(f"decay: {exc}") from None


def _name_sources(index: Reader, outcome: SearchOutcome, hits) -> None:
    """Each hit's source name, and the sources shown, when the project names its sources."""
    if not index.config.sources or not hits:
        return
    from query.scope import source_of, source_table

    table = source_table(index)
    shown: dict[str, SourceInfo] = {}
    for hit in hits:  # a path's source: no pass over every file for ten results
        source = source_of(table, hit.path)
        if source is not None:
            hit.source = source.name
            shown.setdefault(source.name, source)
    outcome.sources = shown


def _search(
    index: Reader, request: SearchRequest, outcome: SearchOutcome, scope: Scope, decay: float
) -> None:
    from query.rank.evidence import no_evidence
    from query.rank.tiers import tiered_search

    # With a tag or category, the query's words must be on the page (query.facets).
    mask = keyword_mask(index, request.query or "") if (request.tag or request.category) else None
    if scope.files is not None:
        in_scope = scope.files[index.snapshot.chunk_file_ids]
        mask = in_scope if mask is None else mask & in_scope
    response = tiered_search(
        index,
        request.query or "",
        outcome.filters,
        limit=request.limit,
        mask=mask,
        decay=decay,
        decay_field=request.date_field,
        **request.search_options(),
    )
    # no real evidence of a match: an honest empty answer (query.rank.evidence)
    mode = request.mode or index.config.search_default_mode
    outcome.no_evidence = no_evidence(index, request.query or "", mode)
    if outcome.no_evidence is not None:
        response.results, response.total = [], 0
    least = request.min_confidence  # (query.rank.confidence)
    if least is None:
        least = index.config.search_min_confidence
    if least > 0:
        response.results = [pair for pair in response.results if pair[1].confidence >= least]
    if request.max_tokens is not None:
        from query import shaping  # the agent shapes only when asked: not a plain search's

        kept = shaping.within_budget([hit for _, hit in response.results], request.max_tokens)
        tiers = [tier for tier, _ in response.results][: len(kept)]
        response.results = list(zip(tiers, kept, strict=True))
    outcome.tiers = response
    outcome.total = response.total
    _name_sources(index, outcome, [hit for _, hit in response.results])
    if request.files:
        from query import shaping

        outcome.files = shaping.by_file([hit for _, hit in response.results], request.limit)
