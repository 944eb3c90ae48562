"""The excerpt of a result, as plain text: the window of the section holding the most
distinct query terms (the lexical analyzer's), else the sentence closest to the query by the
local model, else the section's start; with the window's own lines."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache

from kernel import text_analysis
from kernel.plain_text import plain

EXCERPT_CHARS = 300
LEAD = 60  # at most this much text before the first matched term, to start a sentence
MAX_HITS = 100  # term occurrences considered per section (a long section repeats itself)
MAX_SENTENCES = 40  # sentences per section embedded for a meaning-only match
_SENTENCE_END = re.compile(r"[.!?:;](?=\s)|\n")


@dataclass(eq=False, repr=False)
class Excerpt:
    """The passage shown for a result, and its lines in the file."""

    text: str
    start_line: int  # lines of the original file the excerpt comes from
    end_line: int


@dataclass(eq=False, repr=False)
class _Flat:
    """A section's visible text on one line, and where each of its lines begins in it."""

    text: str
    offsets: list[int]  # flat offset of each kept line
    lines: list[int]  # the file line number of each kept line

    @classmethod
    def of(cls, section: str, first_line: int, heading: bool = True) -> _Flat:
        rows = plain(section).split("\n")
        start = 0
        if heading and rows and section.lstrip().startswith("#") and len(rows) > 1:
            start = 1  # the heading line: shown separately, not in the excerpt
        parts, offsets, lines, at = [], [], [], 0
        for i in range(start, len(rows)):
            row = rows[i].strip()
            if not row:
                continue
            if parts:
                at += 1
            offsets.append(at)
            lines.append(first_line + i)
            parts.append(row)
            at += len(row)
        if not parts and rows and rows[0].strip():  # a heading with nothing under it
            return cls(rows[0].strip(), [0], [first_line])
        return cls(" ".join(parts), offsets, lines)

    def line_at(self, offset: int) -> int:
        if not self.lines:
            return 0
        return self.lines[max(bisect.bisect_right(self.offsets, offset) - 1, 0)]

    def cut(self, start: int, limit: int) -> Excerpt:
        """`limit` characters from `start`, on word boundaries, with ellipses where cut."""
        text = self.text
        if len(text) <= limit:
            return Excerpt(text, self.line_at(0), self.line_at(max(len(text) - 1, 0)))
        start = max(0, min(start, len(text) - limit))
        if start > 0 and text[start - 1] not in " \n":
            space = text.find(" ", start)
            start = space + 1 if 0 <= space < start + LEAD else start
        end = start + limit - (1 if start else 0) - 1
        if end < len(text):
            space = text.rfind(" ", start, end)
            end = space if space > start + limit // 2 else end
        else:
            end = len(text)
        body = text[start:end].strip()
        shown = ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")
        return Excerpt(shown, self.line_at(start), self.line_at(max(end - 1, start)))


def query_terms(query: str) -> frozenset[str]:
    return frozenset(text_analysis.words(query))


@lru_cache(maxsize=64)
def _candidates(terms: frozenset[str]) -> re.Pattern:
    """Words that may be a query term: those starting like one (a Snowball stem minus its
    last letter is a prefix of the word: "happi" of "happy"), so that only they are stemmed."""
    prefixes = {t[: max(2, len(t) - 1)] if len(t) > 2 else t for t in terms}
    alternatives = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
    return re.compile(rf"(?<![^\W_])(?:{alternatives})[^\W_]*", re.IGNORECASE)


def _hits(flat: _Flat, terms: frozenset[str]) -> list[tuple[int, str]]:
    """(offset, term) of every query term in the text, in order."""
    found = [(m.start(), m.group(0).casefold()) for m in _candidates(terms).finditer(flat.text)]
    if not found:
        return []
    english, _ = text_analysis._stemmers()
    stems = english.stemWords([w for _, w in found])
    hits = [
        (at, stem if stem in terms else word)
        for (at, word), stem in zip(found, stems, strict=True)
        if stem in terms or word in terms  # other scripts are kept unstemmed
    ]
    return hits[:MAX_HITS]


def _best_start(hits: list[tuple[int, str]], limit: int) -> int:
    """Start of the window of `limit` characters covering the most distinct terms (then the
    most occurrences, then the earliest)."""
    best, best_key = hits[0][0], (-1, -1)
    counts: dict[str, int] = {}  # term -> occurrences in the window hits[i : j + 1]
    j = -1
    for i, (start, _) in enumerate(hits):
        if i:  # the window slides: its first hit leaves (one pass, not a set per window)
            gone = hits[i - 1][1]
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
        if j < i:
            j = i
            counts[hits[i][1]] = counts.get(hits[i][1], 0) + 1
        while j + 1 < len(hits) and hits[j + 1][0] < start + limit - 20:
            j += 1
            counts[hits[j][1]] = counts.get(hits[j][1], 0) + 1
        key = (len(counts), j - i + 1)
        if key > best_key:
            best, best_key = start, key
    return best


