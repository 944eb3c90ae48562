"""The text analyzer behind lexical search: one function, used verbatim at index and query time.

It is part of the index format: postings store hashed terms this module produced, so a query
analysed any other way would silently miss. `ANALYZER_VERSION` goes into the index meta and the
reader refuses postings built by another version. Change anything here that alters the terms a
text yields (the regexes, the stop-words, the stemmers, the hash) and you must bump it.

What it does, and why:
- NFKC + casefold, so full-width Latin, ligatures and case variants meet.
- Words are runs of letters and digits (`[^\\W_]+`): `snake_case` and `tar.gz` split into their
  parts, which is what a person types. Single-character words are dropped except in CJK.
- Han, Kana and Hangul have no spaces between words: a run of them becomes overlapping character
  bigrams (a lone character stays a unigram), the usual dictionary-free way to make Chinese,
  Japanese and Korean searchable; a query analysed the same way matches any substring of 2+.
- English words are stemmed with Snowball (PyStemmer, a C extension, and the same algorithm
  the bm25s baseline uses); Cyrillic words with the Russian Snowball stemmer. Other
  scripts (Arabic, Greek, Devanagari...) are kept as whole lower-cased words.
- A short English stop-word list is removed; words of other languages are all kept.
- Terms are stored as 64-bit BLAKE2b hashes, so neither side needs a vocabulary: the writer
  builds postings with NumPy alone and the reader finds a term by `searchsorted`. With ~10^6
  distinct terms a collision has odds near 10^-7.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from hashlib import blake2b
from itertools import chain
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ANALYZER_VERSION = "mdvdb-text-1"

# Hiragana, Katakana (incl. half-width), CJK ideographs (+ext A, compatibility), Hangul.
CJK_RANGES = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
)
# Tokens: a CJK run (group 1) or a run of other letters and digits (group 2). Compiling this
# pattern is slow (its character classes span most of Unicode), so it is compiled on first
# use by a non-ASCII text; an ASCII text, where no CJK
# character can occur, is split by the equivalent ASCII pattern (group 1 always empty).
_TOKEN_PATTERN = rf"([{CJK_RANGES}]+)|([^\W_{CJK_RANGES}]+)"
_ASCII_TOKEN = re.compile(r"()([^\W_]+)")


@lru_cache(maxsize=1)
def _token() -> re.Pattern[str]:
    return re.compile(_TOKEN_PATTERN)


def _token_pairs(text: str) -> list[tuple[str, str]]:
    """(cjk run, other word) per token, one of them empty: `findall` of the token pattern."""
    return (_ASCII_TOKEN if text.isascii() else _token()).findall(text)


_LATIN = re.compile(r"[a-z0-9\u00c0-\u024f]+")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]+")

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()  # noqa: SIM905 - a list of 120 words reads better as prose
)


@lru_cache(maxsize=1)
def _stemmers():
    import Stemmer

    return Stemmer.Stemmer("english"), Stemmer.Stemmer("russian")


def words(text: str) -> list[str]:
    """The analysed terms of a text, in order (duplicates kept: term frequency matters)."""
    english, russian = _stemmers()
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[str] = []
    latin: list[str] = []
    cyrillic: list[str] = []
    for cjk, word in _token_pairs(text):
        if cjk:
            if len(cjk) == 1:
                out.append(cjk)
            else:
                out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        elif len(word) > 1 and word not in STOP_WORDS:
            if _LATIN.fullmatch(word):
                latin.append(word)
                out.append("\x00")  # placeholder, filled in order below
            elif _CYRILLIC.fullmatch(word):
                cyrillic.append(word)
                out.append("\x01")
            else:
                out.append(word)
    if latin or cyrillic:
        stems = iter(english.stemWords(latin))
        rstems = iter(russian.stemWords(cyrillic))
        out = [next(stems) if t == "\x00" else next(rstems) if t == "\x01" else t for t in out]
    return out


@lru_cache(maxsize=200_000)
def term_hash(term: str) -> int:
    """The stored form of a term: a stable unsigned 64-bit hash."""
    return int.from_bytes(blake2b(term.encode(), digest_size=8).digest(), "little")


# Bounds `_TokenTerms`: past this many distinct tokens it starts again (an ingest worker
# meets ~10^5 distinct words in tldr's 38k pages, in 20 languages).
TOKEN_CACHE_MAX = 200_000


class _TokenTerms(dict):
    """Token (a word, or a (CJK run, word) pair of the full pattern) -> the term hashes it
    yields. `words` treats each token on its own (stop word, stem, bigrams), so the terms of
    a text are the concatenation of its tokens' terms: an ingest analyses the same few
    thousand words over and over, and a dictionary hit replaces the per-word regex, stem
    and hash calls."""

    def __missing__(self, token: str | tuple[str, str]) -> tuple[int, ...]:
        cjk, word = token if isinstance(token, tuple) else ("", token)
        if cjk:
            terms = [cjk] if len(cjk) == 1 else [cjk[i : i + 2] for i in range(len(cjk) - 1)]
        elif len(word) < 2 or word in STOP_WORDS:
            terms = []
        elif _LATIN.fullmatch(word):
            terms = [_stemmers()[0].stemWord(word)]
        elif _CYRILLIC.fullmatch(word):
            terms = [_stemmers()[1].stemWord(word)]
        else:
            terms = [word]
        if len(self) >= TOKEN_CACHE_MAX:
            self.clear()
        found = self[token] = tuple(term_hash(t) for t in terms)
        return found


_TOKEN_TERMS = _TokenTerms()


def forget() -> None:
    """Drop the caches of analysed words (an ingest that analysed in this process calls it
    once done: ~30 MB on tldr that its later stages, at the run's peak, can use)."""
    _TOKEN_TERMS.clear()
    term_hash.cache_clear()


_ASCII_WORD = re.compile(r"[^\W_]+")  # `_ASCII_TOKEN` without its groups: the words alone


def term_ids(text: str) -> np.ndarray:
    """`words(text)` as uint64 term hashes, in order."""
    import numpy as np  # not at the top: `mdvdb ingest`'s no-op reads ANALYZER_VERSION only

    text = unicodedata.normalize("NFKC", text).casefold()
    found = (_ASCII_WORD if text.isascii() else _token()).findall(text)
    return np.fromiter(chain.from_iterable(map(_TOKEN_TERMS.__getitem__, found)), dtype=np.uint64)
