"""Vector scoring: exact over the mapped float32 matrix, or an int8 / IVF first pass whose best
rows are rescored exactly, plus the top-k selection (docs/architecture.md, "Vector scoring")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Below this many rows a product is cheaper than handing it to another thread.
PARALLEL_ROWS = 20_000
# The least rows of a piece of an int8 pass handed to another thread (docs/benchmarks.md,
# "Session 11: search threads on idle cores").
PARALLEL_INT8_ROWS = 32_768
# Rows rescored exactly after the int8 pass (10x hybrid fusion's pool of 100).
RESCORE_DEPTH = 1000
# With page evidence, the feedback direction is estimated on the mixed vectors: its rows'
# rescored set is this many times deeper.
MOVED_DEPTH_FACTOR = 4
# `auto`: the int8 pass only from this many chunks on (below, float32 is already cheap).
AUTO_MIN_ROWS = 20_000
# The IVF pass probes the nearest lists until they hold this share of the rows (at least
# IVF_MIN_PROBE_ROWS), then rescores the best IVF_RESCORE_DEPTH (docs/benchmarks.md,
# "IVF first pass").
IVF_PROBE_SHARE = 0.15
IVF_MIN_PROBE_ROWS = 16_000
IVF_RESCORE_DEPTH = 500
IVF_MOVED_DEPTH_FACTOR = 2


def row_dots(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix @ vector through einsum's single-threaded loop, not BLAS: OpenBLAS's threaded
    sgemv stalls when another core is busy. A sharded matrix computes it per shard."""
    fanned = getattr(matrix, "row_dots", None)
    if fanned is not None:
        return fanned(vector)
    scores = np.einsum("ij,j->i", matrix, vector.astype(np.float32, copy=False))
    # A NaN row (a damaged index, an old provider answer) scores nothing rather than
    # turning every normalised hybrid score into NaN.
    if not np.isfinite(scores).all():
        np.nan_to_num(scores, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return scores


@dataclass(frozen=True, eq=False, repr=False)
class Int8Rows:
    """An int8 copy of a float32 matrix with one scale per column (max |x| / 127), so each
    dimension uses the whole int8 range."""

    codes: np.ndarray  # (n, d) int8, C-contiguous
    scale: np.ndarray  # (d,) float32

    @classmethod
    def of(cls, matrix: np.ndarray, block: int = 65_536) -> Int8Rows:
        """Quantise in blocks of rows, so the float32 temporaries are one block, not the matrix."""
        n, d = matrix.shape
        top = np.zeros(d, dtype=np.float32)
        for a in range(0, n, block):
            part = np.nan_to_num(matrix[a : a + block], nan=0.0, posinf=0.0, neginf=0.0)
            np.maximum(top, np.abs(part).max(axis=0, initial=0.0), out=top)
        scale = np.where(top > 0, top / np.float32(127), np.float32(1)).astype(np.float32)
        codes = np.empty((n, d), dtype=np.int8)
        for a in range(0, n, block):
            part = np.nan_to_num(matrix[a : a + block], nan=0.0, posinf=0.0, neginf=0.0)
            codes[a : a + block] = np.clip(np.rint(part / scale), -127, 127)
        return cls(codes, scale)

    def dots(self, vectors: np.ndarray) -> np.ndarray:
        """Approximate matrix @ v for each row v of `vectors` (k, d), as (k, n) float32, in one
        pass over the codes (the query is quantised too: exact integer sums)."""
        import simsimd

        query, step = self._query(vectors)
        # codes first: each row of codes is read once for all k vectors, not k times.
        raw = np.asarray(simsimd.cdist(self.codes, query, metric="dot", out_dtype="float32"))
        return np.multiply(raw.T, step[:, None], order="C")

    def dots_spans(
        self, vectors: np.ndarray, spans: list[tuple[int, int]], order: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """`dots` over the rows of each (start, end) span only, concatenated (and `order` of them),
        scored in pieces on all cores: the same bits as one call."""
        import simsimd

        from query.score.second_core import in_parallel, row_ranges

        query, step = self._query(vectors)
        m = sum(b - a for a, b in spans)
        raw = np.empty((m, len(vectors)), dtype=np.float32)
        ids = np.empty(m, dtype=order.dtype) if order is not None else None

        def fill(pieces: list[tuple[int, int, int]]) -> None:
            for at, a, b in pieces:
                # (not cdist's `out=`: simsimd 6.5 returns None from it without a reference,
                # which under Python 3.11 frees None after enough calls)
                raw[at : at + b - a] = simsimd.cdist(
                    self.codes[a:b], query, metric="dot", out_dtype="float32"
                )
                if ids is not None:
                    ids[at : at + b - a] = order[a:b]

        in_parallel(fill, _span_pieces(spans, row_ranges(m, PARALLEL_INT8_ROWS)))
        return np.multiply(raw.T, step[:, None], order="C"), ids

    def _query(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each vector times the scales, quantised to int8 with its own step."""
        weighted = vectors.astype(np.float32) * self.scale
        top = np.abs(weighted).max(axis=1)
        step = np.where(top > 0, top / np.float32(127), np.float32(1)).astype(np.float32)
        return np.rint(weighted / step[:, None]).astype(np.int8), step


@dataclass(frozen=True, eq=False, repr=False)
class PageSide:
    """Page-level dense evidence: each multi-section page's unit mean vector, its sections and
    their page row, `page_of` per chunk (-1: none); `compact`, an int8 copy of every chunk's
    mixed vector (1 - rho) * section + rho * page."""

    vectors: np.ndarray
    chunks: np.ndarray
    rows: np.ndarray
    page_of: np.ndarray
    compact: Int8Rows | None = None
    rho: float = 0.0

    @classmethod
    def of(cls, pages, matrix: np.ndarray, rho: float = 0.0) -> PageSide:
        """`rho` > 0: with the int8 copy of the mixed vectors (a pass over the matrix)."""
        page_of = np.full(matrix.shape[0], -1, dtype=np.int64)
        page_of[pages.chunks] = pages.rows
        compact = None
        if rho > 0 and len(pages.chunks):
            compact = Int8Rows.of(_MixedRows(matrix, pages.vectors, page_of, np.float32(rho)))
        return cls(pages.vectors, pages.chunks, pages.rows, page_of, compact, rho)


@dataclass(frozen=True, eq=False, repr=False)
class _MixedRows:
    """The mixed vectors of `PageSide.compact`, made a block of rows at a time (Int8Rows.of
    slices them): never a whole float32 copy of the matrix."""

    matrix: np.ndarray
    pages: np.ndarray
    page_of: np.ndarray
    rho: np.float32

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        part = np.array(self.matrix[rows], dtype=np.float32)
        page = self.page_of[rows]
        multi = page >= 0
        part[multi] = (np.float32(1) - self.rho) * part[multi] + self.rho * self.pages[page[multi]]
        return part


@dataclass(frozen=True, eq=False, repr=False)
class IvfSide:
    """The IVF first pass of a long-lived reader: the index's lists (`kernel.ivf`) and an int8
    copy of the rows in list order (mixed as `PageSide.compact` when `rho` > 0)."""

    centroids: np.ndarray
    offsets: np.ndarray
    order: np.ndarray
    codes: Int8Rows
    rho: float = 0.0
    below: np.ndarray | None = None  # (n,) float32: -(1 + i) / 2^21, below any cap

    @classmethod
    def of(cls, lists, matrix: np.ndarray, pages: PageSide | None = None, rho: float = 0.0):
        order = np.asarray(lists.rows, dtype=np.int64)
        source = matrix
        if pages is not None and rho > 0 and len(pages.chunks):
            source = _MixedRows(matrix, pages.vectors, pages.page_of, np.float32(rho))
        else:
            rho = 0.0
        codes = Int8Rows.of(_ReorderedRows(source, order))
        offsets = np.asarray(lists.offsets, dtype=np.int64)
        below = -np.arange(1, len(order) + 1, dtype=np.float32) * np.float32(2.0**-21)
        return cls(np.asarray(lists.centroids, np.float32), offsets, order, codes, rho, below)

    def probe(self, vectors: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, (k, m) int8 estimates) of the rows in the lists nearest the query
        (`vectors[0]`) and nearest the moved query q + beta * direction (`vectors[1]`)."""
        n = len(self.order)
        wanted = min(n, max(IVF_MIN_PROBE_ROWS, int(IVF_PROBE_SHARE * n)))
        near = self.centroids @ vectors.T  # (lists, k)
        picked = _nearest_lists(near[:, 0], self.offsets, wanted)
        if vectors.shape[0] > 1:
            moved = near[:, 0] + np.float32(beta) * near[:, 1]
            picked = union_rows(picked, _nearest_lists(moved, self.offsets, wanted))
        # Adjacent lists are one run of the list-ordered copy: each run is scored where it
        # lies (no gather of the probed rows).
        picked = np.sort(picked)
        breaks = np.flatnonzero(np.diff(picked) != 1) + 1
        first = picked[np.concatenate(([0], breaks))]
        last = picked[np.append(breaks - 1, len(picked) - 1)]
        begin, end = self.offsets[first].tolist(), self.offsets[last + 1].tolist()
        spans = list(zip(begin, end, strict=True))
        approx, ids = self.codes.dots_spans(vectors, spans, self.order)
        return ids, approx


def _span_pieces(
    spans: list[tuple[int, int]], ranges: list[tuple[int, int]]
) -> list[list[tuple[int, int, int]]]:
    """The (start, end) spans of rows, laid end to end, cut at each range's bounds: per range
    of output positions, its (position, start, end) pieces."""
    out: list[list[tuple[int, int, int]]] = [[] for _ in ranges]
    i, at = 0, 0
    for a, b in spans:
        while a < b:
            while at >= ranges[i][1]:
                i += 1
            take = min(b - a, ranges[i][1] - at)
            out[i].append((at, a, a + take))
            a, at = a + take, at + take
    return out


def _nearest_lists(score: np.ndarray, offsets: np.ndarray, wanted: int) -> np.ndarray:
    """The lists of highest centroid score, best first, until they hold `wanted` rows."""
    ranked = np.argsort(-score, kind="stable")
    held = np.cumsum(np.diff(offsets)[ranked])
    return ranked[: int(np.searchsorted(held, wanted)) + 1]


@dataclass(frozen=True, eq=False, repr=False)
class _ReorderedRows:
    """Rows of `source` in `order`, a block at a time (Int8Rows.of slices them)."""

    source: object
    order: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.order), self.source.shape[1])

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.asarray(self.source[self.order[rows]], dtype=np.float32)


class DenseScorer:
    """Cosines of every row against a query (and the feedback direction), exact or by an int8
    pass plus exact rescoring; rows not rescored are capped below the rescored ones, so a top-k
    among them is the exact one."""

    def __init__(
        self,
        matrix: np.ndarray,
        compact: Int8Rows | None = None,
        depth: int = 0,
        pages: PageSide | None = None,
        lists: IvfSide | None = None,
    ):
        self.matrix = matrix
        self.compact = compact
        self.depth = depth or RESCORE_DEPTH
        self.pages = pages
        self.lists = lists
        # After an IVF or int8 pass: the rows scored exactly, every other row at most their
        # lowest (fusion reads its pool floor from them alone); else None.
        self.support: np.ndarray | None = None
        # Set by hybrid fusion, which reads few rows: the IVF pass's scores come as `Spread`s.
        self.lazy = False

    def mixed(
        self,
        query: np.ndarray,
        direction: np.ndarray | None = None,
        beta: float = 0.0,
        keep: int = 0,
        rho: float = 0.0,
        also: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw cosine, cosine, moved): with `pages` and rho > 0 a multi-section page's section
        scores (1 - rho) * cos(q, section) + rho * cos(q, page); moved adds beta * (section .
        direction). `keep`: at least that many rows rescored; `also`: rows always scored exactly."""
        self.support = None
        query = query.astype(np.float32, copy=False)
        if direction is not None:
            direction = direction.astype(np.float32, copy=False)
        pages = self.pages if rho > 0 and self.pages is not None else None
        if pages is not None and not len(pages.chunks):
            pages = None
        depth = max(self.depth, keep)
        lists = self.lists
        if lists is not None and (lists.rho != rho if pages is not None else lists.rho != 0):
            lists = None  # its copy was made for another mix: the other passes
        fast = (
            lists is not None
            or self.compact is not None
            or (pages is not None and pages.compact is not None and pages.rho == rho)
        )
        if lists is not None:  # the probed rows' estimates: fewer rows rescored
            depth = max(IVF_RESCORE_DEPTH, keep)
        if not fast or self.matrix.shape[0] <= depth:
            return self._exact(query, direction, np.float32(beta), pages, np.float32(rho))
        return self._rescored(
            query, direction, np.float32(beta), pages, np.float32(rho), depth, lists, also
        )

    def _exact(self, query, direction, beta, pages, rho):
        """Every row scored from float32; the page mix reuses the rows' products (no gather
        of the multi-section pages' sections)."""
        moved_dots = None
        if direction is None:
            cosine = row_dots(self.matrix, query)
        elif self.matrix.shape[0] < PARALLEL_ROWS:
            cosine = row_dots(self.matrix, query)
            moved_dots = row_dots(self.matrix, direction)
        else:
            # Both products at once, the second on the other core (query.score.second_core).
            from query.score.second_core import in_background

            moved = in_background(row_dots, self.matrix, direction)
            cosine = row_dots(self.matrix, query)
            moved_dots = moved.result()
        raw = cosine
        if pages is not None:
            page_cosine = row_dots(pages.vectors, query)[pages.rows]
            mix = (np.float32(1) - rho) * cosine[pages.chunks] + rho * page_cosine
            cosine = cosine.copy()
            cosine[pages.chunks] = mix
        if moved_dots is None:
            return raw, cosine, cosine
        semantic = raw + beta * moved_dots
        if pages is not None:
            semantic[pages.chunks] = mix + beta * moved_dots[pages.chunks]
        return raw, cosine, semantic

    def _rescored(self, query, direction, beta, pages, rho, depth, lists=None, also=None):
        """The int8 pass (over every row, or the probed IVF lists), the best `depth` rows of each
        score rescored exactly, the rest capped below them."""
        if lists is not None:
            mixed = lists.rho > 0
        else:
            mixed = pages is not None and pages.compact is not None and pages.rho == rho
        rows = query[None] if direction is None else np.stack([query, direction])
        # With pages, both directions on the mixed vectors in one pass: the direction's is only
        # an estimate of (section . direction), so the moved score's rescored set is deeper.
        ids = None
        if lists is not None:
            ids, approx = lists.probe(rows, float(beta))
        else:
            approx = (pages.compact if mixed else self.compact).dots(rows)
        raw = cosine = approx[0]
        moved_dots = approx[1] if direction is not None else None
        moved_depth = (IVF_MOVED_DEPTH_FACTOR if ids is not None else MOVED_DEPTH_FACTOR) * depth
        moved_depth = moved_depth if mixed else depth
        if pages is not None and not mixed:  # another rho than the copy's: mix here
            cosine = raw.copy()
            if ids is None:
                page_cosine = row_dots(pages.vectors, query)[pages.rows]
                cosine[pages.chunks] *= np.float32(1) - rho
                cosine[pages.chunks] += rho * page_cosine
            else:
                page_rows = pages.page_of[ids]
                multi = np.flatnonzero(page_rows >= 0)
                page_cosine = row_dots(pages.vectors[page_rows[multi]], query)
                cosine[multi] = (np.float32(1) - rho) * raw[multi] + rho * page_cosine
        moved = cosine if direction is None else cosine + beta * moved_dots
        m = len(cosine)
        picked = best_rows(cosine, min(depth, m))
        if direction is not None:
            picked = union_rows(picked, best_rows(moved, min(moved_depth, m)))
        if ids is not None:  # local positions -> chunk ids, plus the rows asked for
            picked = ids[picked]
            if also is not None and len(also):
                # one sorted set (cheaper than np.setdiff1d's hashed unique); rows in order
                # make the gather below walk the map forward
                picked = union_rows(picked, np.asarray(also, dtype=picked.dtype))
        exact = self.matrix[picked]  # gather: depth rows, not n
        exact_raw = row_dots(exact, query)
        exact_cos = exact_raw
        if pages is not None:
            page_rows = pages.page_of[picked]
            multi = np.flatnonzero(page_rows >= 0)
            if len(multi):
                page_cosine = row_dots(pages.vectors[page_rows[multi]], query)
                exact_cos = exact_raw.copy()
                exact_cos[multi] = (np.float32(1) - rho) * exact_raw[multi] + rho * page_cosine
        exact_moved = None
        if direction is not None:
            exact_moved = exact_cos + beta * row_dots(exact, direction)
        if ids is not None:
            self.support = picked
            spread = _spread(
                lists.below,
                ids,
                picked,
                raw,
                cosine,
                moved,
                exact_raw,
                exact_cos,
                exact_moved,
                pages is not None,
                direction is not None,
            )
            # (whole arrays unless the caller reads a few rows: `np.asarray` of a view)
            return spread if self.lazy else tuple(np.asarray(a) for a in spread)
        # every other row is capped at the rescored rows' lowest value (each score's own)
        self.support = picked
        if pages is None:
            cosine = raw = _with_exact(raw, picked, exact_raw)  # in place: approx is ours
        else:
            # The raw cosine is only shown (`explain`): outside the rescored rows, the
            # mixed estimate stands in for it.
            raw = _with_exact(cosine.copy() if mixed else raw, picked, exact_raw)
            cosine = _with_exact(cosine, picked, exact_cos)
        if direction is None:
            return raw, cosine, cosine
        return raw, cosine, _with_exact(moved, picked, exact_moved)


def _filled(below, ids, picked, approx, exact) -> np.ndarray:
    """One of `_spread`'s arrays, in full."""
    cap = exact.min() if len(exact) else np.float32(0)
    out = below + cap
    out[ids] = np.minimum(approx, cap)
    out[picked] = exact
    return out


def _spread(
    below, ids, picked, raw, cosine, moved, exact_raw, exact_cos, exact_moved, paged, moves
):
    """The IVF pass's n-length scores as lazy `Spread` views; rows no probed list holds sit
    below the cap by `below` (distinct values keep fusion's `np.partition` fast)."""
    cos = Spread(below, ids, cosine, picked, exact_cos)
    shown = Spread(below, ids, cosine if paged else raw, picked, exact_raw) if paged else cos
    if not moves:
        return shown, cos, cos
    return shown, cos, Spread(below, ids, moved, picked, exact_moved)


class Spread:
    """An IVF pass's n-length scores, built only when read beyond the rescored rows."""

    __array_ufunc__ = None  # no silent arithmetic: callers read rows or ask for the array

    def __init__(self, below, ids, approx, picked, exact):
        self.below, self.ids, self.approx = below, ids, approx
        self.picked, self.exact = picked, exact
        self._full: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int]:
        return self.below.shape

    def __len__(self) -> int:
        return len(self.below)

    def full(self) -> np.ndarray:
        if self._full is None:
            self._full = _filled(self.below, self.ids, self.picked, self.approx, self.exact)
        return self._full

    def __getitem__(self, rows):
        if rows is self.picked:
            return self.exact.copy()
        return self.full()[rows]

    def __array__(self, dtype=None, copy=None):
        full = self.full()
        return full if dtype is None else full.astype(dtype)


