"""Stub pages: short pages that are only a title and `Label: value` lines (a catalogue
record), not list items or code (a tldr page); the stub prior (query.score.fusion) applies to
them. The test reads text, so it runs on a query's best candidates, remembered per snapshot."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from query.snapshot import Reader

CANDIDATES = 128  # the best sections of a query whose pages are checked
# a metadata line: a short label, a colon, a value ("Authors: Perlis, A. J.")
FIELD = re.compile(r"^\s*[A-Za-z][\w .'/()-]{0,40}:\s+\S")


def _body(text: str) -> list[str]:
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def is_record(text: str) -> bool:
    """True for a section that is a record: headings aside, only `Label: value` lines (a
    catalogue entry, a title and its byline); a sentence of prose makes it a page."""
    return all(FIELD.match(line) for line in _body(text))


def stub_rows(
    index: Reader,
    scores: np.ndarray,
    page_length: np.ndarray,
    stub_length: float,
    seen: list | None = None,
) -> np.ndarray:
    """The sections the stub prior applies to: among the query's best `CANDIDATES`, those of a
    page shorter than `stub_length` whose text is a record (verdicts kept per snapshot).
    `seen`: as `query.score.vector.top_rows` takes it."""
    snap = index.snapshot
    key = ("stub_short", float(stub_length))
    short = snap.cache.get(key)
    if short is None:
        short = page_length[snap.chunk_file_ids] < np.float32(stub_length)
        snap.cache[key] = short
    n = len(scores)
    if not n:
        return np.zeros(0, dtype=np.int64)
    # the best CANDIDATES, ties by row descending (a sharded search agrees)
    from query.score.vector import top_rows

    top = top_rows(scores, CANDIDATES, seen=seen)
    top = top[short[top]]
    if not len(top):
        return top
    return record_rows(snap, top)


def record_rows(snap, rows: np.ndarray) -> np.ndarray:
    """The rows whose section text is a record (`is_record`), each verdict kept per
    snapshot (a sharded search's router reads the texts it names the same way)."""
    known: dict[int, bool] = snap.cache.setdefault("stub_sections", {})
    missing = [i for i in rows.tolist() if i not in known]
    if missing:
        texts = snap.table("chunks").column("text")
        for i in missing:
            known[i] = is_record(texts[i].as_py() or "")
    return rows[np.fromiter((known[i] for i in rows.tolist()), dtype=bool, count=len(rows))]
