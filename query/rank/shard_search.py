"""A staged lexical or hybrid search over shards: the router computes the corpus-wide numbers
in rounds, each shard scores its rows and sends only its best, ties merged by (score, global
row): the one-file answers (docs/scale-out.md, "What is built", lists the rounds)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import numpy as np

from kernel import index_format, text_analysis
from query.score.lexical import bm25_idf
from query.shards.reader import by_shard, call_each, local_rows, shard_depth, split_postings
from query.shards.stages import encode_mask, first_scores, mixed_lexical

__all__ = ["staged_scores"]


# Shards in this process's threads take the per-chunk path, faster without a network
# (docs/benchmarks.md, "Sharded reads, third round"); tests and bench/scaleout.py set this.
IN_PROCESS = False


def staged_scores(
    index, query: str, mode: str, vector, name_pool: int, first: tuple | None = None
) -> tuple[np.ndarray, dict] | None:
    """(scores, parts) of a sharded index's lexical or hybrid `mode` as `mode_scores` returns
    them, with a `_select` part (`Selection`); None where the per-chunk path of
    query.shards.reader answers. `vector()`: the query's embedding; `first`: the (filter,
    depth, floor) asked first, which a lexical query answers in one round."""
    snap = index.snapshot
    if not snap.route and not IN_PROCESS:
        return None  # shards in this process's threads: nothing crosses a network
    if not _in_order(snap) or not len(snap.chunk_file_ids):
        return None
    if mode == "lexical":
        return _lexical(index, query, first)
    from query.score.fusion_params import params_for

    return _hybrid(index, query, params_for(index), vector, name_pool)


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
        self.history: list[tuple[str, list[dict]]] = []  # the rounds so far, but `final`

    def round(self, step: str, args: dict | list[dict]) -> list[dict]:
        """One step on every shard at once. A shard that lost the query's arrays makes every shard
        rebuild them from the rounds so far: one more round trip, the same answer."""
        given = args if isinstance(args, list) else [args] * len(self.parts)
        try:
            answers = call_each(self.parts, "stage", [(self.session, step, a) for a in given])
        except (ValueError, index_format.IndexFormatError) as exc:
            if "is gone" not in str(exc):
                raise
            replay = [[(done, every[i]) for done, every in self.history] for i in range(len(given))]
            calls = [(self.session, step, a, replay[i]) for i, a in enumerate(given)]
            answers = call_each(self.parts, "stage", calls)
        if step != "final":
            self.history.append((step, given))
        return answers

    def merge(
        self, answers: list[dict], k: int, key: str | None = None, extra: tuple[str, ...] = ()
    ) -> tuple:
        """The k best (global rows, values, *extra) of the shards' best rows, by score then
        global row descending; `extra`: values sent along with the rows."""
        got = [a[key] if key else a for a in answers]
        got = [(i, g) for i, g in enumerate(got) if g is not None and len(g["rows"])]
        if not got:
            empty = np.zeros(0, np.int64)
            return (empty, np.zeros(0, np.float32), *(empty for _ in extra))
        rows = np.concatenate([self.chunk_ids[i][np.asarray(g["rows"], np.int64)] for i, g in got])
        values = np.concatenate([np.asarray(g["values"]) for i, g in got])
        order = np.lexsort((-rows, -values))[:k]
        more = [np.concatenate([np.asarray(g[name]) for _, g in got])[order] for name in extra]
        return (rows[order], values[order], *more)

    def local(self, rows: np.ndarray) -> list[np.ndarray]:
        """Global rows as each shard's local rows."""
        return local_rows(self.snap.vectors.where, rows, len(self.parts))


class Selection:
    """The final round, asked per filter and depth for the best `fetch` rows; it fills their
    scores and parts into the one-file arrays."""

    def __init__(self, staged: Staged, final: list[dict]):
        n = len(staged.snap.chunk_file_ids)
        self.staged = staged
        self.final = final
        self.scores = np.zeros(n, dtype=np.float32)
        self.parts: dict[str, Any] = {}
        self.totals: dict[tuple, int] = {}
        # (filter, depth, floor, the shards' answers) sent with an earlier round
        self.ready: tuple | None = None

    def __call__(self, allowed: np.ndarray | None, fetch: int, min_score: float) -> list[int]:
        staged = self.staged
        answers, ready = None, self.ready
        if ready is not None and ready[0] is allowed and ready[1:3] == (fetch, min_score):
            answers, self.ready = ready[3], None
        if answers is None:
            args = [
                {**given, **select_args(allowed, ids, fetch, min_score)}
                for given, ids in zip(self.final, staged.chunk_ids, strict=True)
            ]
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