def best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The k best rows, in no order; ties with the k-th best are the partition's choice.
    Of many rows, only those above `top_rows`' sampled cut are partitioned."""
    n = scores.shape[0]
    found = _above_cut(scores, k, None, False) if k < n else None
    if found is not None:
        rows, values = found
        return rows[np.argpartition(values, len(values) - k)[len(values) - k :]]
    return np.argpartition(scores, n - k)[n - k :]


def _with_exact(approx: np.ndarray, rows: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """approx capped at min(exact) everywhere, exact at `rows` (in place: approx is ours)."""
    np.minimum(approx, exact.min() if len(exact) else 0.0, out=approx)
    approx[rows] = exact
    return approx


def dense_scorer(index, pages=None, rho: float = 0.0, lists: bool = True) -> DenseScorer:
    """The scorer for this reader's snapshot, by MDVDB_SEARCH_FIRST_PASS (exact, int8, ivf, auto).
    `auto` builds a copy only from the snapshot's second vector query: a one-shot search would
    use it once. `lists` False: the int8 pass over every row instead of the IVF lists."""
    snap = index.snapshot
    matrix = snap.vectors
    mode = getattr(index.config, "search_first_pass", "auto")
    n = matrix.shape[0]
    sharded = getattr(matrix, "scorer", None)
    if sharded is not None:  # sharded: each shard runs this function on its own rows
        seen = snap.cache.get("vector_queries", 0)
        snap.cache["vector_queries"] = seen + 1
        exact = mode == "exact" or n <= RESCORE_DEPTH
        exact = exact or (mode == "auto" and (n < AUTO_MIN_ROWS or seen == 0))
        # "ivf": a shard's own first pass (IVF lists where it has them, else int8)
        return sharded("exact" if exact else "int8" if mode == "int8" else "ivf")
    mixed = pages is not None and rho > 0 and len(pages.chunks) > 0
    plain_side = (lambda: PageSide.of(pages, matrix, 0.0)) if mixed else None
    if not isinstance(matrix, np.ndarray):  # sharded: each shard's exact scan, in parallel
        return DenseScorer(matrix, pages=_kept(snap, ("page_side", 0.0), plain_side))
    built = ("page_side", float(rho)) in snap.cache or "int8_rows" in snap.cache
    ivf_key = ("ivf_side", float(rho) if mixed else 0.0)
    if (
        mode == "auto"
        and n >= AUTO_MIN_ROWS
        and not (built or ivf_key in snap.cache or snap.cache.get("vector_queries", 0))
    ):
        # The snapshot's first vector query scans exactly, decided without reading the IVF
        # meta or importing simsimd, which a one-shot `mdvdb search` would not use.
        snap.cache["vector_queries"] = 1
        quantise = listed = False
    else:
        from kernel import ivf

        listed = lists and mode in ("auto", "ivf")
        listed = listed and isinstance(snap.meta.get(ivf.META_KEY), dict)
        small = mode == "auto" and n < AUTO_MIN_ROWS and not listed
        depth = IVF_RESCORE_DEPTH if listed else RESCORE_DEPTH
        quantise = not (mode == "exact" or n <= depth or small)
        quantise = quantise and _has_simsimd()  # without its wheel: the exact scans
        if quantise and not built and ivf_key not in snap.cache:
            seen = snap.cache.get("vector_queries", 0)
            snap.cache["vector_queries"] = seen + 1
            quantise = not (mode == "auto" and seen == 0)
    lists = _ivf_lists(snap, n, matrix.shape[1]) if quantise and listed else None
    if quantise and lists is not None:
        # The IVF lists' int8 copy (of the mixed vectors, in list order) takes the place
        # of the whole-matrix one.
        side = _kept(snap, ("page_side", 0.0), plain_side)
        probe = _kept(snap, ivf_key, lambda: IvfSide.of(lists, matrix, side, rho if mixed else 0.0))
        return DenseScorer(matrix, pages=side, lists=probe)
    compact = side = None
    if quantise and not mixed:
        compact = _kept(snap, "int8_rows", lambda: Int8Rows.of(matrix))
    if mixed:
        # The mixed vectors' int8 copy takes the place of the rows' one.
        key = ("page_side", float(rho)) if quantise else ("page_side", 0.0)
        side = _kept(snap, key, lambda: PageSide.of(pages, matrix, key[1]))
    return DenseScorer(matrix, compact, pages=side)


def _kept(snap, key, build):
    """`snap.cache[key]`, made by `build()` on first use; None without a `build`."""
    if build is None:
        return None
    found = snap.cache.get(key)
    if found is None:
        found = snap.cache[key] = build()
    return found


def _ivf_lists(snap, n: int, dims: int):
    """The snapshot's sound IVF lists (kernel.ivf), or None (none, or damaged: then the
    int8 / exact passes answer, and `status --verify` names the damage)."""
    found = snap.cache.get("ivf_lists", False)
    if found is False:
        from kernel import ivf

        found = snap.cache["ivf_lists"] = ivf.read(snap.table(ivf.TABLE), snap.meta, n, dims)
    return found


def _has_simsimd() -> bool:
    try:
        import simsimd  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True, eq=False, repr=False)
