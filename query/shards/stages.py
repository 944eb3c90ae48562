"""A shard's side of a staged query (query.rank.shard_search): arrays kept in the shard's
session, answers a maximum or a few best rows, each array the one-file expression."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from query.score.fusion import Fused, best, scaled_semantic, with_stub_prior
from query.score.lexical import add_page_term, page_lengths_of
from query.score.vector import top_rows

ShardPart = Any  # query.shards.part.ShardPart (which imports this module)

__all__ = ["decode_mask", "encode_mask", "first_scores", "lexical_front", "mixed_lexical", "run"]


def run(part: ShardPart, state: dict[str, Any], step: str, args: dict[str, Any]) -> dict:
    handler = STEPS.get(step)
    if handler is None:
        raise ValueError(f"unknown stage {step!r}")
    return handler(part, state, args)


def _rows(scores: np.ndarray, k: int, positive: bool = True) -> dict[str, np.ndarray]:
    """The k best rows (local, score then row descending) and their values."""
    rows = best(scores, k) if positive else top_rows(scores, k)
    return {"rows": rows.astype(np.int32), "values": scores[rows]}


def _max(values: np.ndarray | None) -> float:
    return float(values.max()) if values is not None and len(values) else 0.0


def _scaled(values: np.ndarray, top: float) -> np.ndarray:
    """`query.score.fusion.normalised_lexical` with the corpus-wide maximum `top`."""
    return values / np.float32(top) if top > 0 else np.zeros_like(values)


def _page_lengths(part: ShardPart) -> np.ndarray:
    """Each local file's length, summed as the one-file index sums it (a file's chunks are
    all in this shard)."""
    return page_lengths_of(part.lexical, len(part.shard.paths))[0]


def _term_scores(part: ShardPart, args: dict) -> np.ndarray:
    """BM25F of this shard's chunks for the terms, with the global idf and norm."""
    out = np.zeros(part.lexical.n_chunks, np.float32)
    hashes = np.asarray(args["hashes"], dtype=np.uint64)
    if len(hashes):
        weights = np.asarray(args["weights"], dtype=np.float32)
        idf = np.asarray(args["idf"], dtype=np.float32)
        part.add_term_scores(out, hashes, weights, idf, tuple(float(x) for x in args["spec"]))
    return out


def _bm25(part: ShardPart, state: dict, args: dict) -> dict:
    """BM25F and page BM25 with the global statistics; the best rows for the Rocchio direction
    and an IVF pass; a lexical query's final answer with it (`select`), in one round trip."""
    scores = _term_scores(part, args)
    state["bm25"] = scores
    answer: dict[str, Any] = {"max": _max(scores)}
    if args.get("select") is not None:
        answer["final"] = _final(part, state, {"mode": "lexical", **args["select"]})
    if args.get("top"):
        answer["top"] = _rows(scores, int(args["top"]))
        answer["vectors"] = np.ascontiguousarray(part.shard.vectors[answer["top"]["rows"]])
    if args.get("also"):
        answer["also"] = _rows(scores, int(args["also"]))
    page = args.get("page")
    state["page"] = None
    if page is not None:
        state["page"] = _page_scores(part, page)
        answer["page_max"] = _max(state["page"])
    return answer


def _page_scores(part: ShardPart, page: dict) -> np.ndarray:
    """`ShardedLexical.page_scores` for this shard's files, per chunk."""
    k1, b, avg = float(page["k1"]), float(page["b"]), float(page["avg"])
    page_len = _page_lengths(part)
    out = np.zeros(len(page_len), dtype=np.float32)
    idfs = np.asarray(page["idf"], dtype=np.float64)
    hashes = np.asarray(page["hashes"], dtype=np.uint64)
    found = part.page_tf(hashes)
    for got, count, idf in zip(found, np.asarray(page["counts"]).tolist(), idfs, strict=True):
        if got is None:
            continue
        pages, tf = got
        add_page_term(out, pages, tf, count * idf, (page_len, avg), k1, b)
    return out[part.shard.chunk_file_ids]


def _dense(part: ShardPart, state: dict, args: dict) -> dict:
    """The dense side (`ShardPart.dense`), its arrays kept for the next steps."""
    direction = args.get("direction")
    also = args.get("also")
    raw, cosine, moved = part._dense_arrays(
        np.asarray(args["query"], dtype=np.float32),
        None if direction is None else np.asarray(direction, dtype=np.float32),
        float(args["beta"]),
        int(args["keep"]),
        float(args["rho"]),
        str(args["first_pass"]),
        int(args["depth"]),
        None if also is None else np.asarray(also, dtype=np.int64),
    )
    if direction is None:
        moved = cosine
    state["raw"], state["cosine"], state["moved"] = raw, cosine, moved
    answer = part.dense_answer(raw, cosine, moved, int(args["keep"]))
    # BM25F at the answered rows: the router scores them in the first fused ranking, and
    # its k-th best bounds the rows the next step sends back (`_first`)
    rows = answer.get("rows")
    answer["bm25"] = state["bm25"] if rows is None else state["bm25"][rows]
    return answer


