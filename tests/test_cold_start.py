"""The cold `mdvdb search` shortcuts compute what the plain code computed, bit for bit: the
page sums without reduceat's inner loop, the ASCII tokenizer, the title tier's ASCII check;
and the one-shot process's exit (no teardown) still prints everything and its exit code."""

from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from kernel import text_analysis
from tests.conftest import run_cli


def test_page_sums_are_reduceat_bit_for_bit():
    from query.vector import page_sums

    rng = np.random.default_rng(5)
    for high in (3, 9, 40):
        count = rng.integers(1, high, size=500)
        vectors = (rng.standard_normal((int(count.sum()), 64)) * 100).astype(np.float32)
        offsets = np.cumsum(count) - count
        want = np.add.reduceat(vectors, offsets, axis=0)
        got = page_sums(vectors, offsets, count)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), high


def test_the_ascii_tokenizer_splits_as_the_full_pattern():
    full = re.compile(text_analysis._TOKEN_PATTERN)
    rng = random.Random(7)
    ascii_chars = "".join(chr(c) for c in range(128))
    mixed = ascii_chars + "çİß中ｶ한Пé²ﬁ🎉١"
    samples = ["Extract a tar archive", "git_reset --soft HEAD~1", "中文 and english", ""]
    for alphabet in (ascii_chars, mixed):
        samples += [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)
        ]
    for sample in samples:
        text = unicodedata.normalize("NFKC", sample).casefold()
        assert text_analysis._token_pairs(text) == full.findall(text), sample


@pytest.mark.parametrize("args", [["tar"], ["tar", "--json"], ["zzqx nowhere"]])
def test_a_one_shot_search_prints_everything_before_it_exits(indexed_notes: Path, args):
    """The search process ends with os._exit after flushing: the whole output is there (a
    pipe, so stdout is block-buffered), identical to the pyarrow reader's ordinary exit."""
    fast = run_cli("search", *args, "--root", str(indexed_notes), env={"MDVDB_NO_WARM": "1"})
    plain = run_cli(
        "search",
        *args,
        "--root",
        str(indexed_notes),
        env={"MDVDB_NO_WARM": "1", "MDVDB_ARROW_READER": "1"},
    )
    assert fast.returncode == plain.returncode == 0
    assert fast.stdout == plain.stdout and fast.stdout.endswith("\n")
    assert fast.stderr == plain.stderr
