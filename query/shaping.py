"""Shapes of a result list for agents: `by_file` (which files, how good) and `within_budget`
(a cap on the total excerpt text)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from query.results import SearchResult

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text and BPE tokenizers


@dataclass
class FileHit:
    path: str
    score: float
    id: str = ""  # the document id (kernel/doc_ids.py)
    confidence: float | None = None
    source: str | None = None  # its named source (MDVDB_SOURCES), when the project names them

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "path": self.path,
            "score": self.score,
            "id": self.id,
            "confidence": self.confidence,
        }
        if self.source is not None:
            data["source"] = self.source
        return data


def by_file(results: list[SearchResult], limit: int | None = None) -> list[FileHit]:
    """One entry per file, at its best section's score and confidence, in result order."""
    seen: dict[str, FileHit] = {}
    for hit in results:
        if hit.path not in seen:
            seen[hit.path] = FileHit(hit.path, hit.score, hit.id, hit.confidence, hit.source)
    files = list(seen.values())
    return files if limit is None else files[:limit]


def within_budget(results: list[SearchResult], max_tokens: int) -> list[SearchResult]:
    """Keep results in order while their excerpts fit in `max_tokens`; the one that crosses
    the budget is cut short, the rest are dropped."""
    kept: list[SearchResult] = []
    left = max_tokens * CHARS_PER_TOKEN
    for hit in results:
        if left <= 0:
            break
        if len(hit.excerpt) <= left:
            kept.append(hit)
            left -= len(hit.excerpt)
            continue
        cut = hit.excerpt[: max(left - 1, 0)].rstrip()
        if cut:
            kept.append(replace(hit, excerpt=cut + "…"))
        break
    return kept
