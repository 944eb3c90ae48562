"""Governed ranking: after relevance, weigh each page's declared `confidence` and `updated`.

Wikis kept by agents mark pages `confidence: high` or `low` and date them; a stale `low` page
that happens to match a query should not outrank the `authoritative` one next to it. The
adjustment is a multiplicative factor on the relevance score (so it means the same for cosine,
lexical and fused scores), and exact ties are broken by the newer `updated` date.

It runs on the results a mode already produced, so it knows nothing about how they were
scored; `search` only asks for a few more candidates than it returns so a lifted page that
ranked just below the cut can still move up.
"""

from __future__ import annotations

import datetime as _dt
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from query.results import SearchResult
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
    """Search the string column's raw UTF-8 data buffer: a key in any page's frontmatter JSON
    shows up as `"key":`. One bytes copy and a memchr-speed find; no per-row decoding and no
    pyarrow.compute import on the query path. Runs once per published index."""
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
    """`timestamp` of a date string, remembered: a warm search weighs ~100 candidates a
    query, mostly pages (and dates) it has weighed before."""
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


def adjusted(score: float, weight: float) -> float:
    """Scale toward better for weight > 1 whatever the sign of the score."""
    return score * weight if score >= 0 else score / weight


def rerank(
    index: Reader, results: list[SearchResult], limit: int, explain: bool = False
) -> list[SearchResult]:
    """Re-order by the governed score, newer `updated` first on exact ties; keep `limit`."""
    cfg = index.config
    keyed = []
    for position, hit in enumerate(results):
        weight = factor(hit.metadata.get(cfg.govern_confidence_field), cfg.govern_weights)
        when = timestamp(hit.metadata.get(cfg.govern_updated_field))
        new_score = round(adjusted(hit.score, weight), 6)
        if explain:
            hit.explain = {
                **(hit.explain or {}),
                "relevance": hit.score,
                "govern_factor": weight,
                "govern_adjustment": round(new_score - hit.score, 6),
            }
        hit.score = new_score
        keyed.append((-new_score, -when, position, hit))
    keyed.sort(key=lambda item: item[:3])
    return [item[3] for item in keyed[:limit]]
