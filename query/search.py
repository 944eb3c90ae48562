"""Search: score chunks, pick the best, shape them as section-level results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from query import govern as governing
from query.filters import Filter, candidate_mask, count_matches
from query.results import SearchResponse, SearchResult
from query.vector import cosine_scores, top_k

if TYPE_CHECKING:
    from query.index import Index

EXCERPT_CHARS = 300


def excerpt_of(text: str, limit: int = EXCERPT_CHARS) -> str:
    lines = [line for line in text.split("\n") if line.strip()]
    if lines and lines[0].lstrip().startswith("#"):
        lines = lines[1:] or lines
    flat = " ".join(line.strip() for line in lines)
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def semantic_scores(index: Index, query: str) -> np.ndarray:
    snap = index.snapshot
    if snap.vectors.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    vector = index.provider().embed([query])[0]
    return cosine_scores(snap.vectors, vector)


def search(
    index: Index,
    query: str,
    limit: int | None = None,
    min_score: float | None = None,
    mode: str = "semantic",
    explain: bool = False,
    govern: bool | None = None,
    filters: Sequence[Filter] = (),
    mask: np.ndarray | None = None,
) -> SearchResponse:
    """`filters` (metadata) and `mask` (one boolean per chunk) restrict the candidates
    before ranking; `total` in the response counts candidates scoring >= min_score."""
    config = index.config
    limit = config.search_default_limit if limit is None else limit
    min_score = config.search_min_score if min_score is None else min_score
    governed = governing.enabled(index, govern)
    candidates = candidate_mask(index, filters, mask)
    scores = semantic_scores(index, query)
    order = top_k(scores, governing.candidates(limit) if governed else limit, candidates)
    order = [int(i) for i in order if scores[i] >= min_score]
    components = {int(i): {"semantic": float(scores[i])} for i in order} if explain else None
    results = build_results(index, order, scores, components)
    if governed:
        results = governing.rerank(index, results, limit, explain)
    response = SearchResponse(query, mode, results)
    response.total = count_matches(scores, min_score, candidates)
    return response


def build_results(
    index: Index,
    order: list[int],
    scores: np.ndarray,
    components: dict[int, dict[str, float]] | None = None,
) -> list[SearchResult]:
    """Materialise only the chosen rows: the rest of the index is never decoded."""
    snap = index.snapshot
    chunks = snap.table("chunks")
    files = snap.table("files")
    if not order:
        return []
    take = chunks.take(order)
    file_ids = take.column("file_id").to_pylist()
    frows = files.take(file_ids)
    front = frows.column("frontmatter").to_pylist()
    results = []
    for j, chunk_id in enumerate(order):
        meta: dict[str, Any] = json.loads(front[j] or "{}")
        results.append(
            SearchResult(
                path=frows.column("path")[j].as_py(),
                heading=take.column("heading")[j].as_py(),
                heading_path=take.column("heading_path")[j].as_py(),
                start_line=take.column("start_line")[j].as_py(),
                end_line=take.column("end_line")[j].as_py(),
                score=round(float(scores[chunk_id]), 6),
                excerpt=excerpt_of(take.column("text")[j].as_py()),
                metadata=meta,
                title=frows.column("title")[j].as_py(),
                chunk_id=chunk_id,
                file_id=file_ids[j],
                cluster_id=frows.column("cluster_id")[j].as_py(),
                explain=components.get(chunk_id) if components else None,
            )
        )
    return results
