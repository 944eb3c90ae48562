"""Search: score chunks, pick the best, shape them as section-level results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from query import govern as governing
from query.filters import Filter, candidate_mask, count_matches
from query.index import QueryError
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


def query_vector(index: Index, query: str) -> np.ndarray:
    return index.provider().embed([query])[0]


def semantic_scores(index: Index, query: str) -> np.ndarray:
    snap = index.snapshot
    if snap.vectors.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    return cosine_scores(snap.vectors, query_vector(index, query))


def search(
    index: Index,
    query: str,
    limit: int | None = None,
    min_score: float | None = None,
    mode: str | None = None,
    explain: bool = False,
    govern: bool | None = None,
    filters: Sequence[Filter] = (),
    mask: np.ndarray | None = None,
    cluster: int | None = None,
) -> SearchResponse:
    """`filters` (metadata) and `mask` (one boolean per chunk) restrict the candidates
    before ranking; `total` in the response counts candidates scoring >= min_score."""
    config = index.config
    limit = config.search_default_limit if limit is None else limit
    min_score = config.search_min_score if min_score is None else min_score
    mode = config.search_default_mode if mode is None else mode
    governed = governing.enabled(index, govern)
    if cluster is not None:
        from query.clusters import chunk_mask

        in_cluster = chunk_mask(index, cluster)
        mask = in_cluster if mask is None else mask & in_cluster
    allowed = candidate_mask(index, filters, mask)
    scores, parts = _memo_scores(index, query, mode)
    matching = parts.get("_candidates")
    candidates = (
        allowed if matching is None else matching if allowed is None else allowed & matching
    )
    order = top_k(scores, governing.candidates(limit) if governed else limit, candidates)
    order = [int(i) for i in order if scores[i] >= min_score]
    components = (
        {
            i: {name: round(float(v[i]), 6) for name, v in parts.items() if name[0] != "_"}
            for i in order
        }
        if explain
        else None
    )
    results = build_results(index, order, scores, components)
    if governed:
        results = governing.rerank(index, results, limit, explain)
    response = SearchResponse(query, mode, results)
    response.total = count_matches(scores, min_score, candidates)
    return response


def _memo_scores(index: Index, query: str, mode: str) -> tuple[np.ndarray, dict]:
    """mode_scores, remembering the last query of this snapshot: title-first tiers search
    the same query twice (title documents, then the rest) with different masks."""
    snap = index.snapshot
    key = (mode, query)
    last = snap.cache.get("last_scores")
    if last is None or last[0] != key:
        last = (key, mode_scores(index, query, mode))
        snap.cache["last_scores"] = last
    return last[1]


def mode_scores(index: Index, query: str, mode: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per-chunk scores for a mode, and the named components `--explain` shows. In hybrid
    mode `lexical + semantic == fused`; `bm25` and `cosine` are the raw inputs. Lexical mode
    never loads the embedding provider."""
    from query.lexical import lexical_index

    if mode == "semantic":
        sem = semantic_scores(index, query)
        return sem, {"semantic": sem, "fused": sem}
    if mode == "lexical":
        lex = lexical_index(index).scores(query)
        return lex, {"lexical": lex, "fused": lex, "_candidates": lex > 0}
    if mode == "hybrid":
        from query.fusion import hybrid

        lexical = lexical_index(index)
        bm25 = lexical.scores(query)
        vectors = index.snapshot.vectors
        if vectors.shape[0] == 0:
            empty = np.zeros(0, dtype=np.float32)
            return empty, {"_candidates": empty > 0}
        from query.fusion_params import params_for

        params = params_for(index)
        fused, cosine = hybrid(lexical, vectors, query_vector(index, query), bm25, params)
        return fused.scores, {
            "lexical": fused.lexical,
            "semantic": fused.semantic,
            "fused": fused.scores,
            "bm25": bm25,
            "cosine": cosine,
            "_candidates": fused.scores > 0,
        }
    raise QueryError(f"unknown search mode {mode!r}: use semantic, lexical or hybrid")


def build_results(
    index: Index,
    order: list[int],
    scores: np.ndarray,
    components: dict[int, dict[str, float]] | None = None,
) -> list[SearchResult]:
    """Materialise only the chosen rows: the rest of the index is never decoded. Row by row
    through the columns, not `Table.take`, which imports pyarrow.compute (~30 ms cold)."""
    snap = index.snapshot
    if not order:
        return []
    chunks = snap.table("chunks")
    files = snap.table("files")
    ccol = {name: chunks.column(name) for name in ("file_id", "heading", "heading_path", "text")}
    ccol.update({name: chunks.column(name) for name in ("start_line", "end_line")})
    fcol = {name: files.column(name) for name in ("path", "frontmatter", "title", "cluster_id")}
    results = []
    for chunk_id in order:
        file_id = ccol["file_id"][chunk_id].as_py()
        meta: dict[str, Any] = json.loads(fcol["frontmatter"][file_id].as_py() or "{}")
        results.append(
            SearchResult(
                path=fcol["path"][file_id].as_py(),
                heading=ccol["heading"][chunk_id].as_py(),
                heading_path=ccol["heading_path"][chunk_id].as_py(),
                start_line=ccol["start_line"][chunk_id].as_py(),
                end_line=ccol["end_line"][chunk_id].as_py(),
                score=round(float(scores[chunk_id]), 6),
                excerpt=excerpt_of(ccol["text"][chunk_id].as_py()),
                metadata=meta,
                title=fcol["title"][file_id].as_py(),
                chunk_id=chunk_id,
                file_id=file_id,
                cluster_id=fcol["cluster_id"][file_id].as_py(),
                explain=components.get(chunk_id) if components else None,
            )
        )
    return results
