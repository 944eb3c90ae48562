"""Governed ranking: after relevance, a multiplicative factor from each page's `confidence`
and `updated` frontmatter, ties broken by the newer date (docs/agents.md); and the opt-in
recency decay."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from query.snapshot import Reader

# Snapshots already checked for governance fields: (path, inode, mtime_ns) -> has fields.
_DETECTED: dict[tuple[str, int, int], bool] = {}


def enabled(index: Reader, requested: bool | None) -> bool:
    """`requested` (from --govern/--no-govern) wins; otherwise the MDVDB_GOVERN setting,
    where `auto` means on only if some indexed page carries one of the fields."""
    if requested is not None:
        return requested
    setting = index.config.govern
    if setting != "auto":
        return setting == "on"
    return corpus_has_fields(index)


def corpus_has_fields(index: Reader) -> bool:
    snap = index.snapshot
    key = (str(snap.file.path), snap.file.inode, snap.file.mtime_ns)
    if key not in _DETECTED:
        cfg = index.config
        fields = (cfg.govern_confidence_field, cfg.govern_updated_field)
        needles = [f'"{name}":'.encode() for name in fields if name]
        _DETECTED.clear()  # only the current snapshot matters
        _DETECTED[key] = _column_contains(snap.table("files").column("frontmatter"), needles)
    return _DETECTED[key]


def _column_contains(column, needles: list[bytes]) -> bool:
    """Whether any page's frontmatter JSON holds `"key":`, by one find over the column's raw UTF-8
    buffer (no per-row decoding, no pyarrow.compute); once per published index."""
    for chunk in column.chunks:
        data = chunk.buffers()[2]
        if data is None:
            continue
        raw = bytes(data)  # a pyarrow Buffer, or a memoryview (kernel.arrow_lite)
        if any(raw.find(n) >= 0 for n in needles):
            return True
    return False


def candidates(limit: int) -> int:
    """How many relevance-ranked results to govern so that `limit` good ones come out."""
    return max(limit * 3, limit + 20)


def factor(value: Any, weights: dict[str, float]) -> float:
    if value is None:
        return 1.0
    return weights.get(str(value).strip().lower(), 1.0)


def timestamp(value: Any) -> float:
    """A sortable time for an `updated` value (ISO date or datetime, or epoch seconds);
    missing or unreadable counts as oldest."""
    if value is None or isinstance(value, bool):
        return float("-inf")
    if isinstance(value, int | float):
        return float(value)
    return _parsed(str(value).strip())


@lru_cache(maxsize=4096)
def _parsed(text: str) -> float:
    """`timestamp` of a date string, remembered: a warm search weighs `candidates(limit)`
    rows a query, mostly pages (and dates) it has weighed before."""
    try:
        parsed = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            parsed = _dt.datetime.combine(_dt.date.fromisoformat(text[:10]), _dt.time())
        except ValueError:
            return float("-inf")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.UTC)
    return parsed.timestamp()


# Pages whose weight and date a reader keeps per snapshot (then it starts over).
PAGE_CACHE = 50_000


@dataclass(frozen=True)
class Decay:
    """Opt-in recency decay (`--decay`, MDVDB_SEARCH_DECAY): score * 0.5 ** (age / half_life), the
    age from the `field` date or the modified time, never above 1."""

    half_life: float  # seconds, > 0
    now: float
    field: str | None = None

    def factor(self, when: float) -> float:
        age = max(self.now - when, 0.0)
        return max(0.5 ** (age / self.half_life), 1e-12)  # > 0: a negative score divides


@dataclass(slots=True, eq=False, repr=False)
class Governed:
    """One candidate after governing: its row, its relevance (rounded as shown), its
    governed score and the confidence factor that made it (the decay factor apart)."""

    chunk_id: int
    relevance: float
    score: float
    factor: float
    decay: float | None = None

    def explain(self, parts: dict[str, float] | None) -> dict[str, float]:
        """`--explain`'s parts of this row plus what governing did to it."""
        shown = {
            **(parts or {}),
            "relevance": self.relevance,
            "govern_factor": self.factor,
            "govern_adjustment": round(self.score - self.relevance, 6),
        }
        if self.decay is not None:
            shown["decay_factor"] = round(self.decay, 6)
        return shown


def rerank(
    index: Reader,
    chunk_ids: list[int],
    scores,
    confidence: bool = True,
    decay: Decay | None = None,
) -> list[Governed]:
    """The candidates re-ordered by the governed score, newer `updated` first on exact ties, then
    relevance order. `confidence`: weigh by the confidence field; `decay`: by age."""
    if not chunk_ids:
        return []
    snap = index.snapshot
    file_ids = snap.chunk_file_ids[chunk_ids].tolist()
    pages = page_terms(index, file_ids)
    ages = page_dates(index, file_ids, decay.field) if decay is not None else {}
    values = scores[chunk_ids].tolist()
    keyed = []
    for position, (chunk_id, file_id, value) in enumerate(
        zip(chunk_ids, file_ids, values, strict=True)
    ):
        weight, when = pages[file_id]
        shown = weight if confidence else 1.0  # the confidence factor --explain shows
        aged = decay.factor(ages[file_id]) if decay is not None else None
        weight = shown if aged is None else shown * aged
        relevance = round(value, 6)
        # scaled toward better for weight > 1 whatever the sign; a factor of 1 leaves the
        # rounded relevance as it is (rounding a rounded value to the same digits gives it back)
        if weight == 1.0:
            score = relevance
        else:
            score = round(relevance * weight if relevance >= 0 else relevance / weight, 6)
        # (position is unique: the tuples are ordered by their first three items alone)
        keyed.append((-score, -when, position, chunk_id, relevance, score, shown, aged))
    keyed.sort()
    return [Governed(*item[3:]) for item in keyed]


def page_dates(index: Reader, file_ids: list[int], field: str | None) -> dict[int, float]:
    """The date each page's decay counts from: its `field` frontmatter date when it has one
    that reads, else its modified time (the index's `mtime`)."""
    import json

    from kernel import index_format

    snap = index.snapshot
    files = snap.table("files")
    mtimes = index_format.column_array(files, "mtime").to_numpy()
    out = {i: float(mtimes[i]) for i in file_ids}
    if field:
        column = files.column("frontmatter")
        for file_id in file_ids:
            when = timestamp(json.loads(column[file_id].as_py() or "{}").get(field))
            if when != float("-inf"):
                out[file_id] = when
    return out


def page_terms(index: Reader, file_ids: list[int]) -> dict[int, tuple[float, float]]:
    """(confidence factor, `updated` timestamp) of each page in `file_ids`, parsed once per
    snapshot under this reader's governance settings."""
    import json

    cfg = index.config
    snap = index.snapshot
    key = (
        "govern_pages",
        cfg.govern_confidence_field,
        cfg.govern_updated_field,
        tuple(sorted(cfg.govern_weights.items())),
    )
    pages = snap.cache.get(key)
    if pages is None or len(pages) > PAGE_CACHE:
        pages = snap.cache[key] = {}
    missing = set(file_ids).difference(pages)
    if missing:
        column = snap.table("files").column("frontmatter")
        for file_id in missing:
            meta = json.loads(column[file_id].as_py() or "{}")
            pages[file_id] = (
                factor(meta.get(cfg.govern_confidence_field), cfg.govern_weights),
                timestamp(meta.get(cfg.govern_updated_field)),
            )
    return pages