def first_scores(bm25, cosine, w: float, max_bm25: float, top: float, floor: float):
    """The first fused ranking (`query.score.fusion.fuse` of BM25F and the cosine), element by
    element: over a shard's rows, or over the rows the router holds (the same bits)."""
    w = np.float32(w)
    lex = (np.float32(1) - w) * _scaled(bm25, max_bm25).astype(np.float32)
    return lex + w * scaled_semantic(cosine, top, floor)


def _first(part: ShardPart, state: dict, args: dict) -> dict:
    """The best rows of the first fused ranking at or above `bound`, with their postings, for the
    router to pick the feedback chunks."""
    scores = first_scores(
        state["bm25"], state["cosine"], args["w"], args["max"], args["top"], args["floor"]
    )
    found = _rows(scores, int(args["k"]))
    if args.get("bound") is not None:
        keep = found["values"] >= np.float32(args["bound"])
        found = {"rows": found["rows"][keep], "values": found["values"][keep]}
    if args.get("postings"):
        found["postings"] = part.feedback_postings(found["rows"])
    return found


def mixed_lexical(bm25, expansion, lam: float, max_bm25: float, max_expansion: float):
    """The lexical side after feedback, element by element: (1 - λ) bm25 / max + λ
    expansion / max, over a shard's rows or the few the router holds (the same bits)."""
    lam = np.float32(lam)
    return (1 - lam) * _scaled(bm25, max_bm25) + lam * _scaled(expansion, max_expansion)


def lexical_front(bm25: np.ndarray, expansion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bm25, expansion) pairs holding every pair no other row beats in both: `mixed_lexical` is
    monotone in each, so its maximum over the shard is its maximum over these."""
    if len(bm25) == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    top_b = bm25.max()
    top_e = expansion.max()
    e_at_top_b = expansion[bm25 == top_b].max()
    b_at_top_e = bm25[expansion == top_e].max()
    rows = np.flatnonzero((bm25 > b_at_top_e) & (expansion > e_at_top_b))
    b, e = bm25[rows], expansion[rows]
    order = np.argsort(-b, kind="stable")
    b, e = b[order], e[order]
    beaten = np.r_[False, e[1:] <= np.maximum.accumulate(e)[:-1]] if len(e) else np.zeros(0, bool)
    front_b = np.r_[np.float32(top_b), np.float32(b_at_top_e), b[~beaten]]
    front_e = np.r_[np.float32(e_at_top_b), np.float32(top_e), e[~beaten]]
    return front_b.astype(np.float32), front_e.astype(np.float32)


def _expand(part: ShardPart, state: dict, args: dict) -> dict:
    """The RM3 expansion terms' BM25F (global idf): its maximum, and the front of
    (bm25, expansion) that gives the maximum of the lexical side (`lexical_front`)."""
    out = _term_scores(part, args)
    state["expansion"] = out
    front_b, front_e = lexical_front(state["bm25"], out)
    return {"max": _max(out), "front_bm25": front_b, "front_expansion": front_e}


def _lexical_side(state: dict, mix: dict | None) -> np.ndarray:
    """The lexical side after feedback (`mixed_lexical`), or BM25F without it."""
    if not mix:
        return state["bm25"]
    return mixed_lexical(
        state["bm25"], state["expansion"], mix["lam"], mix["max_bm25"], mix["max_expansion"]
    )


def _fuse(part: ShardPart, state: dict, args: dict) -> dict:
    """The final fusion with the page part; the best rows for the stub test, or, with none to run,
    the prior applied here and the name test's pool."""
    state["lexical"] = _lexical_side(state, args.get("mix"))
    state["mix"] = args.get("mix")  # (the final round's `--explain` parts read it)
    w = np.float32(args["w"])
    lex = (np.float32(1) - w) * _scaled(state["lexical"], args["max"]).astype(np.float32)
    sem = w * scaled_semantic(state["moved"], args["top"], args["floor"])
    fused = Fused(scores=lex + sem, lexical=lex, semantic=sem)
    page = state.get("page")
    if page is not None and args["page_weight"] > 0:
        mu = np.float32(args["page_weight"])
        keep = np.float32(1) - mu
        part_page = mu * _scaled(page.astype(np.float32, copy=False), args["max_page"])
        fused = Fused(
            scores=keep * fused.scores + part_page,
            lexical=keep * fused.lexical,
            semantic=keep * fused.semantic,
            page=part_page,
        )
    state["fused"] = fused
    stub = args.get("stub")
    if not stub:
        return _rows(fused.scores, int(args["names"])) if args.get("names") else {}
    found = _rows(fused.scores, int(stub["candidates"]), positive=False)
    length = _page_lengths(part)[part.shard.chunk_file_ids[found["rows"]]]
    return {**found, "short": length < np.float32(stub["length"]), "length": length}


def _with_stub(part: ShardPart, state: dict, stub: dict | None) -> None:
    """The stub prior on the rows the router names."""
    if not stub:
        return
    params = SimpleNamespace(stub_length=stub["length"], stub_weight=stub["weight"])
    rows = np.asarray(stub["rows"], dtype=np.int64)
    length = _page_lengths(part)[part.shard.chunk_file_ids[rows]]
    state["fused"] = with_stub_prior(state["fused"], length, params, rows)


