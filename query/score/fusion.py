"""Hybrid fusion: BM25F and the dense cosine, each normalised onto [0, 1] and mixed with a
dense weight, with one round of pseudo-relevance feedback on both sides (RM3, Rocchio), page
evidence, the stub prior. The formulas and how they were chosen: docs/search-quality.md,
"What each mode does" and "How the fusion was chosen"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from query.score.vector import DenseScorer, top_rows, union_rows


@dataclass(frozen=True)
class FusionParams:
    """The hybrid ranking's settings; the defaults are docs/search-quality.md's "What each
    mode does"."""

    dense_weight: float = 0.3
    pool: int = 100
    feedback_chunks: int = 10
    feedback_terms: int = 10
    feedback_weight: float = 0.4  # λ
    dense_feedback_chunks: int = 3
    dense_feedback_weight: float = 1.0  # β
    title_tiers: bool = True  # query.rank.tiers: title-matched documents first
    page_weight: float = 0.2  # μ: share of the page-level BM25 in each section's score
    name_weight: float = 0.3  # ν: added to sections of a page whose title/stem the query names
    page_k1: float = 1.2  # BM25 k1 of the page-level score
    page_b: float = 0.75  # BM25 b of the page-level score (length normalisation of pages)
    # ρ: a section's cosine mixed with its page's mean vector's (0: off)
    page_dense_weight: float = 0.5
    # section-level BM25F k1; 0 = as packed into the index
    section_k1: float = 1.5
    # stub prior (query.rank.stubs): a record page under `stub_length` words scores
    # x (1 - stub_weight * (1 - length / stub_length)) (0: off)
    stub_length: float = 40.0
    stub_weight: float = 0.4


PARAMS = FusionParams()


def current() -> FusionParams:
    """The ranking settings in force (read at call time, so a benchmark can swap them)."""
    return PARAMS


@contextlib.contextmanager
def overridden(**changes) -> Iterator[FusionParams]:
    """Run a block with some ranking settings changed: how bench/quality.py tries a variant
    through the same code path as `mdvdb search`."""
    global PARAMS
    saved = PARAMS
    PARAMS = replace(saved, **changes)
    try:
        yield PARAMS
    finally:
        PARAMS = saved


@dataclass(eq=False, repr=False)
class Fused:
    """A fused ranking and its weighted parts (what `--explain` shows)."""

    scores: np.ndarray  # fused, per chunk
    lexical: np.ndarray  # the lexical part (already weighted)
    semantic: np.ndarray  # the semantic part (already weighted)
    page: np.ndarray | None = None  # the page-level part (already weighted), if any
    stub: np.ndarray | None = None  # the stub-page part (<= 0), if any
    # the RM3 round's share of the lexical part (`--explain`'s `feedback`), if it ran
    feedback: Feedback | None = None


def _nth_best(values: np.ndarray, n: int) -> float:
    if len(values) == 0:
        return 0.0
    n = min(n, len(values))
    return float(np.partition(values, len(values) - n)[len(values) - n])


def normalised_lexical(lexical: np.ndarray) -> np.ndarray:
    top = float(lexical.max()) if len(lexical) else 0.0
    return lexical / np.float32(top) if top > 0 else np.zeros_like(lexical)


def normalised_semantic(
    semantic: np.ndarray, pool: int, support: np.ndarray | None = None
) -> np.ndarray:
    """`support` (DenseScorer.support): the rows holding the best values, every other row at
    most their lowest; the top and the floor are read from them alone."""
    if len(semantic) == 0:
        return semantic
    sparse = _sparse_semantic(semantic, pool, support)
    if sparse is not None:
        out = np.zeros(len(semantic), dtype=np.float32)
        out[sparse[0]] = sparse[1]
        return out
    semantic = np.asarray(semantic)  # (a query.score.vector.Spread: the whole array)
    if support is not None and len(support) > pool:
        values = semantic[support]
        top, floor = float(values.max()), _nth_best(values, pool)
    else:
        top, floor = float(semantic.max()), _nth_best(semantic, pool)
    return scaled_semantic(semantic, top, floor)