class Above:
    """Every finite row of a score array above `cut` (at or above unless `strict`), as one
    `top_rows` found them, plus rows that may have risen since: a later selection reads only
    these."""

    rows: np.ndarray
    cut: float
    strict: bool

    def rising(self, rows: np.ndarray) -> Above:
        """This cut after `rows` may have risen too."""
        return Above(union_rows(self.rows, rows), self.cut, self.strict)

    def select(self, scores, k: int, mask, positive: bool) -> np.ndarray | None:
        """`top_rows(scores, k, mask, positive)` from these rows, or None when fewer than k
        allowed rows are still above the cut (then the k best may lie anywhere)."""
        rows = self.rows
        values = scores[rows]
        keep = values > self.cut if self.strict else values >= self.cut
        keep &= np.isfinite(values)
        if mask is not None:
            keep &= mask[rows]
        if positive:
            keep &= values > 0
        if int(np.count_nonzero(keep)) < k:
            return None
        return ranked_rows(rows[keep], values[keep], k)[0]


# `top_rows`' cut: about CUT_ROWS_PER_ROW rows per row wanted (at least CUT_MIN_ROWS) above
# it (docs/benchmarks.md, "Warm hybrid on every core, top-k without deep cuts").
CUT_RANK = 32
CUT_ROWS_PER_ROW = 4
CUT_MIN_ROWS = 2048
SAMPLE_MIN = 2048
# Below this many rows (or when k is more than this share of them) the plain partition answers.
SAMPLED_MIN_ROWS = 32_768
SAMPLED_MAX_SHARE = 128


