"""A staged lexical or hybrid search over shards: the router computes the global numbers,
the shards score their own rows and send back only their best rows.

The one-file search (query.search.mode_scores, query.fusion.hybrid) needs, beyond each
chunk's own values, a few corpus-wide numbers: term and page document frequencies, the
maxima that normalise BM25F, the expansion and the page-level score, the cosine's top and
`pool`-th value, the three best BM25F chunks (Rocchio), the ten best of the first fused
ranking (RM3), the best 128 of the fused one (stub test) and its best 100 (name test). Each
is a maximum or a merge of the shards' best rows, so a query runs in rounds, one parallel
call per shard each (query.shard_stages: the shard keeps its arrays between rounds):

    bm25    terms' idf and norm      -> max, best 3 rows (+ their vectors), page max
    dense   query vector, direction  -> best `pool` + 1 rows of the cosines, a fill
    first   max bm25, cosine floor   -> best 10 rows of the first fused ranking
            (the router reads those chunks' postings and picks the RM3 terms)
    expand  the terms and their idf  -> max of the expansion
    mix     λ and both maxima        -> max of the lexical side
    fuse    every normaliser         -> best 128 rows, which are stub records
    stub    the stub rows            -> best 100 rows (their pages' names are tested)
    final   the named pages, filter  -> best `fetch` rows, their parts, how many pass

Feedback cannot be fused in the shards in one round: RM3 reads the corpus-wide first
ranking, which needs the corpus-wide maxima and cosine floor first; so its candidates come
back in a round of their own, as every other corpus-wide number does. Nothing sent either
way holds a number per chunk: the bytes of a query grow with `fetch` and the query, not with
the shards (tests/test_shard_fanout.py). Equal scores are merged by (score, global row descending),
the order `query.vector.ranked` gives the one-file index, so the answers are the one-file
ones bit for bit. A router over shard servers (`MDVDB_SHARD_SERVERS`) searches this way;
shards in this process's threads, `--mode semantic` and the options this does not cover
(term proximity, term reweighting, agreement feedback) take the per-chunk path of
query.sharded.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from kernel import index_format, text_analysis
from query.lexical import bm25_idf
from query.shard_stages import encode_mask
from query.sharded import call_each, shard_depth

__all__ = ["staged_scores"]


# Shards answered by this process's threads take the per-chunk path: nothing crosses a
# wire, and on 2 cores it was 1.1-1.5x faster than the rounds (20 shards of 6,500 chunks
# and 4 of 1,100, same run; docs/scale-out.md). bench/scaleout.py sets this to time the
# rounds shard by shard.
IN_PROCESS = False


class SessionGone(Exception):
    """A shard dropped the arrays of this query (too many queries at once): start again."""


def staged_scores(
    index, query: str, mode: str, vector, name_pool: int
) -> tuple[np.ndarray, dict] | None:
    """(scores, parts) as `query.search.mode_scores` returns them, with a `_select` part
    that answers the best rows under a filter (`Selection`); None where the per-chunk path
    must answer (not a sharded index, an option this does not cover, shards out of the
    one-file order). `vector(params)`: the query's embedding; `name_pool`: the best rows
    whose pages the name test reads (query.search)."""
    snap = index.snapshot
    if getattr(snap, "manifest", None) is None or not hasattr(snap, "order"):
        return None
    if not snap.servers and not IN_PROCESS:
        return None  # shards in this process's threads: nothing crosses a wire
    if not _in_order(snap) or not len(snap.chunk_file_ids):
        return None
    if mode == "lexical":
        return _lexical(index, query)
    if mode == "hybrid":
        from query.fusion_params import params_for

        params = params_for(index)
        if (
            params.proximity_weight > 0
            or params.term_feedback_weight > 0
            or params.feedback_mode != "fixed"
            or params.feedback_with_page
        ):
            return None
        return _hybrid(index, query, params, vector, name_pool)
    return None


def _in_order(snap) -> bool:
    """Every shard's rows in the one-file order (the pack writes them so): a shard's ties,
    broken by its own rows, are then broken by global rows."""
    found = snap.cache.get("staged_in_order")
    if found is None:
        ids = snap.order.chunk_ids
        found = all(len(i) < 2 or bool((np.diff(i) > 0).all()) for i in ids)
        snap.cache["staged_in_order"] = found
    return found


class Staged:
    """One query's rounds over the shards (a session each shard keys its arrays by)."""

    def __init__(self, snap):
        self.snap = snap
        self.parts = snap.parts
        self.chunk_ids = snap.order.chunk_ids
        self.session = uuid.uuid4().hex

    def round(self, step: str, args: dict | list[dict]) -> list[dict]:
        """One step on every shard at once (one round trip to shard servers)."""
        given = args if isinstance(args, list) else [args] * len(self.parts)
        try:
            return call_each(self.parts, "stage", [(self.session, step, a) for a in given])
        except (ValueError, index_format.IndexFormatError) as exc:
            if "is gone" in str(exc):
                raise SessionGone(str(exc)) from None
            raise

    def merge(self, answers: list[dict], k: int, key: str | None = None, extra: str = ""):
        """The k best (global rows, values[, extra]) of the shards' best rows, by score,
        then global row descending (`query.vector.ranked`)."""
        got = [a[key] if key else a for a in answers]
        got = [(i, g) for i, g in enumerate(got) if g is not None and len(g["rows"])]
        if not got:
            empty = np.zeros(0, np.int64)
            return (empty, np.zeros(0, np.float32)) + ((empty,) if extra else ())
        rows = np.concatenate([self.chunk_ids[i][np.asarray(g["rows"], np.int64)] for i, g in got])
        values = np.concatenate([np.asarray(g["values"]) for i, g in got])
        order = np.lexsort((-rows, -values))[:k]
        if extra:
            flags = np.concatenate([np.asarray(a[extra]) for i, a in got])
            return rows[order], values[order], flags[order]
        return rows[order], values[order]

    def local(self, rows: np.ndarray) -> list[np.ndarray]:
        """Global rows as each shard's local rows."""
        shard_of, local_of = self.snap.vectors.where
        rows = np.asarray(rows, dtype=np.int64)
        owners = shard_of[rows]
        return [local_of[rows[owners == i]].astype(np.int32) for i in range(len(self.parts))]