def scaled_semantic(semantic: np.ndarray, top: float, floor: float) -> np.ndarray:
    """The semantic side spread over [floor, top] (`normalised_semantic`, whose top and
    floor a sharded search gathers from the shards' best rows)."""
    if top <= floor:
        return (semantic >= top).astype(np.float32)
    return np.clip((semantic - floor) / (top - floor), 0.0, 1.0).astype(np.float32)


def _sparse_semantic(
    semantic, pool: int, support: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """`normalised_semantic` as (support, its values there): every other row is 0. None
    when that cannot be said (no support, every best row tied)."""
    if support is None or len(support) <= pool or len(semantic) == 0:
        return None
    values = semantic[support]
    top, floor = float(values.max()), _nth_best(values, pool)
    if top <= floor:  # every best row ties: any other row may tie with them too
        return None
    return support, np.clip((values - floor) / (top - floor), 0.0, 1.0).astype(np.float32)


class Scaled:
    """A fused part as `--explain` reads it: `base`, or `values` at `rows` (0 elsewhere), times
    each of `factors`, computed only at the rows read (the whole array's bits)."""

    __array_ufunc__ = None  # no silent arithmetic: scalars multiply it, callers read rows

    def __init__(self, n: int, base=None, rows=None, values=None, factors: tuple = ()):
        self.n, self.base, self.rows, self.values = n, base, rows, values
        self.factors = factors
        self._where: dict[int, int] | None = None

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def __mul__(self, factor) -> Scaled:
        if self.base is None:  # a few values: multiply them now
            values = np.float32(factor) * self.values
            return Scaled(self.n, None, self.rows, values, self.factors)
        return Scaled(self.n, self.base, None, None, (*self.factors, np.float32(factor)))

    __rmul__ = __mul__

    def _apply(self, x):
        for factor in self.factors:
            x = factor * x
        return x

    def __array__(self, dtype=None, copy=None):
        if self.base is not None:
            out = self._apply(self.base)
            out = out.copy() if out is self.base else out
        else:
            out = np.zeros(self.n, dtype=np.float32)
            out[self.rows] = self.values
            out = self._apply(out)
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, row):
        if self.base is not None:
            return self._apply(self.base[row])
        if isinstance(row, int | np.integer):
            if self._where is None:
                self._where = {r: i for i, r in enumerate(self.rows.tolist())}
            at = self._where.get(int(row))
            return self._apply(self.values[at] if at is not None else np.float32(0))
        return np.asarray(self)[row]


def _part(values) -> Scaled:
    return values if isinstance(values, Scaled) else Scaled(len(values), base=values)


def fuse(
    lexical: np.ndarray,
    semantic: np.ndarray,
    params: FusionParams | None = None,
    support: np.ndarray | None = None,
) -> Fused:
    params = params or PARAMS
    w = np.float32(params.dense_weight)
    # in place (each array here is a fresh one)
    lex = normalised_lexical(lexical).astype(np.float32, copy=False)
    lex = np.multiply(lex, np.float32(1) - w, out=lex if lex is not lexical else None)
    sparse = _sparse_semantic(semantic, params.pool, support)
    if sparse is None:
        sem = normalised_semantic(semantic, params.pool, support)
        np.multiply(sem, w, out=sem)
        return Fused(scores=lex + sem, lexical=lex, semantic=sem)
    # the semantic part is 0 but at the rescored rows: lex + 0 is lex elsewhere
    rows, values = sparse
    values = w * values
    scores = lex.copy()
    scores[rows] += values
    return Fused(scores=scores, lexical=lex, semantic=Scaled(len(lex), None, rows, values))