def _sentence_start(text: str, at: int) -> int:
    """Back from `at` to the start of its sentence, at most LEAD characters."""
    floor = max(0, at - LEAD)
    last = floor
    for match in _SENTENCE_END.finditer(text, floor, at):
        last = match.end()
    if last == floor and floor > 0:
        return at  # no sentence start nearby: start at the term itself
    return last


def by_terms(section: str, first_line: int, terms: frozenset[str], limit: int = EXCERPT_CHARS):
    """The excerpt around the query terms and whether any occurs; a long section is stripped of
    markup only around its best raw passage (stripping is the costly part)."""
    flat, ahead = _region(section, first_line, terms, limit), False
    if isinstance(flat, tuple):
        flat, ahead = flat
    if len(flat.text) <= limit and not ahead:  # shown whole: where the terms are is moot
        return flat.cut(0, limit), True
    hits = _hits(flat, terms) if terms else []
    if not hits:
        return flat.cut(0, limit), False
    start = _best_start(hits, limit)
    excerpt = flat.cut(_sentence_start(flat.text, start), limit)
    if ahead and not excerpt.text.startswith("…"):
        excerpt.text = "…" + excerpt.text
    return excerpt, True


def _region(section: str, first_line: int, terms: frozenset[str], limit: int):
    """The section as a `_Flat`, or (the `_Flat` of the lines around its best raw passage,
    True when text before them was left out) for a long one."""
    if len(section) <= 4 * limit or not terms:
        return _Flat.of(section, first_line)
    raw = [(m.start(), m.group(0).casefold()) for m in _candidates(terms).finditer(section)]
    if not raw:
        return _Flat.of(section, first_line)
    english, _ = text_analysis._stemmers()
    stems = english.stemWords([w for _, w in raw])
    hits = [(at, st) for (at, w), st in zip(raw, stems, strict=True) if st in terms or w in terms]
    if not hits:
        return _Flat.of(section, first_line)
    at = _best_start(hits[:MAX_HITS], 2 * limit)
    begin = section.rfind("\n", 0, max(at - LEAD, 0)) + 1
    end = section.find("\n", at + 3 * limit)
    region = section[begin : len(section) if end < 0 else end]
    first = first_line + section.count("\n", 0, begin)
    if begin == 0:
        return _Flat.of(region, first)
    return _Flat.of(region, first, heading=False), True


def sentences(section: str) -> list[str]:
    flat = _Flat.of(section, 1).text
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+", flat) if len(p.strip()) > 15]
    return parts[:MAX_SENTENCES]


def around(section: str, first_line: int, sentence: str, limit: int = EXCERPT_CHARS) -> Excerpt:
    flat = _Flat.of(section, first_line)
    at = flat.text.find(sentence)
    return flat.cut(max(at, 0), limit)


# Sections whose sentences and their vectors a long-lived reader keeps (then it starts over):
# ~5 KB a section at 256 dimensions.
SENTENCE_MEMO = 2048


def excerpts(
    sections: list[tuple[str, int]],
    query: str | None,
    embed=None,
    limit: int = EXCERPT_CHARS,
    keys: list | None = None,
    memo: dict | None = None,
) -> list[Excerpt]:
    """One excerpt per (section text, first line). `embed` picks the closest sentence where no
    query term occurs; `memo` keeps those sentences and vectors under `keys`."""
    terms = query_terms(query) if query else frozenset()
    out: list[Excerpt] = []
    unmatched: list[int] = []
    for i, (text, first) in enumerate(sections):
        excerpt, matched = by_terms(text, first, terms, limit)
        out.append(excerpt)
        if not matched and embed is not None:
            unmatched.append(i)
    if unmatched and query:
        import numpy as np

        known = {}
        if memo is not None and keys is not None:
            known = {i: memo[keys[i]] for i in unmatched if keys[i] in memo}
        fresh = [(i, sentences(sections[i][0])) for i in unmatched if i not in known]
        texts = [s for _, found in fresh for s in found]
        if texts:
            vectors = np.asarray(embed(texts), dtype=np.float32)
            at = 0
            for i, found in fresh:
                known[i] = (found, vectors[at : at + len(found)])
                at += len(found)
                if memo is not None and keys is not None:
                    if len(memo) >= SENTENCE_MEMO:
                        memo.clear()
                    memo[keys[i]] = known[i]
        pieces = [(i, s) for i in unmatched for s in known[i][0]]
        if pieces:
            query_vector = embed([query])[0]
            # one product over the sentences of every section, as when all were embedded
            # at once: the same matrix, so the same bits
            vectors = np.concatenate([known[i][1] for i in unmatched])
            scores = vectors @ np.asarray(query_vector, dtype=np.float32)
            best: dict[int, tuple[float, str]] = {}
            for (i, sentence), score in zip(pieces, scores.tolist(), strict=True):
                if i not in best or score > best[i][0]:
                    best[i] = (score, sentence)
            for i, (_, sentence) in best.items():
                out[i] = around(sections[i][0], sections[i][1], sentence, limit)
    return out
