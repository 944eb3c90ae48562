"""The text analyzer behind lexical search: one function, used verbatim at index and query time.

Part of the index format: bump `ANALYZER_VERSION` for any change to the terms a text yields
(the reader refuses postings of another version). What it does and why: docs/architecture.md,
"Kernel modules in detail", "The text analyzer".
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from hashlib import blake2b
from itertools import chain
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ANALYZER_VERSION = "mdvdb-text-2"

# The languages Latin-script chunks are stemmed in besides English: code -> PyStemmer's
# algorithm, in the order a tie is decided. How a chunk's is told: kernel/languages.py.
LANGUAGES = {
    "fr": "french",
    "de": "german",
    "es": "spanish",
    "pt": "portuguese",
    "it": "italian",
    "nl": "dutch",
    "sv": "swedish",
    "da": "danish",
    "no": "norwegian",
    "fi": "finnish",
    "pl": "polish",
    "cs": "czech",
    "ro": "romanian",
    "hu": "hungarian",
    "tr": "turkish",
    "id": "indonesian",
}


# Hiragana, Katakana (incl. half-width), CJK ideographs (+ext A, compatibility), Hangul.
CJK_RANGES = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
)
# Tokens: a CJK run (group 1) or a run of other letters and digits (group 2). Slow to
# compile, so compiled on first use by a non-ASCII text (ASCII: `_ASCII_WORD`).
_TOKEN_PATTERN = rf"([{CJK_RANGES}]+)|([^\W_{CJK_RANGES}]+)"


@lru_cache(maxsize=1)
def _token() -> re.Pattern[str]:
    return re.compile(_TOKEN_PATTERN)


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
    return [term for token in tokens_of(text) for term in _token_words(token, "en")]


def _token_words(token: str | tuple[str, str], language: str) -> list[str]:
    """The terms one token (a word, or a (CJK run, word) pair) yields, each on its own:
    CJK bigrams, no stop word, Latin words stemmed in `language`, Cyrillic in Russian."""
    cjk, word = token if isinstance(token, tuple) else ("", token)
    if cjk:
        return [cjk] if len(cjk) == 1 else [cjk[i : i + 2] for i in range(len(cjk) - 1)]
    if len(word) < 2 or word in STOP_WORDS:
        return []
    if _LATIN.fullmatch(word):
        return [_stemmer(language).stemWord(word)]
    if _CYRILLIC.fullmatch(word):
        return [_stemmers()[1].stemWord(word)]
    return [word]


@lru_cache(maxsize=200_000)
def term_hash(term: str) -> int:
    """The stored form of a term: a stable unsigned 64-bit hash."""
    return int.from_bytes(blake2b(term.encode(), digest_size=8).digest(), "little")


# Bounds `_TokenTerms`: past this many distinct tokens it starts again.
TOKEN_CACHE_MAX = 200_000


@cache
def _stemmer(language: str):
    """PyStemmer's stemmer of one `LANGUAGES` code ("en": English)."""
    if language == "en":
        return _stemmers()[0]
    import Stemmer

    return Stemmer.Stemmer(LANGUAGES[language])


class _TokenTerms(dict):
    """Token -> the hashes of its terms (`_token_words` in `language`): an ingest meets the
    same words over and over."""

    def __init__(self, language: str = "en") -> None:
        super().__init__()
        self.language = language

    def __missing__(self, token: str | tuple[str, str]) -> tuple[int, ...]:
        if len(self) >= TOKEN_CACHE_MAX:
            self.clear()
        found = self[token] = tuple(map(term_hash, _token_words(token, self.language)))
        return found


_TOKEN_TERMS = _TokenTerms()
_LANGUAGE_TERMS: dict[str, _TokenTerms] = {"en": _TOKEN_TERMS}


def _terms_in(language: str) -> _TokenTerms:
    found = _LANGUAGE_TERMS.get(language)
    if found is None:
        found = _LANGUAGE_TERMS[language] = _TokenTerms(language)
    return found


def forget() -> None:
    """Drop the caches of analysed words: an ingest that analysed in this process frees
    them for its later stages."""
    for terms in _LANGUAGE_TERMS.values():
        terms.clear()
    term_hash.cache_clear()


_ASCII_WORD = re.compile(r"[^\W_]+")  # an ASCII text's tokens (no CJK run)


