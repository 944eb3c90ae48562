"""Search: score chunks, pick the best, shape them as section-level results."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel import doc_ids, index_format
from query.filters import Filter, candidate_mask, count_matches
from query.rank import govern as governing
from query.rank.collapse import Diversity
from query.results import SearchResponse, SearchResult
from query.score.vector import PageVectors, dense_scorer, page_vectors_of, row_dots, top_rows
from query.snapshot import QueryError, query_config

if TYPE_CHECKING:
    from query.snapshot import Reader

NAME_POOL = 100  # the best sections whose pages are checked for a name match
BATCH_ROWS = 64  # above this many results, gather rows with one `take` per table


def query_vector(index: Reader, query: str, asked: bool = True) -> np.ndarray:
    """The query's embedding, through the provider's `embed_query` where it has one; `asked`
    False: a text the ranking embeds for itself, not a user's query."""
    provider = index.provider()
    embed_query = getattr(provider, "embed_query", None)
    if embed_query is None:
        return provider.embed([query])[0]
    return embed_query(query, asked=asked)


def page_vectors(index: Reader) -> PageVectors:
    """Once per snapshot: the normalised sums of the pages of several sections."""
    snap = index.snapshot
    found = snap.cache.get("page_vectors")
    if found is None:
        in_shards = getattr(snap, "page_vectors", None)  # each page summed in its shard
        if in_shards is not None:
            found = PageVectors(*in_shards())
        else:
            found = page_vectors_of(snap.chunk_file_ids, snap.vectors)
        snap.cache["page_vectors"] = found
    return found


# A filter keeping at most NARROW_SHARE of the sections is scored on its rows alone; one
# keeping less than BROAD_SHARE, exactly: a first pass probes the rows nearest the query and
# rescores the best of them, which such a filter may not hold.
NARROW_SHARE = 0.125
BROAD_SHARE = 0.9


def semantic_pass(allowed: np.ndarray | None, n: int) -> str:
    """How semantic mode scores under the filter `allowed`: "rows", "exact" or "first"."""
    if allowed is None:
        return "first"
    kept = np.count_nonzero(allowed)
    return "rows" if kept <= NARROW_SHARE * n else "first" if kept >= BROAD_SHARE * n else "exact"


def semantic_scores(index: Reader, query: str, first: tuple | None = None) -> np.ndarray:
    """Every section's cosine to the query; unfiltered, through the int8 first pass where there
    is one (docs/benchmarks.md, "Semantic mode through the first pass"). `first`: (filter,
    depth, floor); a narrow filter's rows alone are scored, the others get -1."""
    snap = index.snapshot
    matrix = snap.vectors
    n = matrix.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    vector = query_vector(index, query)
    allowed = first[0] if first else None
    how = semantic_pass(allowed, n) if isinstance(matrix, np.ndarray) else "exact"
    if how == "rows":
        rows = np.flatnonzero(allowed)
        scores = np.full(n, -1.0, dtype=np.float32)
        scores[rows] = row_dots(matrix[rows], vector)
        return scores
    if how == "exact":
        return row_dots(matrix, vector)
    # every row's int8 estimate: the IVF lists' probe loses some of the nearest rows
    # when no lexical side adds its candidates (docs/benchmarks.md, the same section)
    scorer = dense_scorer(index, lists=False)
    return scorer.mixed(vector, keep=first[1] if first else 0)[1]