def top_rows(
    scores: np.ndarray,
    k: int,
    mask: np.ndarray | None = None,
    positive: bool = False,
    above: Above | None = None,
    seen: list | None = None,
) -> np.ndarray:
    """The k best rows of `scores`, best first, ties by descending row (docs/search-quality.md,
    "Tie order"); rows where `mask` is False, non-finite or (`positive`) <= 0 never count.
    A cut sampled from the scores (or `above`'s) spares a partition of all n rows: same answer.
    `seen`: given no mask and no `positive`, the `Above` this call found is appended."""
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if above is not None:
        found = above.select(scores, k, mask, positive)
        if found is not None:
            return found
    cut = [] if seen is not None and mask is None and not positive else None
    found = _above_cut(scores, k, mask, positive, cuts=cut)
    if found is not None and cut:
        seen.append(Above(found[0], *cut[-1]))
    if found is None:
        rows = np.flatnonzero(mask) if mask is not None else None
        values = scores if rows is None else scores[rows]
        keep = np.isfinite(values)
        if positive:
            keep &= values > 0
        if not keep.all():
            picked = np.flatnonzero(keep)
            rows = picked if rows is None else rows[picked]
            values = values[picked]
        elif rows is None:
            rows = np.arange(n)
        found = rows, values
    return ranked_rows(found[0], found[1], k)[0]


