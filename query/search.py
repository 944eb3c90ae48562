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
NAME_POOL = 100  # the best sections whose pages are checked for a name match
BATCH_ROWS = 64  # above this many results, gather rows with one `take` per table


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
    from query import fusion

    snap = index.snapshot
    key = (mode, query, fusion.current())
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
        from query.fusion import best, hybrid

        lexical = lexical_index(index)
        bm25 = lexical.scores(query)
        vectors = index.snapshot.vectors
        if vectors.shape[0] == 0:
            empty = np.zeros(0, dtype=np.float32)
            return empty, {"_candidates": empty > 0}
        from query.fusion_params import params_for

        params = params_for(index)  # the defaults, as the index's model calls for
        page = None
        if params.page_weight > 0:
            by_file = lexical.page_scores(query)
            page = by_file[index.snapshot.chunk_file_ids] if by_file is not None else None
        fused, cosine = hybrid(
            lexical, vectors, query_vector(index, query), bm25, params, page=page
        )
        parts = {"lexical": fused.lexical, "semantic": fused.semantic}
        if fused.page is not None:
            parts["page"] = fused.page
        parts.update(fused=fused.scores, bm25=bm25, cosine=cosine)
        if page is not None:
            parts["page_bm25"] = page
        scores = fused.scores
        if params.name_weight > 0:
            from query.tiers import name_files

            chunk_files = index.snapshot.chunk_file_ids
            pool = np.unique(chunk_files[best(fused.scores, NAME_POOL)])
            named = np.zeros(int(chunk_files[-1]) + 1 if len(chunk_files) else 0, dtype=bool)
            named[pool[name_files(index.snapshot, query, pool)]] = True
            if named.any():
                part = np.float32(params.name_weight) * named[chunk_files]
                scores = scores + part
                parts = {"name": part.astype(np.float32), **parts, "fused": scores}
        return scores, {**parts, "_candidates": scores > 0}
    raise QueryError(f"unknown search mode {mode!r}: use semantic, lexical or hybrid")


def build_results(
    index: Index,
    order: list[int],
    scores: np.ndarray,
    components: dict[int, dict[str, float]] | None = None,
) -> list[SearchResult]:
    """Materialise only the chosen rows: the rest of the index is never decoded. A few rows
    go row by row through the columns, not `Table.take`, which imports pyarrow.compute (~30 ms
    cold); many rows (`--files -n 100` reads 400) are one `take` per table, ~8x faster."""
    snap = index.snapshot
    if not order:
        return []
    chunks = snap.table("chunks")
    files = snap.table("files")
    names = ("file_id", "heading", "heading_path", "text", "start_line", "end_line")
    if len(order) > BATCH_ROWS:
        import pyarrow as pa

        rows = chunks.select(list(names)).take(pa.array(order, pa.int64())).to_pydict()
        file_ids = sorted(set(rows["file_id"]))
        picked = files.select(["path", "frontmatter", "title", "cluster_id"])
        picked = picked.take(pa.array(file_ids, pa.int64())).to_pydict()
        fdata = {fid: {name: picked[name][i] for name in picked} for i, fid in enumerate(file_ids)}
        cdata = [{name: rows[name][i] for name in names} for i in range(len(order))]
    else:
        ccol = {name: chunks.column(name) for name in names}
        fcol = {name: files.column(name) for name in ("path", "frontmatter", "title", "cluster_id")}
        cdata = [{name: ccol[name][i].as_py() for name in names} for i in order]
        fdata = {
            fid: {name: fcol[name][fid].as_py() for name in fcol}
            for fid in {c["file_id"] for c in cdata}
        }
    meta: dict[int, dict[str, Any]] = {}
    results = []
    for chunk_id, chunk in zip(order, cdata, strict=True):
        file_id = chunk["file_id"]
        info = fdata[file_id]
        if file_id not in meta:
            meta[file_id] = json.loads(info["frontmatter"] or "{}")
        results.append(
            SearchResult(
                path=info["path"],
                heading=chunk["heading"],
                heading_path=chunk["heading_path"],
                start_line=chunk["start_line"],
                end_line=chunk["end_line"],
                score=round(float(scores[chunk_id]), 6),
                excerpt=excerpt_of(chunk["text"]),
                metadata=dict(meta[file_id]),
                title=info["title"],
                chunk_id=chunk_id,
                file_id=file_id,
                cluster_id=info["cluster_id"],
                explain=components.get(chunk_id) if components else None,
            )
        )
    return results