def search(
    index: Reader,
    query: str,
    limit: int | None = None,
    min_score: float | None = None,
    mode: str | None = None,
    explain: bool = False,
    govern: bool | None = None,
    filters: Sequence[Filter] = (),
    mask: np.ndarray | None = None,
    cluster: int | None = None,
    per_file: int | None = None,
    collapse: bool = True,
    diversity: Diversity | None = None,
    rate: bool = True,
    decay: float = 0.0,
    decay_field: str | None = None,
) -> SearchResponse:
    """One search. `filters` and `mask` (a boolean per chunk) restrict the candidates; `total`
    counts those scoring >= min_score. `diversity` carries the collapse and `per_file` cap across
    the searches of one response; `rate`: each result's confidence; `decay`: a recency half-life
    in seconds from `decay_field` or the modified time."""
    config = index.config
    _apply_threads(config)
    limit = config.search_default_limit if limit is None else limit
    min_score = config.search_min_score if min_score is None else min_score
    mode = config.search_default_mode if mode is None else mode
    confidence = governing.enabled(index, govern)
    aging = governing.Decay(decay, time.time(), decay_field) if decay > 0 else None
    governed = confidence or aging is not None  # weighed after relevance, on a wider pool
    in_cluster = None
    if cluster is not None:
        from query.clusters import chunk_mask

        in_cluster = chunk_mask(index, cluster)
        mask = in_cluster if mask is None else mask & in_cluster
    allowed = candidate_mask(index, filters, mask)
    if diversity is None:
        diversity = Diversity.of(index, per_file, collapse)
    allowed = diversity.without_boilerplate(allowed)
    # what a sharded index's staged search is asked first (`_diverse_top`): a lexical one
    # answers it with its scores, in one round trip
    first = (allowed, _first_fetch(limit, governed, diversity), min_score)
    scores, parts = _memo_scores(index, query, mode, first)
    matching = parts.get("_candidates")
    candidates = (
        allowed if matching is None else matching if allowed is None else allowed & matching
    )
    # a sharded index's staged search: its shards answer the best rows under the filter
    select = parts.get("_select")
    if select is not None:
        candidates = allowed
    order = _diverse_top(
        scores,
        candidates,
        min_score,
        limit,
        governed,
        diversity,
        per_file,
        select,
        parts.get("_above"),
    )
    components = _components(parts, order) if explain else None
    if governed:
        chosen = (diversity, limit, per_file)
        weighing = (confidence, aging)
        results = _governed(index, order, scores, components, query, mode, chosen, weighing)
    else:
        results = build_results(index, order, scores, components, query, mode)
    diversity.commit([hit.chunk_id for hit in results])
    scope = diversity.scope
    if scope is not None and in_cluster is not None:
        scope = scope & in_cluster
    diversity.attach_copies(index, results, allowed if scope is None else scope)
    if rate:
        from query.rank.confidence import rate as rate_results

        rate_results(index, query, results)
    response = SearchResponse(query, mode, results)
    if select is not None:
        response.total = select.total(allowed, min_score)
    elif matching is not None and min_score <= 0:
        # every candidate scores > 0 >= min_score (`_candidates` is `scores > 0`): the
        # count of the mask is `count_matches`, without two more passes over the rows
        response.total = int(np.count_nonzero(candidates))
    else:
        response.total = count_matches(scores, min_score, candidates)
    return response


def _apply_threads(config) -> None:
    """MDVDB_SEARCH_THREADS, process-wide as the pool is (only speed depends on it, never an
    answer); a search that never splits a pass does not import the pool's module."""
    if (
        "query.score.second_core" in sys.modules
        or config.search_threads != type(config).search_threads
    ):
        from query.score import second_core

        second_core.set_threads(config.search_threads or None)


def _governed(
    index: Reader,
    order: list[int],
    scores: np.ndarray,
    components: dict[int, dict[str, float]] | None,
    query: str,
    mode: str,
    chosen: tuple[Diversity, int, int | None],
    weighing: tuple[bool, governing.Decay | None] = (True, None),
) -> list[SearchResult]:
    """The results of a governed search: the governed order first, then collapse and the per-file
    cap keep the governed best of each group. `chosen`: (diversity, limit, per-file cap)."""
    diversity, limit, per_file = chosen
    weighed = governing.rerank(index, order, scores, *weighing)
    kept = set(diversity.select([hit.chunk_id for hit in weighed], limit, per_file))
    weighed = [hit for hit in weighed if hit.chunk_id in kept]
    results = build_results(index, [hit.chunk_id for hit in weighed], scores, None, query, mode)
    for hit, governed_hit in zip(results, weighed, strict=True):
        hit.score = governed_hit.score
        if components is not None:
            hit.explain = governed_hit.explain(components.get(hit.chunk_id))
    return results


def _components(parts: dict[str, np.ndarray], order: list[int]) -> dict[int, dict[str, float]]:
    """`--explain`'s components of each ranked row (the stub part only where it cut a
    record, not as a 0 on every hit)."""
    return {
        i: {
            name: round(float(v[i]), 6)
            for name, v in parts.items()
            if name[0] != "_" and (name != "stub" or v[i] != 0)
        }
        for i in order
    }


def _diverse_top(
    scores: np.ndarray,
    candidates: np.ndarray | None,
    min_score: float,
    limit: int,
    governed: bool,
    diversity: Diversity,
    per_file: int | None,
    select=None,
    above=None,
) -> list[int]:
    """The best chunk ids without near-duplicates, within the per-file cap, ranking more while
    collapsing leaves too few. `select`: a sharded staged search's selection; `above`: `Above`."""
    wanted = governing.candidates(limit) if governed else limit
    fetch = _first_fetch(limit, governed, diversity)
    while True:
        if select is not None:
            ranked = select(candidates, fetch, min_score)
        else:
            ranked = top_rows(scores, fetch, candidates, above=above)
        ranked = [int(i) for i in ranked if scores[i] >= min_score]
        if governed:  # collapsing waits for the governed order (see `search`)
            return ranked
        order = diversity.select(ranked, wanted, per_file)
        if len(order) >= wanted or len(ranked) < fetch:
            return order
        fetch *= 4