class Selection:
    """The final round, asked for again per filter and depth: `query.search` calls it for
    the best `fetch` rows under a filter (title tiers and a growing collapse ask again,
    each one round), and it fills their scores and parts into the one-file arrays."""

    def __init__(self, staged: Staged, final: list[dict], restart):
        n = len(staged.snap.chunk_file_ids)
        self.staged = staged
        self.final = final
        self.restart = restart  # runs the rounds again (a shard dropped the session)
        self.scores = np.zeros(n, dtype=np.float32)
        self.parts: dict[str, Any] = {}
        self.totals: dict[tuple, int] = {}

    def __call__(self, allowed: np.ndarray | None, fetch: int, min_score: float) -> list[int]:
        staged = self.staged
        args = [
            {
                **given,
                "mask": None if allowed is None else encode_mask(allowed[ids]),
                "fetch": int(fetch),
                "min_score": float(min_score),
            }
            for given, ids in zip(self.final, staged.chunk_ids, strict=True)
        ]
        try:
            answers = staged.round("final", args)
        except SessionGone:
            self.restart()
            answers = staged.round("final", args)
        n = len(self.scores)
        rows = [staged.chunk_ids[i][np.asarray(a["rows"], np.int64)] for i, a in enumerate(answers)]
        every = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        for name in answers[0]["parts"] if answers else ():
            if name not in self.parts:
                self.parts[name] = np.zeros(n, dtype=np.float32)
            values = np.concatenate([np.asarray(a["parts"][name]) for a in answers])
            self.parts[name][every] = values
        fused = self.parts.get("fused")
        if fused is not None:
            self.scores[every] = fused[every]
        self.totals[(id(allowed), float(min_score))] = sum(int(a["count"]) for a in answers)
        order = np.lexsort((-every, -self.scores[every]))[: int(fetch)]
        return every[order].tolist()

    def total(self, allowed: np.ndarray | None, min_score: float) -> int:
        key = (id(allowed), float(min_score))
        if key not in self.totals:
            self(allowed, 1, min_score)
        return self.totals[key]


def _result(selection: Selection) -> tuple[np.ndarray, dict]:
    parts = selection.parts
    parts["_select"] = selection
    return selection.scores, parts


