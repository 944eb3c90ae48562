"""Title-first tiers: documents whose title or an alias holds every query word come first,
one entry each, then content sections (theirs included). Two masked searches, so an exact
title is never lost below the cap (docs/search-quality.md, "What each mode does")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from query.filters import Filter, candidate_mask
from query.rank.collapse import Diversity
from query.rank.search import search
from query.rank.titles import query_words, title_files
from query.results import SearchResponse

if TYPE_CHECKING:
    from query.results import SearchResult
    from query.snapshot import Reader

__all__ = ["CONTENT", "REPEATED", "TITLE", "TieredResponse", "tiered_search"]

# REPEATED: a boilerplate section (query.rank.collapse), shown once and first when it alone
# holds every word of the query.
TITLE, CONTENT, REPEATED = "title", "content", "repeated"


@dataclass(eq=False, repr=False)
class TieredResponse:
    """Title-tier results, then content results, of one query."""

    query: str
    mode: str
    results: list[tuple[str, SearchResult]] = field(default_factory=list)
    total: int = 0  # title documents + content sections that matched

    @property
    def truncated(self) -> bool:
        return self.total > len(self.results)

    def to_json(self, explain: bool = False) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "results": [{**r.to_json(explain), "tier": tier} for tier, r in self.results],
            "total": self.total,
            "shown": len(self.results),
            "truncated": self.truncated,
        }


def tiered_search(
    index: Reader,
    query: str,
    filters: list[Filter] | tuple[Filter, ...] = (),
    limit: int = 20,
    mask: np.ndarray | None = None,
    *,
    min_score: float | None = None,
    mode: str | None = None,
    explain: bool = False,
    govern: bool | None = None,
    cluster: int | None = None,
    per_file: int | None = None,
    collapse: bool = True,
    decay: float = 0.0,
    decay_field: str | None = None,
) -> TieredResponse:
    """Up to `limit` results: the best section of each title document, then content sections;
    the options are `query.rank.search.search`'s. Both searches read one snapshot."""
    # what every search of the response shares (its confidence is rated once, at the end)
    shown = {"min_score": min_score, "mode": mode, "explain": explain, "govern": govern}
    shown |= {"decay": decay, "decay_field": decay_field, "rate": False}
    with index.pinned():
        snap = index.snapshot
        candidates = candidate_mask(index, filters, mask)
        if candidates is None:
            candidates = np.ones(snap.chunk_file_ids.shape[0], dtype=bool)
        from query.score.fusion import current

        params = current()
        words = query_words(query) if params.title_tiers else []
        titled = title_files(snap, words)[snap.chunk_file_ids]
        title_chunks = int(np.count_nonzero(candidates & titled))
        # One Diversity for both searches: near-duplicates and per-file caps span the response.
        diversity = Diversity.of(index, per_file, collapse, scope=candidates)
        # Most queries match no title: then there is one search, not two. The title search
        # keeps one section per document (a per-file cap of 1).
        wanted = min(limit, title_chunks) if limit else 0
        title = (
            search(
                index,
                query,
                limit=wanted,
                mask=candidates & titled,
                diversity=diversity,
                per_file=1,
                cluster=cluster,
                **shown,
            )
            if wanted
            else SearchResponse(query, "", [], 0)
        )
        first: list[tuple[str, SearchResult]] = []
        seen: set[int] = set()
        for hit in title.results:
            if hit.file_id not in seen:
                seen.add(hit.file_id)
                first.append((TITLE, hit))
        if (title.total or 0) <= len(title.results):
            title_total = len(first)  # the title search saw every passing section
        else:  # more sections passed than were fetched: count the candidate title documents
            # return_counts: a plain np.unique imports numpy.ma (dear on a cold search)
            titled_files = snap.chunk_file_ids[candidates & titled]
            title_total = len(np.unique(titled_files, return_counts=True)[0])
        first = first[:limit]
        # The content tier is every other candidate section, a title document's included; its
        # title hit does not use up the page's per-file cap (unless `--files`: one a file).
        if diversity.per_file != 1:
            diversity.file_counts.clear()
        rest_mask = candidates.copy()
        rest_mask[[hit.chunk_id for _, hit in first]] = False
        content = search(
            index,
            query,
            limit=limit - len(first),
            mask=rest_mask,
            diversity=diversity,
            cluster=cluster,
            **shown,
        )
        rest = [(CONTENT, hit) for hit in content.results]
        repeated = _repeated_block(index, query, candidates, diversity, cluster, shown)
        results = (repeated + first + rest)[:limit] if repeated else first + rest
        from query.rank.confidence import rate

        rate(index, query, [hit for _, hit in results])
        return TieredResponse(
            query=query,
            mode=content.mode,
            results=results,
            total=title_total + (content.total or 0) + len(repeated),
        )


def _repeated_block(
    index: Reader,
    query: str,
    candidates: np.ndarray,
    diversity: Diversity,
    cluster: int | None,
    shown: dict[str, Any],
) -> list[tuple[str, SearchResult]]:
    """The best boilerplate section holding every query word, when no other candidate does;
    else nothing. `shown`: the search's min_score, mode, explain and govern."""
    boilerplate = diversity.boilerplate
    if boilerplate is None:
        return []
    from kernel import text_analysis
    from query.score.lexical import lexical_index

    terms = np.unique(text_analysis.term_ids(query), return_counts=True)[0]
    if not len(terms):
        return []
    having = candidates.copy()
    for chunks in lexical_index(index).term_chunks(terms):
        if chunks is None:
            return []
        keep = np.zeros(len(having), dtype=bool)
        keep[chunks] = True
        having &= keep
    if not having.any() or (having & ~boilerplate).any():
        return []
    alone = Diversity.of(index, collapse=True, scope=candidates)
    alone.boilerplate = None
    found = search(index, query, limit=1, mask=having, diversity=alone, cluster=cluster, **shown)
    return [(REPEATED, hit) for hit in found.results]