def _first_fetch(limit: int, governed: bool, diversity: Diversity) -> int:
    """How many ranked candidates `_diverse_top` asks for first."""
    return diversity.fetch_size(governing.candidates(limit) if governed else limit)


def _memo_scores(
    index: Reader, query: str, mode: str, first: tuple | None = None
) -> tuple[np.ndarray, dict]:
    """mode_scores, remembering the snapshot's last query: title tiers search it twice with two
    masks. `first`: (filter, depth, floor) of the first selection."""
    from query.score import fusion

    snap = index.snapshot
    how = None
    if mode == "semantic":  # scored for this filter's rows alone: not kept
        how = semantic_pass(first[0] if first else None, snap.chunk_file_ids.shape[0])
        if how == "rows":
            return mode_scores(index, query, mode, first)
    key = (mode, query, fusion.current(), index.config.search_first_pass, how)
    last = snap.cache.get("last_scores")
    if last is None or last[0] != key:
        last = (key, mode_scores(index, query, mode, first))
        snap.cache["last_scores"] = last
    return last[1]


def mode_scores(
    index: Reader, query: str, mode: str, first: tuple | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per-chunk scores for a mode and the components `--explain` shows (hybrid: lexical +
    semantic == fused). Lexical mode never loads the embedding provider."""
    from query.score.lexical import lexical_index

    if mode in ("lexical", "hybrid") and getattr(index.snapshot, "manifest", None) is not None:
        # a sharded index: its shards score in rounds and send their best rows
        from query.rank.shard_search import staged_scores

        found = staged_scores(
            index, query, mode, lambda: query_vector(index, query), NAME_POOL, first
        )
        if found is not None:
            return found
    if mode == "semantic":
        sem = semantic_scores(index, query, first)
        return sem, {"semantic": sem, "fused": sem}
    if mode == "lexical":
        lex = lexical_index(index).scores(query)
        return lex, {"lexical": lex, "fused": lex, "_candidates": lex > 0}
    if mode == "hybrid":
        return _hybrid_scores(index, query)
    raise QueryError(f"unknown search mode {mode!r}: use semantic, lexical or hybrid")


def _hybrid_scores(index: Reader, query: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Hybrid mode in its named steps: BM25F (with the page part where the settings ask),
    the fusion with the cosine, the stub prior, the name part."""
    from query.score.fusion import hybrid
    from query.score.fusion_params import params_for
    from query.score.lexical import section_lexical

    embedding = _embed_meanwhile(index, query)
    vectors = index.snapshot.vectors
    if vectors.shape[0] == 0:
        empty = np.zeros(0, dtype=np.float32)
        return empty, {"_candidates": empty > 0}
    params = params_for(index)  # the defaults, as the index's model calls for
    lexical = section_lexical(index, params.section_k1)
    bm25 = lexical.scores(query)
    page = _page_part(index, lexical, query, params)
    qvec = embedding.result() if embedding else query_vector(index, query)
    pages = page_vectors(index) if params.page_dense_weight > 0 else None
    dense = dense_scorer(index, pages, params.page_dense_weight)
    fused, cosine = hybrid(
        lexical, vectors, qvec, bm25, params, page=page, pages=pages, dense=dense
    )
    feedback = fused.feedback  # (the later steps make new Fused: kept for `--explain`)
    fused, above = _with_stub_prior(index, lexical, fused, params)
    parts = _fused_parts(fused, bm25, cosine, page, feedback)
    scores = fused.scores
    if params.name_weight > 0:
        scores, parts, above = _with_name_part(index, query, fused, parts, above, params)
    parts = {**parts, "_candidates": scores > 0}
    if above is not None:
        parts["_above"] = above
    return scores, parts


def _page_part(index: Reader, lexical, query: str, params):
    """Each chunk's page-level BM25 (its file's), or None when it is off or unknown."""
    if params.page_weight <= 0:
        return None
    by_file = lexical.page_scores(query, params.page_k1, params.page_b)
    if by_file is None:
        return None
    from query.score import fusion

    return fusion.PerFile(by_file, index.snapshot.chunk_file_ids)


def _with_stub_prior(index: Reader, lexical, fused, params):
    """(fused, above): the stub prior applied (query.rank.stubs), and the rows above the stub
    selection's cut, which the name pool and the final ranking select from."""
    if not (params.stub_length > 0 and params.stub_weight > 0):
        return fused, None
    from query.score.fusion import with_stub_prior

    page_length = lexical.page_lengths()
    if page_length is None:
        return fused, None
    from query.rank.stubs import stub_rows

    seen: list = []
    rows = stub_rows(index, fused.scores, page_length, params.stub_length, seen)
    length = page_length[index.snapshot.chunk_file_ids[rows]]
    fused = with_stub_prior(fused, length, params, rows, owned=True)
    # (the cut rows, changed in place, are among the selection's own rows)
    return fused, seen[0] if seen else None


def _fused_parts(fused, bm25, cosine, page, feedback=None) -> dict[str, np.ndarray]:
    """The components `--explain` shows, in order; after RM3, `feedback` is what the expansion
    terms added, never shown as the query's own words."""
    parts = {"lexical": fused.lexical, "semantic": fused.semantic}
    if feedback is not None:
        parts = dict(zip(("lexical", "feedback"), feedback.parts(fused.lexical), strict=True))
        parts["semantic"] = fused.semantic
    for name in ("page", "stub"):
        if getattr(fused, name) is not None:
            parts[name] = getattr(fused, name)
    parts.update(fused=fused.scores, bm25=bm25, cosine=cosine)
    if page is not None:
        parts["page_bm25"] = page
    return parts


def _with_name_part(index: Reader, query: str, fused, parts: dict, above, params):
    """(scores, parts, above) with the name part: a bonus on the sections of the pages the
    query names, among the NAME_POOL best."""
    from query.rank.titles import name_files
    from query.score.vector import distinct

    scores = fused.scores
    chunk_files = index.snapshot.chunk_file_ids
    best = top_rows(fused.scores, NAME_POOL, positive=True, above=above)
    pool = distinct(chunk_files[best])[0]
    named = np.zeros(int(chunk_files[-1]) + 1 if len(chunk_files) else 0, dtype=bool)
    named[pool[name_files(index.snapshot, query, pool)]] = True
    if named.any():
        part, scores, raised = _name_part(index.snapshot, named, scores, params.name_weight)
        parts = {"name": part, **parts, "fused": scores}
        above = above.rising(raised) if above is not None else None
    return scores, parts, above


def _name_part(snap, named: np.ndarray, scores: np.ndarray, weight: float):
    """(the name part, scores + it, the rows it raised): `weight` on each section of a `named`
    file, found by binary search in the file ids (a file's chunks are contiguous, in file order)."""
    chunk_files = snap.chunk_file_ids
    files = np.flatnonzero(named)
    begin = np.searchsorted(chunk_files, files, side="left")
    end = np.searchsorted(chunk_files, files, side="right")
    spans = zip(begin.tolist(), end.tolist(), strict=True)
    rows = np.concatenate([np.arange(a, b) for a, b in spans])
    part = np.zeros(len(chunk_files), dtype=np.float32)
    part[rows] = np.float32(weight)
    scores[rows] += part[rows]  # in place: the caller's fused scores are replaced by these
    return part, scores, rows


def _embed_meanwhile(index: Reader, query: str):
    """The query's embedding begun on the second core while BM25 is scored, for a warm encoder
    (its `embed_query` releases the GIL); else None."""
    provider = index.loaded_provider
    if getattr(provider, "embed_query", None) is None:
        return None
    from query.score.second_core import in_background

    return in_background(provider.embed_query, query)


def build_results(
    index: Reader,
    order: list[int],
    scores: np.ndarray,
    components: dict[int, dict[str, float]] | None = None,
    query: str | None = None,
    mode: str | None = None,
) -> list[SearchResult]:
    """Materialise only the chosen rows: a few row by row (`Table.take` imports pyarrow.compute,
    dear on a cold start), many with one `take` per table."""
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
    sections = [(chunk["text"], chunk["start_line"]) for chunk in cdata]
    shown = _excerpts(index, sections, query, mode, order)
    meta: dict[int, dict[str, Any]] = {}
    long_ids = snap.meta.get(index_format.DOC_IDS_META_KEY)
    results = []
    for chunk_id, chunk, excerpt in zip(order, cdata, shown, strict=True):
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
                excerpt=excerpt.text,
                metadata=dict(meta[file_id]),
                title=info["title"],
                id=doc_ids.id_of(info["path"], long_ids),
                chunk_id=chunk_id,
                file_id=file_id,
                cluster_id=info["cluster_id"],
                explain=components.get(chunk_id) if components else None,
                excerpt_lines=[excerpt.start_line, excerpt.end_line],
            )
        )
    return results


def _excerpts(index: Reader, sections: list[tuple[str, int]], query: str | None, mode, rows):
    """The matched passage of each section; by meaning only with the local static model, whose
    vectors cost microseconds. Sentences and their vectors are kept per snapshot."""
    from query.rank.excerpt import excerpts

    config = query_config(index.snapshot.meta, index.config)  # an upgrade's static stage
    local = config.embedding_provider == "local" and config.embedding_model.startswith("wordllama")
    embed = index.provider().embed if query and mode != "lexical" and local else None
    memo = None
    if embed is not None:
        key = ("excerpt_sentences", config.embedding_model, config.embedding_dimensions)
        memo = index.snapshot.cache.setdefault(key, {})
    return excerpts(sections, query, embed, keys=list(rows), memo=memo)