def _terms(lexical, query: str) -> dict[str, Any]:
    hashes = text_analysis.term_ids(query)
    unique, counts = np.unique(hashes, return_counts=True)
    unique = unique.astype(np.uint64)
    idf = lexical.idf(lexical.document_frequency(unique)) if len(unique) else np.zeros(0)
    return {
        "hashes": unique,
        "weights": counts.astype(np.float32),
        "idf": np.asarray(idf, dtype=np.float32),
        "spec": [float(x) for x in lexical.norm_spec()],
    }


def _lexical(index, query: str):
    from query.lexical import lexical_index

    snap = index.snapshot
    staged = Staged(snap)
    terms = _terms(lexical_index(index), query)

    def rounds() -> None:
        staged.round("bm25", terms)

    rounds()
    final = [{"mode": "lexical"} for _ in staged.parts]
    return _result(Selection(staged, final, rounds))


def _hybrid(index, query: str, params, vector, name_pool: int):
    from query.fusion import LEXICAL_EXACT, _nth_best, for_query
    from query.lexical import lexical_index
    from query.stubs import CANDIDATES
    from query.titles import name_files
    from query.vector import dense_scorer

    snap = index.snapshot
    lexical = lexical_index(index)
    if params.section_k1 > 0 or params.section_b >= 0 or params.section_length_floor:
        floor = params.section_length_floor
        key = ("lexical_rescored", params.section_k1, params.section_b, floor)
        if key not in snap.cache:
            snap.cache[key] = lexical.rescored(
                params.section_k1 or 1.2, params.section_b if params.section_b >= 0 else 0.75, floor
            )
        lexical = snap.cache[key]
    terms = _terms(lexical, query)
    chunk_files = snap.chunk_file_ids
    n_files = int(chunk_files[-1]) + 1
    page = None
    if params.page_weight > 0:
        _, avg = lexical._page_lengths(n_files)
        df = lexical.page_document_frequency(terms["hashes"]).tolist()
        page = {
            "hashes": terms["hashes"],
            "counts": terms["weights"].astype(np.int64),
            "idf": np.asarray([bm25_idf(n_files, d) for d in df], dtype=np.float64),
            "k1": params.page_k1,
            "b": params.page_b,
            "avg": avg,
        }
    params = for_query(query, params)
    qvec = vector(params)
    first_pass = dense_scorer(index).first_pass
    rho = params.page_dense_weight if params.page_dense_weight > 0 else 0.0
    staged = Staged(snap)
    n = len(chunk_files)
    keep = params.pool + 1
    w = float(params.dense_weight)
    final: list[dict] = []

    def rounds() -> None:
        top = params.dense_feedback_chunks if params.dense_feedback_weight else 0
        also = LEXICAL_EXACT if first_pass == "ivf" and _has_lists(snap) else 0
        answers = staged.round("bm25", {**terms, "top": top, "also": also, "page": page})
        max_bm25 = max(a["max"] for a in answers)
        max_page = max(a.get("page_max", 0.0) for a in answers)
        direction = None
        if top:
            rows, _ = staged.merge(answers, top, "top")
            if len(rows):
                held = {}
                for i, a in enumerate(answers):
                    for row, v in zip(
                        staged.chunk_ids[i][np.asarray(a["top"]["rows"], np.int64)].tolist(),
                        a["vectors"],
                        strict=True,
                    ):
                        held[row] = v
                direction = np.stack([held[r] for r in rows.tolist()]).mean(axis=0)
        local_also: list = [None] * len(staged.parts)
        if also:
            local_also = staged.local(staged.merge(answers, also, "also")[0])
        dense = staged.round(
            "dense",
            [
                {
                    "query": qvec,
                    "direction": direction,
                    "beta": float(params.dense_feedback_weight),
                    "keep": keep,
                    "rho": float(rho),
                    "first_pass": first_pass,
                    "depth": shard_depth(len(ids), n, keep),
                    "also": local_also[i],
                }
                for i, ids in enumerate(staged.chunk_ids)
            ],
        )
        cos = np.concatenate([np.asarray(a["cosine"]) for a in dense])
        moved = cos
        if direction is not None:
            moved = np.concatenate([np.asarray(a["moved"]) for a in dense])
        top_c, floor_c = float(cos.max()), _nth_best(cos, params.pool)
        top_m, floor_m = float(moved.max()), _nth_best(moved, params.pool)
        mix: dict[str, Any] = {"feedback": False}
        if params.feedback_weight > 0 and params.feedback_terms > 0:
            answers = staged.round(
                "first",
                {
                    "max": max_bm25,
                    "top": top_c,
                    "floor": floor_c,
                    "w": w,
                    "k": params.feedback_chunks,
                },
            )
            chunks, values = staged.merge(answers, params.feedback_chunks)
            if len(chunks):
                hashes, weights = lexical.feedback_terms(
                    chunks, values, params.feedback_terms, params.feedback_idf
                )
                hashes = np.asarray(hashes, dtype=np.uint64)
                idf = lexical.idf(lexical.document_frequency(hashes)) if len(hashes) else []
                answers = staged.round(
                    "expand",
                    {
                        "hashes": hashes,
                        "weights": np.asarray(weights, dtype=np.float32),
                        "idf": np.asarray(idf, dtype=np.float32),
                        "spec": terms["spec"],
                    },
                )
                lam = np.float32(params.feedback_weight * 1.0)
                mix = {
                    "feedback": True,
                    "lam": float(lam),
                    "max_bm25": max_bm25,
                    "max_expansion": max(a["max"] for a in answers),
                }
        max_lex = max(a["max"] for a in staged.round("mix", mix))
        stub = None
        if params.stub_length > 0 and params.stub_weight > 0:
            stub = {
                "kind": params.stub_kind,
                "length": float(params.stub_length),
                "weight": float(params.stub_weight),
                "candidates": CANDIDATES,
            }
        answers = staged.round(
            "fuse",
            {
                "max": max_lex,
                "top": top_m,
                "floor": floor_m,
                "w": w,
                "page_weight": float(params.page_weight) if page is not None else 0.0,
                "max_page": max_page,
                "stub": stub,
            },
        )
        if stub is not None and stub["kind"] != "any":
            rows, _, short = staged.merge(answers, CANDIDATES, extra="short")
            stub_rows = staged.local(_stub_records(snap, rows[short.astype(bool)], stub["kind"]))
            stub_args = [{**stub, "rows": r} for r in stub_rows]
        else:
            stub_args = [stub] * len(staged.parts)
        names = name_pool if params.name_weight > 0 else 0
        answers = staged.round("stub", [{"stub": s, "names": names} for s in stub_args])
        named = None
        if names:
            rows, _ = staged.merge(answers, name_pool)
            pool = np.unique(chunk_files[rows], return_counts=True)[0]
            found = pool[name_files(snap, query, pool)]
            if len(found):
                named = _local_files(snap, found)
        final[:] = [
            {
                "mode": "hybrid",
                "named": None if named is None else named[i],
                "name_weight": float(params.name_weight),
            }
            for i in range(len(staged.parts))
        ]

    rounds()
    return _result(Selection(staged, final, rounds))