def tokens_of(text: str) -> list:
    """A text's tokens (words, or (CJK run, word) pairs), as `chunk_language` and
    `term_hashes` take them."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return (_ASCII_WORD if text.isascii() else _token()).findall(text)


def term_hashes(tokens: list, language: str = "en") -> np.ndarray:
    """The term hashes of `tokens_of(text)`, Latin words stemmed in `language`."""
    import numpy as np  # not at the top: `mdvdb ingest`'s no-op reads ANALYZER_VERSION only

    terms = _terms_in(language).__getitem__
    return np.fromiter(chain.from_iterable(map(terms, tokens)), dtype=np.uint64)


def term_ids(text: str, language: str | None = None) -> np.ndarray:
    """`words(text)` as uint64 term hashes, Latin words stemmed in `language`; without one,
    a query's terms as this thread's `QueryLexicon` resolves them, or English."""
    if language is None:
        lexicon = getattr(_QUERY, "lexicon", None)
        if lexicon is not None:
            return lexicon.term_ids(text)
        language = "en"
    return term_hashes(tokens_of(text), language)


# -- languages ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _detection() -> tuple[frozenset, frozenset, dict]:
    """The detection words of the other languages and English's (the analyzer's stop words),
    each as both token forms, and the languages each other word counts for."""
    from kernel.languages import ENGLISH_LOOKALIKES, stop_words

    counts: dict = {}
    for code, found in stop_words().items():
        for word in found - STOP_WORDS:
            counts.setdefault(word, []).append(code)
    other = {key: tuple(v) for word, v in counts.items() for key in (word, ("", word))}
    # English's own: its stop words but the short ones other languages write too (a, do, no)
    own = {w for w in STOP_WORDS if len(w) > 2} - ENGLISH_LOOKALIKES
    english = frozenset(own) | {("", word) for word in own}
    return frozenset(other), english, other


def chunk_language(*tokens: list) -> str:
    """The language a chunk's tokens (each field's) are stemmed in, told by their stop words
    (docs/architecture.md, "Chunk languages"); "en" by default."""
    from kernel.languages import MIN_SHARE, MIN_STOP_WORDS, UNACCENTED

    other, english, languages = _detection()
    hits = list(filter(other.__contains__, chain.from_iterable(tokens)))
    if len(hits) < MIN_STOP_WORDS:
        return "en"
    counts = Counter(chain.from_iterable(map(languages.__getitem__, set(hits))))
    best = max(LANGUAGES, key=counts.__getitem__)  # the first of a tie, in LANGUAGES order
    if counts[best] < MIN_STOP_WORDS:
        return "en"
    words = _words_of(best)
    if sum(map(words.__contains__, hits)) < MIN_SHARE * sum(map(len, tokens)):
        return "en"
    if best not in UNACCENTED and not any(t and isinstance(t[0], tuple) for t in tokens):
        return "en"  # French without one accent is ASCII-folded text (`tokens_of`: str pairs)
    return best if counts[best] > len(english.intersection(chain.from_iterable(tokens))) else "en"


@cache
def _words_of(language: str) -> frozenset:
    """One language's detection words, as both token forms."""
    _, _, languages = _detection()
    return frozenset(t for t, codes in languages.items() if language in codes)


def language_marker(language: str) -> int:
    """The term a chunk stemmed in `language` also holds (no text yields it: a NUL)."""
    return term_hash(f"\x00language:{language}")


_QUERY = threading.local()  # the `QueryLexicon` of the query this thread runs, if any


@contextmanager
def query_lexicon(lexicon: QueryLexicon | None) -> Iterator[None]:
    """Analyse this thread's `term_ids(query)` calls against `lexicon` (a query's pin)."""
    held = getattr(_QUERY, "lexicon", None)
    _QUERY.lexicon = lexicon
    try:
        yield
    finally:
        _QUERY.lexicon = held


class QueryLexicon:
    """How a query's words are looked up in one index (docs/architecture.md, "The text
    analyzer"). `frequency(hashes)`: chunks holding each term; `chunks(hashes)`: their ids."""

    def __init__(
        self,
        frequency: Callable[[np.ndarray], np.ndarray],
        chunks: Callable[[np.ndarray], list],
        n_chunks: int,
    ) -> None:
        self.frequency, self.chunks, self.n_chunks = frequency, chunks, n_chunks
        self._languages: list[str] | None = None
        self._language_of: np.ndarray | None = None  # per chunk: 0 English, i + 1 languages[i]
        self._terms: dict[str, np.ndarray] = {}

    def languages(self) -> list[str]:
        if self._languages is None:
            import numpy as np

            codes = list(LANGUAGES)
            markers = np.array([language_marker(c) for c in codes], dtype=np.uint64)
            df = self.frequency(markers)
            self._languages = [c for c, n in zip(codes, df.tolist(), strict=True) if n > 0]
        return self._languages

    def language_of(self) -> np.ndarray:
        """Each chunk's language, as its place in `languages()` + 1 (0: English)."""
        if self._language_of is None:
            import numpy as np

            found = np.zeros(self.n_chunks, dtype=np.int8)
            others = self.languages()
            markers = np.array([language_marker(c) for c in others], dtype=np.uint64)
            for place, ids in enumerate(self.chunks(markers)):
                if ids is not None:
                    found[ids] = place + 1
            self._language_of = found
        return self._language_of

    def term_ids(self, text: str) -> np.ndarray:
        found = self._terms.get(text)
        if found is None:
            found = self._resolve(text)
            if len(self._terms) >= 256:
                self._terms.clear()
            self._terms[text] = found
        return found

    def _resolve(self, text: str) -> np.ndarray:
        import numpy as np

        tokens = tokens_of(text)
        others = self.languages()
        if not others:
            return term_hashes(tokens)
        tables = [_terms_in(c) for c in others]
        out: list[tuple[int, ...]] = []
        choices: list[tuple[int, dict[int, list[int]]]] = []  # place, variant -> languages
        for token in tokens:
            mine = _TOKEN_TERMS[token]
            out.append(mine)
            if len(mine) != 1:
                continue
            variants = {mine[0]: [0]}
            for place, table in enumerate(tables, start=1):
                variants.setdefault(table[token][0], []).append(place)
            if len(variants) > 1:
                choices.append((len(out) - 1, variants))
        if choices:
            asked = list(dict.fromkeys(h for _, v in choices for h in v))
            held = dict(zip(asked, self.chunks(np.array(asked, dtype=np.uint64)), strict=True))
            language_of = self.language_of()
            for place, variants in choices:
                counts = []
                for variant, codes in variants.items():
                    ids = held[variant]
                    allowed = np.zeros(len(others) + 1, dtype=bool)
                    allowed[codes] = True
                    counts.append(0 if ids is None else int(allowed[language_of[ids]].sum()))
                out[place] = (list(variants)[counts.index(max(counts))],)
        return np.fromiter(chain.from_iterable(out), dtype=np.uint64)