def select_args(allowed: np.ndarray | None, ids: np.ndarray, fetch: int, min_score: float):
    """What the `final` step of one shard needs of a selection: its slice of the filter."""
    return {
        "mask": None if allowed is None else encode_mask(allowed[ids]),
        "fetch": int(fetch),
        "min_score": float(min_score),
    }


def _result(selection: Selection) -> tuple[np.ndarray, dict]:
    parts = selection.parts
    parts["_select"] = selection
    return selection.scores, parts


def _terms(lexical, query: str, pages: bool = False) -> tuple[dict[str, Any], np.ndarray]:
    """The query's terms with their global idf, and (`pages`) their page df: both
    statistics in one round for the terms the reader does not know yet."""
    hashes = text_analysis.term_ids(query)
    unique, counts = np.unique(hashes, return_counts=True)
    unique = unique.astype(np.uint64)
    df, page_df = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(unique):
        df, page_df = lexical.term_statistics(unique, pages=pages)
    terms = {
        "hashes": unique,
        "weights": counts.astype(np.float32),
        "idf": np.asarray(lexical.idf(df) if len(unique) else np.zeros(0), dtype=np.float32),
        "spec": [float(x) for x in lexical.norm_spec()],
    }
    return terms, page_df


def _lexical(index, query: str, first: tuple | None):
    from query.score.lexical import lexical_index

    snap = index.snapshot
    staged = Staged(snap)
    terms, _ = _terms(lexical_index(index), query)
    final = [{"mode": "lexical"} for _ in staged.parts]
    if first is None:
        staged.round("bm25", terms)
        return _result(Selection(staged, final))
    allowed, fetch, min_score = first
    args = [select_args(allowed, ids, fetch, min_score) for ids in staged.chunk_ids]
    answers = staged.round("bm25", [{**terms, "select": a} for a in args])
    selection = Selection(staged, final)
    selection.ready = (allowed, int(fetch), float(min_score), [a["final"] for a in answers])
    return _result(selection)


def _hybrid(index, query: str, params, vector, name_pool: int):
    from query.score.lexical import page_lengths_of, section_lexical
    from query.score.vector import dense_scorer

    snap = index.snapshot
    lexical = section_lexical(index, params.section_k1)
    terms, page_df = _terms(lexical, query, pages=params.page_weight > 0)
    n_files = int(snap.chunk_file_ids[-1]) + 1
    page = None
    if params.page_weight > 0:
        _, avg = page_lengths_of(lexical, n_files)
        page = {
            "hashes": terms["hashes"],
            "counts": terms["weights"].astype(np.int64),
            "idf": np.asarray([bm25_idf(n_files, d) for d in page_df.tolist()], np.float64),
            "k1": params.page_k1,
            "b": params.page_b,
            "avg": avg,
        }
    rounds = _HybridRounds(Staged(snap), lexical, query, params, vector(), terms, page, name_pool)
    rounds.first_pass = dense_scorer(index).first_pass
    rounds()
    return _result(Selection(rounds.staged, rounds.final))