def _has_lists(snap) -> bool:
    """Some shard has IVF lists (only those score the lexical side's best rows apart)."""
    from kernel import ivf

    return any(isinstance(f.meta.get(ivf.META_KEY), dict) for f in snap.files)


def _stub_records(snap, rows: np.ndarray, kind: str) -> np.ndarray:
    """Which of these short pages' sections pass the stub test (`query.stubs.stub_rows`:
    the text is read here, once per section and snapshot)."""
    from query.stubs import TESTS

    test = TESTS[kind]
    known: dict[int, bool] = snap.cache.setdefault(("stub_sections", kind), {})
    missing = [i for i in rows.tolist() if i not in known]
    if missing:
        texts = snap.table("chunks").column("text")
        for i in missing:
            known[i] = test(texts[i].as_py() or "")
    return rows[np.fromiter((known[i] for i in rows.tolist()), dtype=bool, count=len(rows))]


def _local_files(snap, files: np.ndarray) -> list[np.ndarray]:
    """Global file ids as each shard's local ones."""
    found = snap.cache.get("staged_file_where")
    if found is None:
        n = sum(len(ids) for ids in snap.order.file_ids)
        shard_of = np.empty(n, dtype=np.int32)
        local_of = np.empty(n, dtype=np.int64)
        for shard, ids in enumerate(snap.order.file_ids):
            shard_of[ids] = shard
            local_of[ids] = np.arange(len(ids))
        found = snap.cache["staged_file_where"] = (shard_of, local_of)
    shard_of, local_of = found
    files = np.asarray(files, dtype=np.int64)
    return [local_of[files[shard_of[files] == i]].astype(np.int32) for i in range(len(snap.parts))]
