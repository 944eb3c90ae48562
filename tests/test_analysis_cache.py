"""The ingest's fast lexical analysis gives the same terms and postings as the plain one.

`kernel.text_analysis.term_ids` looks each token's terms up in a cache instead of stemming
and hashing every word again, and `pipeline.pack.lexical.store_of` builds a batch's analyses with
a few NumPy calls instead of one `unique` per chunk. The analyzer is part of the index
format: each test compares with the reference computation and fails on any difference."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kernel import text_analysis
from kernel.text_analysis import term_hash, term_ids, words
from pipeline.pack.lexical import Store, store_of

TEXTS = [
    "",
    "   ",
    "a an the of",  # stop words and one-letter words only
    "Create an archive and write it to a file: tar cf target.tar file1 file2",
    "snake_case tar.gz C++ x86_64 IPv6 --verbose -rf 3.14 2nd",
    "Running runners ran; connection connections connected CONNECTING",
    "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ ﬁle ligature Straße STRASSE ǅ",
    "café naïve résumé e\u0301 ÀÉÎÕÜ",
    "Создать архив и записать его в файл, архивы",
    "创建一个归档文件 写 入",
    "アーカイブを作成します カタカナ ひらがな",
    "보관 파일을 만듭니다 한",
    "Δημιουργία αρχείου και εγγραφή",
    "إنشاء أرشيف وكتابته في ملف",
    "संग्रह बनाएँ और फ़ाइल में लिखें",
    "mixed 中文English русский123 日本語テキスト",
    "emoji 🎉 tar 🎉🎉 ✓ check",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em",
    "`tar xvf {{path/to/source.tar[.gz|.bz2|.xz]}}`",
]


def _reference(text: str) -> list[int]:
    return [term_hash(w) for w in words(text)]


def analyse(title: str, headings: list[str], text: str) -> tuple:
    """One chunk's analysis, the plain way: (distinct terms, their tf per field, the field
    lengths)."""
    parts = [term_ids(title), term_ids(" ".join(headings)), term_ids(text)]
    every = np.concatenate(parts)
    field = np.repeat(np.arange(3), [len(p) for p in parts])
    terms, inverse = np.unique(every, return_inverse=True)
    counts = np.zeros((len(terms), 3), dtype=np.float32)
    np.add.at(counts, (inverse, field), 1.0)
    return terms, counts, np.array([len(p) for p in parts], dtype=np.float32)


def plain_store(keys: np.ndarray, analysed: list[tuple]) -> Store:
    """The Store of chunks analysed one by one (`analyse`)."""
    sizes = np.fromiter((len(a[0]) for a in analysed), dtype=np.int64, count=len(analysed))
    if not analysed:
        return Store.empty()
    return Store(
        keys=np.asarray(keys, dtype=np.uint64),
        starts=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        lengths=np.stack([a[2] for a in analysed]).astype(np.float32),
        terms=np.concatenate([a[0] for a in analysed]),
        counts=np.concatenate([a[1] for a in analysed]),
    )


def test_term_ids_equal_the_hashed_words_cold_and_cached():
    text_analysis._TOKEN_TERMS.clear()
    for _ in range(2):  # first pass fills the cache, second reads it
        for text in TEXTS:
            got = term_ids(text)
            assert got.dtype == np.uint64
            assert got.tolist() == _reference(text), text


def test_term_ids_stay_right_when_the_cache_starts_again(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(text_analysis, "TOKEN_CACHE_MAX", 5)
    text_analysis._TOKEN_TERMS.clear()
    rng = random.Random(7)
    vocabulary = " ".join(TEXTS).split()
    for _ in range(300):
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 30)))
        assert term_ids(text).tolist() == _reference(text)
        assert len(text_analysis._TOKEN_TERMS) <= 5 + 1
    text_analysis._TOKEN_TERMS.clear()


def test_store_of_equals_one_analysis_per_chunk():
    rng = random.Random(18)
    chunks = []
    for n in range(200):
        title = rng.choice(["tar", "", "Archive tools", "Создать", "a"]) if n % 7 == 0 else "tar"
        headings = [rng.choice(TEXTS) for _ in range(rng.randint(0, 2))]
        text = " ".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4)))
        chunks.append((title, headings, text))
    chunks.append(("", [], ""))  # a chunk with no term at all
    keys = np.arange(len(chunks), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    got = store_of(keys, chunks)
    want = plain_store(keys, [analyse(t, h, x) for t, h, x in chunks])
    for name in ("keys", "starts", "lengths", "terms", "counts"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), name


def test_store_of_nothing_and_of_empty_chunks():
    empty = store_of(np.zeros(0, np.uint64), [])
    want = plain_store(np.zeros(0, np.uint64), [])
    blank = store_of(np.ones(2, np.uint64), [("", [], ""), ("the", ["a"], "of")])
    blank_want = plain_store(
        np.ones(2, np.uint64), [analyse("", [], ""), analyse("the", ["a"], "of")]
    )
    for got, ref in ((empty, want), (blank, blank_want)):
        for name in ("keys", "starts", "lengths", "terms", "counts"):
            a, b = getattr(got, name), getattr(ref, name)
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), name


def test_token_ids_equal_the_full_encoding():
    """Chunks are counted and embedded from `token_ids` (the encoder without offsets): the
    same ids as the tokenizer's full encoding, on every kind of text."""
    from kernel.providers.local import load_tokenizer
    from pipeline.chunking import token_ids

    texts = [*TEXTS, "x" * 5000, "  leading and trailing  ", "\n\n", "a\u0000b", "🎉" * 40]
    full = [e.ids for e in load_tokenizer().encode_batch(texts, add_special_tokens=False)]
    assert token_ids(texts) == full