class _HybridRounds:
    """A hybrid query's rounds over the shards (module docstring), each a named step. Leaves
    the final round's arguments, one per shard, in `final`."""

    def __init__(self, staged, lexical, query, params, qvec, terms, page, name_pool):
        self.staged, self.snap, self.lexical = staged, staged.snap, lexical
        self.query, self.params, self.qvec = query, params, qvec
        self.terms, self.page, self.name_pool = terms, page, name_pool
        self.first_pass = "exact"
        self.final: list[dict] = []

    def __call__(self) -> None:
        params = self.params
        answers, direction = self._bm25()
        max_bm25 = max(a["max"] for a in answers)
        max_page = max(a.get("page_max", 0.0) for a in answers)
        dense = self._dense(answers, direction)
        cos = np.concatenate([np.asarray(a["cosine"]) for a in dense])
        moved = cos
        if direction is not None:
            moved = np.concatenate([np.asarray(a["moved"]) for a in dense])
        mix, max_lex = self._feedback(dense, cos, max_bm25)
        stub = None
        if params.stub_length > 0 and params.stub_weight > 0:
            from query.rank.stubs import CANDIDATES

            stub = {
                "length": float(params.stub_length),
                "weight": float(params.stub_weight),
                "candidates": CANDIDATES,
            }
        names = self.name_pool if params.name_weight > 0 else 0
        from query.score.fusion import _nth_best

        answers = self.staged.round(
            "fuse",
            {
                "max": max_lex,
                "top": float(moved.max()),
                "floor": _nth_best(moved, params.pool),
                "w": float(params.dense_weight),
                "page_weight": float(params.page_weight) if self.page is not None else 0.0,
                "max_page": max_page,
                "stub": stub,
                "mix": mix,
                "names": names,
            },
        )
        pool, stub_args = self._stub_and_pool(answers, stub, names)
        named = self._named(pool)
        self.final[:] = [
            {
                "mode": "hybrid",
                "named": None if named is None else named[i],
                "name_weight": float(params.name_weight),
                "stub": stub_args[i],
            }
            for i in range(len(self.staged.parts))
        ]

    def _bm25(self) -> tuple[list[dict], np.ndarray | None]:
        """The `bm25` round; the dense feedback's direction: the mean vector of the best
        BM25F chunks (Rocchio), or None."""
        from query.score.fusion import LEXICAL_EXACT

        params, staged = self.params, self.staged
        top = params.dense_feedback_chunks if params.dense_feedback_weight else 0
        also = LEXICAL_EXACT if self.first_pass == "ivf" and _has_lists(self.snap) else 0
        self.also = also
        answers = staged.round("bm25", {**self.terms, "top": top, "also": also, "page": self.page})
        direction = None
        if top:
            rows, _ = staged.merge(answers, top, "top")
            if len(rows):
                held = {}
                for i, a in enumerate(answers):
                    at = staged.chunk_ids[i][np.asarray(a["top"]["rows"], np.int64)]
                    held.update(zip(at.tolist(), a["vectors"], strict=True))
                direction = np.stack([held[r] for r in rows.tolist()]).mean(axis=0)
        return answers, direction

    def _dense(self, answers: list[dict], direction) -> list[dict]:
        """The `dense` round: each shard's best cosines (and the moved query's)."""
        params, staged = self.params, self.staged
        local_also: list = [None] * len(staged.parts)
        if self.also:
            local_also = staged.local(staged.merge(answers, self.also, "also")[0])
        rho = params.page_dense_weight if params.page_dense_weight > 0 else 0.0
        n, keep = len(self.snap.chunk_file_ids), params.pool + 1
        return staged.round(
            "dense",
            [
                {
                    "query": self.qvec,
                    "direction": direction,
                    "beta": float(params.dense_feedback_weight),
                    "keep": keep,
                    "rho": float(rho),
                    "first_pass": self.first_pass,
                    "depth": shard_depth(len(ids), n, keep),
                    "also": local_also[i],
                }
                for i, ids in enumerate(staged.chunk_ids)
            ],
        )

    def _feedback(self, dense: list[dict], cos: np.ndarray, max_bm25: float):
        """(mix, the lexical side's maximum): the `first` and `expand` rounds of the
        pseudo-relevance feedback (RM3), or (None, max BM25F) when it is off."""
        from query.score.fusion import _nth_best

        params, staged, lexical = self.params, self.staged, self.lexical
        if not (params.feedback_weight > 0 and params.feedback_terms > 0):
            return None, max_bm25
        k = params.feedback_chunks
        first = {
            "max": max_bm25,
            "top": float(cos.max()),
            "floor": _nth_best(cos, params.pool),
            "w": float(params.dense_weight),
            "k": k,
        }
        bound = _first_bound(dense, first)
        answers = staged.round("first", {**first, "bound": bound, "postings": True})
        chunks, values = staged.merge(answers, k)
        if not len(chunks):
            return None, max_bm25
        postings: dict = {}
        for i, a in enumerate(answers):
            rows = staged.chunk_ids[i][np.asarray(a["rows"], np.int64)]
            postings.update(split_postings(rows, a["postings"]))
        hashes, weights = lexical.feedback_terms(chunks, values, params.feedback_terms, postings)
        hashes = np.asarray(hashes, dtype=np.uint64)
        idf = lexical.idf(lexical.document_frequency(hashes)) if len(hashes) else []
        answers = staged.round(
            "expand",
            {
                "hashes": hashes,
                "weights": np.asarray(weights, dtype=np.float32),
                "idf": np.asarray(idf, dtype=np.float32),
                "spec": self.terms["spec"],
            },
        )
        lam = np.float32(params.feedback_weight * 1.0)
        mix = {
            "lam": float(lam),
            "max_bm25": max_bm25,
            "max_expansion": max(a["max"] for a in answers),
        }
        return mix, _mixed_max(answers, mix)

    def _stub_and_pool(self, answers: list[dict], stub: dict | None, names: int):
        """(the name test's pool or None, each shard's stub prior) from the `fuse` round, with a
        `stub` round when a row outside the candidates may be in the pool."""
        from query.rank.stubs import CANDIDATES, record_rows

        staged = self.staged
        stub_args: list = [None] * len(staged.parts)
        if stub is None:
            return (staged.merge(answers, self.name_pool)[0] if names else None), stub_args
        rows, values, short, length = staged.merge(answers, CANDIDATES, extra=("short", "length"))
        cut = np.isin(rows, record_rows(self.snap, rows[short.astype(bool)]))
        local = staged.local(rows[cut])
        pool = None
        if names:
            pool = _pool_after_stub(rows, values, length, cut, stub, names, CANDIDATES)
        if names and pool is None:
            answers = staged.round(
                "stub", [{"stub": {**stub, "rows": r}, "names": names} for r in local]
            )
            return staged.merge(answers, self.name_pool)[0], stub_args
        return pool, [{**stub, "rows": r} for r in local]

    def _named(self, pool) -> list | None:
        """Per shard, the files among the pool's pages that the query names, or None."""
        from query.rank.titles import name_files

        if pool is None:
            return None
        files = np.unique(self.snap.chunk_file_ids[pool], return_counts=True)[0]
        found = files[name_files(self.snap, self.query, files)]
        return _local_files(self.snap, found) if len(found) else None