def _above_cut(
    scores: np.ndarray,
    k: int,
    mask: np.ndarray | None,
    positive: bool,
    cuts: list | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows ascending, scores) of every allowed finite row at or above a sampled cut, when at
    least k are; None otherwise. `cuts`: (cut, strict) of the answer appended."""
    n = scores.shape[0]
    if n < SAMPLED_MIN_ROWS or k * SAMPLED_MAX_SHARE > n:
        return None
    target = max(CUT_ROWS_PER_ROW * k, CUT_MIN_ROWS)  # rows wanted above the cut
    size = min(n // 2, max(SAMPLE_MIN, CUT_RANK * n // target))
    sample = scores[:: max(1, n // size)]
    m = len(sample)
    rank = min(m, max(1, round(target * m / n)))  # the sample's rank-th ~ target rows deep
    ordered = None
    for depth in dict.fromkeys((rank, min(m, 8 * rank))):
        if ordered is None:
            ordered = np.partition(sample, m - depth)
        else:
            ordered.partition(m - depth)
        cut = ordered[m - depth]
        if not np.isfinite(cut):
            return None
        if positive and not cut > 0:
            # every positive row: the whole answer, however few
            return _allowed(np.flatnonzero(scores > 0), scores, mask)
        for strict in (True, False):  # (rows above the cut are fewer when many tie)
            rows = _rows_above(scores, cut, strict)
            rows, values = _allowed(rows, scores, mask)
            if len(rows) >= k:
                if cuts is not None:
                    cuts.append((cut, strict))
                return rows, values
    return None


# `_rows_above` compares in pieces on every core from this many rows a piece.
PARALLEL_COMPARE_ROWS = 131_072


def _rows_above(scores: np.ndarray, cut, strict: bool) -> np.ndarray:
    """`np.flatnonzero(scores > cut)` (`>=` unless `strict`), in pieces of rows on every
    core (query.score.second_core) when there are many: the same rows, ascending."""
    from query.score.second_core import in_parallel, row_ranges

    def above(span: tuple[int, int]) -> np.ndarray:
        part = scores[span[0] : span[1]]
        return np.flatnonzero(part > cut if strict else part >= cut) + span[0]

    ranges = row_ranges(scores.shape[0], PARALLEL_COMPARE_ROWS)
    if len(ranges) < 2:
        return np.flatnonzero(scores > cut if strict else scores >= cut)
    return np.concatenate(in_parallel(above, ranges))


def _allowed(rows: np.ndarray, scores: np.ndarray, mask: np.ndarray | None):
    """(rows, their scores) kept where `mask` allows and the score is finite."""
    if mask is not None:
        rows = rows[mask[rows]]
    values = scores[rows]
    finite = np.isfinite(values)
    if not finite.all():
        rows, values = rows[finite], values[finite]
    return rows, values


def ranked_rows(rows: np.ndarray, values: np.ndarray, k: int) -> tuple[np.ndarray, bool]:
    """The k best of (rows ascending, finite values), best first, ties by row descending, and
    whether a tie decided it."""
    m = len(rows)
    tied = False
    if m > k:
        v = np.partition(values, m - k)[m - k]  # the k-th best value
        above = values > v
        level = np.flatnonzero(values == v)
        need = k - int(np.count_nonzero(above))
        tied = len(level) > need
        chosen = np.sort(np.concatenate((np.flatnonzero(above), level[len(level) - need :])))
        rows, values = rows[chosen], values[chosen]
    order = np.lexsort((-rows, -values))
    if not tied and len(order) > 1:
        ranked = values[order]
        tied = bool(np.any(ranked[1:] == ranked[:-1]))
    return rows[order].astype(np.int64, copy=False), tied


def union_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.union1d(a, b)` (sorted distinct rows), by one sort of both: NumPy 2's union1d
    goes through a hashed `unique`, many times dearer for these sizes."""
    rows = np.concatenate((a, b))
    if len(rows) < 2:
        return rows
    rows.sort()
    keep = np.empty(len(rows), dtype=bool)
    keep[0] = True
    np.not_equal(rows[1:], rows[:-1], out=keep[1:])
    return rows[keep]