def _stub(part: ShardPart, state: dict, args: dict) -> dict:
    """The stub prior on the rows the router names; then the best rows whose pages the
    name test reads (when the router could not tell them from the candidates alone)."""
    _with_stub(part, state, args.get("stub"))
    if args.get("names"):
        return _rows(state["fused"].scores, int(args["names"]))
    return {}


def _final(part: ShardPart, state: dict, args: dict) -> dict:
    """The final scores (with the name part) under the caller's filter: the best `fetch` rows at
    or above `min_score`, every part's value at them, and how many rows pass."""
    key = ("final", args.get("mode"))
    final = state.get(key)
    if final is None:
        final = state[key] = _final_parts(part, state, args)
    scores = final["fused"]
    passing = scores > 0
    if args.get("min_score") is not None:
        passing &= scores >= float(args["min_score"])  # as `query.rank.search` compares
    mask = decode_mask(args.get("mask"), len(scores))
    if mask is not None:
        passing &= mask
    top = top_rows(scores, int(args["fetch"]), mask=passing)
    return {
        "rows": top.astype(np.int32),
        "parts": {name: values[top] for name, values in final.items()},
        "count": int(np.count_nonzero(passing)),
    }


def _final_parts(part: ShardPart, state: dict, args: dict) -> dict[str, np.ndarray]:
    """The parts `query.rank.search.mode_scores` names, in its order, for every local row."""
    if args.get("mode") == "lexical":
        return {"lexical": state["bm25"], "fused": state["bm25"]}
    _with_stub(part, state, args.get("stub"))  # the rows the router found without a round
    fused = state["fused"]
    parts = {"lexical": fused.lexical, "semantic": fused.semantic}
    mix = state.get("mix")
    if mix is not None and state.get("expansion") is not None:  # the RM3 round's share apart
        words, added = (_Split(fused.lexical, state, mix, side) for side in (True, False))
        parts = {"lexical": words, "feedback": added, "semantic": fused.semantic}
    if fused.page is not None:
        parts["page"] = fused.page
    if fused.stub is not None:
        parts["stub"] = fused.stub
    parts.update(fused=fused.scores, bm25=state["bm25"], cosine=state["raw"])
    if state.get("page") is not None:
        parts["page_bm25"] = state["page"]
    named = args.get("named")
    if named is not None:
        files = np.zeros(len(part.shard.paths), dtype=bool)
        files[np.asarray(named, dtype=np.int64)] = True
        name = np.float32(args["name_weight"]) * files[part.shard.chunk_file_ids]
        parts = {"name": name.astype(np.float32), **parts, "fused": fused.scores + name}
    return parts


class _Split:
    """One side of the lexical part (`query.score.fusion.SplitPart`), read at the rows the
    final answer sends: the same scalar steps as the one-file `--explain`."""

    def __init__(self, lexical, state: dict, mix: dict, words: bool) -> None:
        self.lexical, self.state, self.mix, self.words = lexical, state, mix, words

    def __getitem__(self, rows) -> np.ndarray:
        from query.score.fusion import split_at, words_share

        bm25, expansion, mix = self.state["bm25"], self.state["expansion"], self.mix
        lexical = np.asarray(self.lexical[rows])
        out = [
            split_at(
                lexical[i],
                words_share(
                    bm25[r], expansion[r], mix["lam"], mix["max_bm25"], mix["max_expansion"]
                ),
                self.words,
            )
            for i, r in enumerate(np.asarray(rows).tolist())
        ]
        return np.array(out, dtype=np.float32)


STEPS = {
    "bm25": _bm25,
    "dense": _dense,
    "first": _first,
    "expand": _expand,
    "fuse": _fuse,
    "stub": _stub,
    "final": _final,
}


# -- a filter over the wire -----------------------------------------------------------------
def encode_mask(mask: np.ndarray | None) -> dict[str, Any] | None:
    """A shard's slice of the caller's filter, as few bytes as it takes: the rows it keeps
    (a narrow filter, a title tier), the rows it drops (a wide one), or one bit a row."""
    if mask is None:
        return None
    n = len(mask)
    kept = int(np.count_nonzero(mask))
    if kept * 32 <= n:
        return {"rows": np.flatnonzero(mask).astype(np.int32)}
    if (n - kept) * 32 <= n:
        return {"not": np.flatnonzero(~mask).astype(np.int32)}
    return {"bits": np.packbits(mask), "n": n}


def decode_mask(found: dict[str, Any] | None, n: int) -> np.ndarray | None:
    if found is None:
        return None
    if "rows" in found:
        mask = np.zeros(n, dtype=bool)
        mask[np.asarray(found["rows"], dtype=np.int64)] = True
        return mask
    if "not" in found:
        mask = np.ones(n, dtype=bool)
        mask[np.asarray(found["not"], dtype=np.int64)] = False
        return mask
    if int(found.get("n", -1)) != n:
        raise ValueError("a filter for another shard size")
    return np.unpackbits(np.asarray(found["bits"], dtype=np.uint8), count=n).astype(bool)
