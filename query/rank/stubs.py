"""Stub pages: which short pages have no body, only a title and a line or two of text.

A catalogue record ("# Title / Authors: … / Published: …") and a tldr page of two examples
are both short; only the first is a stub. The difference a reader sees is structure: the
command page has list items and code, the record is a title and plain lines. The stub prior
(query.score.fusion.with_stub_prior) applies only to short pages whose sections are records
in this sense. The test reads a section's text, so it runs only on
the best candidates of a query and is remembered per snapshot.
"""

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
    """The sections the stub prior applies to: among the query's best `CANDIDATES`, those of
    a page shorter than `stub_length` whose text is a record. Other short sections are left
    alone: outside the best candidates the prior would not change what is shown. Which
    sections are short, and each verdict, are kept per snapshot, so a warm query pays one
    partial sort and the texts it has not seen.
    `seen`: `query.score.vector.top_rows`' (the rows above its cut, for the next selections)."""
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