def distinct(
    values: np.ndarray, counts: bool = False, inverse: bool = False
) -> tuple[np.ndarray, ...]:
    """`np.unique(values, return_counts=, return_inverse=)` of a 1-D integer array, by one sort
    (cheaper than np.unique's Python steps)."""
    values = np.asarray(values).ravel()
    if inverse:
        perm = values.argsort()
        ordered = values[perm]
    else:
        ordered = np.sort(values)
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    out: tuple[np.ndarray, ...] = (ordered[first],)
    if inverse:
        where = np.empty(len(ordered), dtype=np.intp)
        where[perm] = np.cumsum(first) - 1
        out += (where,)
    if counts:
        starts = np.flatnonzero(first)
        out += (np.diff(np.append(starts, len(ordered))),)
    return out


def page_sums(vectors: np.ndarray, offsets: np.ndarray, count: np.ndarray) -> np.ndarray:
    """`np.add.reduceat(vectors, offsets, axis=0)` bit for bit, summed a section at a time over
    pages of equal length (reduceat's inner loop is slow); `tests/test_cold_start.py` checks it."""
    out = np.empty((len(count), vectors.shape[1]), dtype=vectors.dtype)
    long = count > 8
    for size in np.unique(count[~long], return_counts=True)[0].tolist():
        pages = np.flatnonzero(count == size)
        first = offsets[pages]
        if size == 1:
            out[pages] = vectors[first]
            continue
        rest = vectors[first + 1]
        for k in range(2, size):
            rest = rest + vectors[first + k]
        out[pages] = vectors[first] + rest
    if long.any():
        pages = np.flatnonzero(long)
        rows = np.concatenate([np.arange(offsets[p], offsets[p] + count[p]) for p in pages])
        local = np.cumsum(count[pages]) - count[pages]
        out[pages] = np.add.reduceat(vectors[rows], local, axis=0)
    return out


