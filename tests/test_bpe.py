"""The lookup BPE used for queries must give exactly the ids of the real tokenizer."""

from pathlib import Path

import numpy as np

from kernel.providers.bpe import QueryBPE
from kernel.providers.local import LocalProvider, load_tokenizer, tokenizer_path
from tests.conftest import FIXTURES

SAMPLES = [
    "how do I extract a tar archive",
    "",
    " ",
    "  leading and trailing  ",
    "tabs\tand\nnewlines",
    "Grüße aus Köln — naïve café",
    "两数之和 二叉树的最大深度",
    "ファイルを圧縮する",
    "Создать архив",
    "ضغط الملفات",
    "emoji 🚀🔥 and symbols ∑∫√",
    "special <s> tokens </s> and <unk> inside",
    "code: `tar xzvf {{path/to/file.tar.gz}}` --verbose -C /tmp",
    "URLs https://example.com/a?b=c&d=e#frag",
    "x" * 300,
]


def _corpus_lines() -> list[str]:
    lines = []
    for path in sorted(FIXTURES.rglob("*.md")):
        lines.extend(path.read_text().splitlines())
    return lines


def test_lookup_bpe_matches_the_real_tokenizer(tmp_path: Path):
    bpe = QueryBPE.build(tokenizer_path(), tmp_path / "bpe.sqlite3")
    real = load_tokenizer()
    for text in SAMPLES + _corpus_lines():
        expected = real.encode(text, add_special_tokens=False).ids
        assert bpe.encode(text) == expected, text


def test_query_vectors_are_identical_either_way(tmp_path: Path):
    quick = LocalProvider(cache_dir=tmp_path)
    bulk = LocalProvider(use_cache=False)
    for text in SAMPLES:
        a = quick.embed([text])
        b = bulk.embed([text])
        assert np.array_equal(a, b), text