def best(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best positive scores, best first, equal scores as
    query.score.vector.top_rows orders them."""
    return top_rows(scores, k, positive=True)


def hybrid(
    lexical_index,
    vectors: np.ndarray,
    query_vector: np.ndarray,
    bm25: np.ndarray,
    params: FusionParams | None = None,
    page: PerFile | None = None,
    pages=None,
    dense: DenseScorer | None = None,
) -> tuple[Fused, np.ndarray]:
    """The hybrid ranking with feedback, and the first-pass cosines. The moved query's cosines
    follow by linearity from one more product; `dense` scores both directions (default: exact)."""
    params = params or PARAMS
    dense = dense or DenseScorer(vectors)
    if isinstance(dense, DenseScorer):  # (a sharded scorer hands back arrays)
        dense.lazy = True  # fusion reads the IVF pass's scores at few rows
    query_vector = query_vector.astype(np.float32, copy=False)
    # An IVF pass scores only the probed lists: the lexical side's best are scored exactly too
    also = None
    if getattr(dense, "lists", None) is not None:
        also = top_rows(bm25, LEXICAL_EXACT, positive=True)  # best first, ties by row
    k = params.dense_feedback_chunks
    dense_top = []
    if params.dense_feedback_weight and also is not None and k <= LEXICAL_EXACT:
        # the best k of the best 1,000 (or of every positive row), in the same order, are
        # `best(bm25, k)`: no second pass over n rows
        dense_top = also[:k]
    elif params.dense_feedback_weight:
        dense_top = best(bm25, k)
    direction = vectors[dense_top].mean(axis=0) if len(dense_top) else None
    # Page-level evidence (`pages`: pages of several sections) is mixed in by the scorer.
    rho = params.page_dense_weight if pages is not None else 0.0
    if rho > 0 and dense.pages is None:
        from query.score.vector import PageSide

        dense.pages = PageSide.of(pages, vectors)
    raw, cosine, semantic = dense.mixed(
        query_vector,
        direction,
        params.dense_feedback_weight,
        keep=params.pool + 1,
        rho=rho,
        also=also,
    )
    support = getattr(dense, "support", None)  # the rows the scorer rescored exactly
    feedback = _expands(params)
    found = None
    if feedback and support is not None and len(support) > params.pool:
        asked = LEXICAL_EXACT if also is not None else FIRST_LEXICAL
        top = also if also is not None else best(bm25, asked)
        complete = len(top) < asked
        found = _first_best(bm25, cosine, params, support, top, complete, params.feedback_chunks)
    first = None
    if found is None and feedback:
        first = fuse(bm25, cosine, params, support).scores
    lexical, split = bm25, None
    if feedback:
        if found is None:
            found = (chunks := best(first, params.feedback_chunks)), first[chunks]
        if len(found[0]):
            sides = (bm25, semantic, support, page, also)
            lexical, split, blended = _rm3(lexical_index, found, params, sides)
            if blended is not None:
                return blended, raw
    fused = fuse(lexical, semantic, params, support)
    if page is not None and params.page_weight > 0:
        fused = with_page(fused, page, params.page_weight, owned=True)
    fused.feedback = split
    return fused, raw


def _expands(params: FusionParams) -> bool:
    """Whether the RM3 round runs, also when no query word is in any section
    (docs/search-quality.md, "An honest empty answer"); it is never evidence of a match."""
    return params.feedback_weight > 0 and params.feedback_terms > 0


def _rm3(lexical_index, found, params: FusionParams, sides):
    """The RM3 round from the feedback chunks `found` (rows, first scores): (the lexical side,
    its `Feedback`, the whole fused ranking when `_blended` made it, else None)."""
    bm25, semantic, support, page, also = sides
    chunks = found[0]
    rows, weights = lexical_index.feedback_terms(chunks, found[1], params.feedback_terms)
    expansion = _scored(lexical_index, bm25, rows, weights)
    lam = np.float32(params.feedback_weight)
    split = Feedback(lexical_index, bm25, rows, weights, lam)
    if page is not None and params.page_weight > 0:
        # BM25F's maximum is the first of `also` (its best rows; none: no row scores > 0)
        most = None if also is None else bm25[also[:1]].max(initial=0)
        blended = _blended(bm25, expansion, lam, semantic, params, support, page, most)
        if blended is not None:
            blended.feedback = split
            return None, split, blended
    # (1 - λ) bm25 / max + λ expansion / max, in place (`expansion` is this call's)
    lexical = normalised_lexical(bm25)
    np.multiply(lexical, 1 - lam, out=lexical)
    most = float(expansion.max()) if len(expansion) else 0.0
    if most > 0:
        np.divide(expansion, np.float32(most), out=expansion)
    else:
        expansion[:] = 0
    np.multiply(expansion, lam, out=expansion)
    np.add(lexical, expansion, out=lexical)
    return lexical, split, None


class Feedback:
    """How the RM3 round mixed into the lexical part, to tell `--explain`'s `lexical` (the
    query's words, the share (1 - λ) b / max b) from its `feedback`; the expansion is rescored on
    first use."""

    def __init__(self, lexical_index, bm25: np.ndarray, rows, weights, lam) -> None:
        self.lexical_index, self.bm25, self.rows, self.weights = lexical_index, bm25, rows, weights
        self.lam = float(lam)
        self._expansion: np.ndarray | None = None

    def words_share(self, row: int) -> float:
        """The share of the lexical part at `row` that the query's own words give."""
        if self._expansion is None:
            self._expansion = _scored(self.lexical_index, self.bm25, self.rows, self.weights)
            self._tops = (float(self.bm25.max()), float(self._expansion.max()))
        top_b, top_e = self._tops
        return words_share(self.bm25[row], self._expansion[row], self.lam, top_b, top_e)

    def parts(self, lexical) -> tuple[SplitPart, SplitPart]:
        """(`lexical`: the query's words, `feedback`: the expansion terms) of a lexical part."""
        return SplitPart(lexical, self, True), SplitPart(lexical, self, False)


def words_share(bm25, expansion, lam: float, top_bm25: float, top_expansion: float) -> float:
    """(1 - λ) b / max b over (1 - λ) b / max b + λ e / max e at one row (1 where both are 0):
    the query's own words' share of the lexical part (a sharded index's shards say the same)."""
    lam = float(lam)
    words = (1 - lam) * float(bm25) / top_bm25 if top_bm25 > 0 else 0.0
    added = lam * float(expansion) / top_expansion if top_expansion > 0 else 0.0
    return words / (words + added) if words + added > 0 else 1.0


def split_at(total, share: float, words: bool) -> np.float32:
    """The query words' (`words`) or the feedback's side of a lexical part `total`."""
    total = float(total)
    return np.float32(total * share if words else total - total * share)


class SplitPart:
    """One side of a lexical part split by `Feedback`, read row by row (`--explain`)."""

    def __init__(self, lexical, feedback: Feedback, words: bool) -> None:
        self.lexical, self.feedback, self.words = lexical, feedback, words

    def __len__(self) -> int:
        return len(self.lexical)

    def __getitem__(self, row) -> np.float32:
        return split_at(self.lexical[row], self.feedback.words_share(int(row)), self.words)


# Rows per block of `_blended` (a few arrays of it stay in the core's cache).
BLOCK = 65_536
# The least rows of a piece of `_blended` handed to another thread (docs/benchmarks.md,
# "Session 11: search threads on idle cores").
PARALLEL_FUSION_ROWS = 262_144


def _blended(
    bm25: np.ndarray,
    expansion: np.ndarray,
    lam: np.float32,
    semantic,
    params: FusionParams,
    support: np.ndarray | None,
    page: PerFile,
    top_bm25: float | None = None,
) -> Fused | None:
    """`with_page(fuse(mix of bm25 and expansion, semantic), page)` block by block, the same bits;
    None when the semantic part is not sparse. `expansion` ends holding the lexical part."""
    sparse = _sparse_semantic(semantic, params.pool, support)
    if sparse is None:
        return None
    from query.score.second_core import in_parallel, row_ranges

    n = len(bm25)
    w = np.float32(params.dense_weight)
    one_minus_w = np.float32(1) - w
    keep, part = _mixed_part(page.values, params.page_weight)
    if top_bm25 is None:  # (the caller's `bm25.max()` when it knows it: one pass fewer)
        top_bm25 = float(bm25.max()) if n else 0.0
    top_expansion = float(expansion.max()) if n else 0.0
    one_minus_lam = 1 - lam
    lexical = expansion  # (1 - λ) bm25 / max + λ expansion / max, in place
    # Every row is its own: the blocks run on every core at once (query.score.second_core).
    pieces = row_ranges(n, PARALLEL_FUSION_ROWS)

    def mix(piece: tuple[int, int]) -> float:
        top = 0.0
        for a in range(piece[0], piece[1], BLOCK):
            b = min(a + BLOCK, piece[1])
            block = lexical[a:b]
            if top_expansion > 0:
                np.divide(block, np.float32(top_expansion), out=block)
            else:
                block[:] = 0
            np.multiply(block, lam, out=block)
            if top_bm25 > 0:
                mixed = bm25[a:b] / np.float32(top_bm25)
            else:
                mixed = np.zeros(b - a, np.float32)
            np.multiply(mixed, one_minus_lam, out=mixed)
            np.add(mixed, block, out=block)
            top = max(top, float(block.max()))
        return top

    top_lexical = max(in_parallel(mix, pieces), default=0.0)
    rows, values = sparse
    values = w * values
    order = np.argsort(rows, kind="stable")
    rows, values = rows[order], values[order]
    scores = np.empty(n, dtype=np.float32)
    at = _page_rows(part, page.files, n)  # the rows whose page part is not 0, or None

    def fused(piece: tuple[int, int]) -> None:
        starts = list(range(piece[0], piece[1], BLOCK))
        bounds = np.searchsorted(rows, [*starts, piece[1]]).tolist()
        if at is not None:
            page_bounds = np.searchsorted(at[0], [*starts, piece[1]]).tolist()
        for i, a in enumerate(starts):
            b = min(a + BLOCK, piece[1])
            block = lexical[a:b]  # becomes lexical / max ((1 - w) times it: the part)
            if top_lexical > 0:
                np.divide(block, np.float32(top_lexical), out=block)
            else:
                block[:] = 0
            out = scores[a:b]
            np.multiply(block, one_minus_w, out=out)  # the weighted part, where it is summed
            r, v = rows[bounds[i] : bounds[i + 1]] - a, values[bounds[i] : bounds[i + 1]]
            out[r] += v  # the semantic part (0 elsewhere: x + 0 is x)
            np.multiply(out, keep, out=out)
            if at is None:
                np.add(out, np.take(part, page.files[a:b]), out=out)
            else:  # x + 0 is x: only the rows of pages with a part change
                lo, hi = page_bounds[i], page_bounds[i + 1]
                out[at[0][lo:hi] - a] += at[1][lo:hi]

    in_parallel(fused, pieces)
    return Fused(
        scores=scores,
        # (1 - w) * x, then keep * that: the products `with_page` makes of the part
        lexical=keep * (one_minus_w * Scaled(n, base=lexical)),
        semantic=keep * Scaled(n, None, rows, values),
        page=PerFile(part, page.files),  # per chunk when read
    )


# `_blended` finds the rows of pages with a page part by bisection while such pages are at
# most 1 / PAGE_FILES_SHARE of the rows; past that, one gather of all n rows is cheaper.
PAGE_FILES_SHARE = 256


def _page_rows(part: np.ndarray, files: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows (ascending) whose per-file `part` is not 0, and that part at each, by bisection
    over the ascending file ids; None when too many files have one."""
    if part.dtype != np.float32:
        return None
    bits = part.view(np.uint32)  # (not 0 as bits: -0.0 too, which adds nothing either)
    if not len(bits) or bits.max() == 0:  # (a max is quicker than a count)
        return np.zeros(0, dtype=np.intp), part[:0]
    if np.count_nonzero(bits) * PAGE_FILES_SHARE > n:
        return None
    with_part = np.flatnonzero(bits).astype(files.dtype)  # (in its type: no cast of `files`)
    lo = np.searchsorted(files, with_part, side="left")
    sizes = np.searchsorted(files, with_part, side="right") - lo
    total = int(sizes.sum())
    firsts = np.cumsum(sizes) - sizes
    rows = np.repeat(lo - firsts, sizes) + np.arange(total)
    return rows, np.repeat(part[with_part], sizes)


def _scored(lexical_index, like: np.ndarray, rows: np.ndarray, weights: np.ndarray):
    """The expansion terms' scores, in a fresh array."""
    return lexical_index.add_terms(np.zeros_like(like), rows, weights, zero=True)


def _first_best(
    bm25: np.ndarray,
    cosine: np.ndarray,
    params: FusionParams,
    support: np.ndarray,
    top: np.ndarray,
    complete: bool,
    k: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """`best(fuse(bm25, cosine).scores, k)` and those scores from the candidates alone (`support`
    and BM25F's `top`), when the k-th candidate beats every other row's lexical bound; else None."""
    from query.score.vector import ranked_rows

    held = cosine[support]
    if float(held.max()) <= _nth_best(held, params.pool):
        return None  # every best row ties: other rows may score on the dense side too
    w = np.float32(params.dense_weight)
    rows = union_rows(support, top)
    most = float(bm25[top[0]]) if len(top) else 0.0  # = bm25.max(): `top` is best first
    lex = np.zeros(len(rows), dtype=np.float32)
    bound = np.float32(0)
    if most > 0:
        lex = (np.float32(1) - w) * (bm25[rows] / np.float32(most))
        lowest = bm25[top[-1:]] / np.float32(most)
        bound = ((np.float32(1) - w) * lowest)[0]
    sparse = _sparse_semantic(cosine, params.pool, support)
    if sparse is not None:  # the normalised part at `support`, 0 at the other rows
        part = np.zeros(len(rows), dtype=np.float32)
        part[np.searchsorted(rows, sparse[0])] = sparse[1]
        sem = w * part
    else:
        sem = w * normalised_semantic(cosine, params.pool, support)[rows]
    scores = lex + sem
    keep = scores > 0
    chosen, tied = ranked_rows(rows[keep], scores[keep], k)
    if tied:
        return None  # equal scores decide: `best` over all rows picks them as it always has
    values = scores[np.searchsorted(rows, chosen)]
    if not complete and not (len(chosen) == k and values[-1] > bound):
        return None
    return chosen, values


def with_stub_prior(
    fused: Fused,
    page_length: np.ndarray,
    params: FusionParams,
    rows: np.ndarray,
    owned: bool = False,
) -> Fused:
    """Scale down the sections `rows` of stub pages (query.rank.stubs) as their own part
    (`stub`, <= 0), so `--explain` still adds up."""
    short = np.clip(page_length / np.float32(params.stub_length), 0.0, 1.0)
    factor = np.float32(1) - np.float32(params.stub_weight) * (np.float32(1) - short)
    # x + 0 is x: only the cut rows change (in place when handed over)
    cut = (fused.scores[rows] * (factor - np.float32(1))).astype(fused.scores.dtype)
    scores = fused.scores if owned else fused.scores.copy()
    scores[rows] += cut
    part = Scaled(len(scores), None, rows, cut)  # 0 but at the cut rows
    return Fused(
        scores=scores,
        lexical=fused.lexical,
        semantic=fused.semantic,
        page=fused.page,
        stub=part,
    )


LEXICAL_EXACT = 1000  # the best BM25F chunks an IVF pass scores exactly (query.score.vector)
# the best BM25F chunks the first fusion's feedback chunks are looked for among (with the
# rescored rows) after an int8 pass (an IVF pass: its LEXICAL_EXACT)
FIRST_LEXICAL = 100


def _mixed_part(signal: np.ndarray, weight: float) -> tuple[np.float32, np.ndarray]:
    """(1 - w, w * signal / max(signal)): what a mixed-in signal leaves the fused parts, and
    its own additive part."""
    w = np.float32(weight)
    part = normalised_lexical(signal.astype(np.float32, copy=False))  # a new array
    return np.float32(1) - w, np.multiply(part, w, out=part)  # (x * w is w * x: in place)


@dataclass(frozen=True)
class PerFile:
    """One value per chunk held per file (chunk i's is `values[files[i]]`): the page BM25 as
    fusion reads it, the same bits; `np.asarray` gives the per-chunk array."""

    values: np.ndarray
    files: np.ndarray

    def __getitem__(self, rows):
        return self.values[self.files[rows]]

    def __len__(self) -> int:
        return len(self.files)

    def __array__(self, dtype=None, copy=None):
        out = np.take(self.values, self.files)
        return out if dtype is None else out.astype(dtype)


def with_page(fused: Fused, page: PerFile, weight: float, owned: bool = False) -> Fused:
    """Mix page-level BM25 into each section: (1 - μ) * fused + μ * page / max(page), the parts
    additive for `--explain`."""
    keep, part = _mixed_part(page.values, weight)
    part = np.take(part, page.files)  # (`take`: faster than fancy indexing here)
    # in place when `owned`; the other parts rescaled only where `--explain` reads them
    scores = np.multiply(fused.scores, keep, out=fused.scores if owned else None)
    np.add(scores, part, out=scores)
    return Fused(
        scores=scores,
        lexical=keep * _part(fused.lexical),
        semantic=keep * _part(fused.semantic),
        page=part,
    )