def _first_bound(dense: list[dict], first: dict) -> float | None:
    """A value the first fused ranking's k-th best reaches, from the rows the dense round
    answered; None when fewer than k score."""
    values = [
        first_scores(
            np.asarray(a["bm25"]),
            np.asarray(a["cosine"]),
            first["w"],
            first["max"],
            first["top"],
            first["floor"],
        )
        for a in dense
    ]
    every = np.concatenate(values) if values else np.zeros(0, np.float32)
    every = every[every > 0]
    k = int(first["k"])
    if len(every) < k:
        return None
    return float(np.partition(every, len(every) - k)[len(every) - k])


def _mixed_max(answers: list[dict], mix: dict) -> float:
    """The maximum of the lexical side after feedback over every shard, from each shard's
    front of (bm25, expansion) pairs (`shard_stages.lexical_front`)."""
    best = [
        float(
            mixed_lexical(
                np.asarray(a["front_bm25"], dtype=np.float32),
                np.asarray(a["front_expansion"], dtype=np.float32),
                mix["lam"],
                mix["max_bm25"],
                mix["max_expansion"],
            ).max()
        )
        for a in answers
        if len(a["front_bm25"])
    ]
    return max(best, default=0.0)


def _pool_after_stub(
    rows: np.ndarray,
    values: np.ndarray,
    length: np.ndarray,
    cut: np.ndarray,
    stub: dict,
    names: int,
    candidates: int,
) -> np.ndarray | None:
    """The `names` best rows after the stub prior, from the best `candidates` alone; None when a
    row outside them could be among them (then a round asks the shards)."""
    from query.score.fusion import Fused, with_stub_prior

    at = np.flatnonzero(cut)
    prior = SimpleNamespace(stub_length=stub["length"], stub_weight=stub["weight"])
    scores = np.array(values, dtype=np.float32)
    after = with_stub_prior(Fused(scores, scores, scores), length[at], prior, at).scores
    positive = np.flatnonzero(after > 0)
    pool = positive[np.lexsort((-rows[positive], -after[positive]))][:names]
    if len(rows) < candidates or values[-1] <= 0:
        return rows[pool]  # every row is a candidate, or no other row is positive
    if len(pool) < names:
        return None
    last, last_row = after[pool[-1]], rows[pool[-1]]
    if last > values[-1] or (last == values[-1] and last_row >= rows[-1]):
        return rows[pool]
    return None


def _has_lists(snap) -> bool:
    """Some shard has IVF lists (only those score the lexical side's best rows apart)."""
    from kernel import ivf

    return any(isinstance(f.meta.get(ivf.META_KEY), dict) for f in snap.files)


def _local_files(snap, files: np.ndarray) -> list[np.ndarray]:
    """Global file ids as each shard's local ones."""
    found = snap.cache.get("staged_file_where")
    if found is None:
        n = sum(len(ids) for ids in snap.order.file_ids)
        found = snap.cache["staged_file_where"] = by_shard(snap.order.file_ids, n)
    return local_rows(found, files, len(snap.parts))