def multi_section_pages(
    files: np.ndarray, vectors: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(first chunk, chunks, page of each chunk, unit vector sums) of the pages of several
    sections, from each chunk's file id; None if there is none."""
    if not len(files):
        return None
    first, count, offsets, chunks, rows = page_layout(files)
    if not len(first):
        return None
    if isinstance(vectors, np.ndarray) and vectors.dtype == np.float32:
        # A page's sections are contiguous rows: summed where they lie in the map, the same
        # additions as over a gathered copy, without the copy.
        sums = page_sums(vectors, first, count)
    else:
        sums = page_sums(np.asarray(vectors[chunks], dtype=np.float32), offsets, count)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return first, chunks, rows, sums / np.maximum(norms, np.float32(1e-12))


def page_layout(files: np.ndarray) -> tuple[np.ndarray, ...]:
    """Where the pages of several sections are: each one's first chunk and section count, where
    its sections start among `chunks`, the chunks and the page of each."""
    starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]])
    sizes = np.diff(np.r_[starts, len(files)])
    multi = sizes > 1
    first, count = starts[multi], sizes[multi]
    rows = np.repeat(np.arange(len(count)), count)
    offsets = np.cumsum(count) - count
    chunks = first[rows] + (np.arange(int(count.sum())) - offsets[rows])
    return first, count, offsets, chunks, rows


@dataclass(eq=False, repr=False)
class PageVectors:
    """The pages of several sections: their unit mean vectors and, per section, its page row."""

    vectors: np.ndarray
    chunks: np.ndarray
    rows: np.ndarray


def page_vectors_of(files: np.ndarray, vectors: np.ndarray) -> PageVectors:
    """The `PageVectors` of an index's rows (a one-file index, or one shard's own rows)."""
    pages = multi_section_pages(files, vectors)
    if pages is None:
        empty = np.zeros(0, dtype=np.int64)
        return PageVectors(np.zeros((0, vectors.shape[1]), dtype=np.float32), empty, empty)
    _, chunks, rows, unit = pages
    return PageVectors(unit, chunks, rows)
