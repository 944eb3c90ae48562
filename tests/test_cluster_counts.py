"""Cluster keywords count words per cluster without scikit-learn's vectoriser
(`pipeline.cluster.topics._class_counts`): the same terms and counts as the `CountVectorizer` it
replaced, on documents of every shape, and the same refusals (no term left)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.cluster import topics as cluster

WORDS = (  # noqa: SIM905 - a word list reads better as prose
    "tar archive Archive ARCHIVE the and of compress gzip bzip2 x86_64 snake_case file files "
    "café naïve Straße ΔΗΜΙΟΥΡΓΙΑ создать 创建 アーカイブ a I é 42 3rd don't e-mail "
    "<div> </span> &amp; &#35; https://example.com/x?y=1 {{path/to/file}} ``` ~~~ code"
).split()


def _reference(texts: list[str], labels: np.ndarray, k: int, max_df: float, min_df: int):
    from scipy import sparse
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(
        stop_words="english",
        token_pattern=cluster.TOKEN_PATTERN,
        max_df=max_df,
        min_df=min_df,
        preprocessor=cluster._preprocess,
        binary=True,
        dtype=np.float64,
    )
    try:
        counts = vectorizer.fit_transform(texts)
    except ValueError:
        return None
    membership = sparse.csr_matrix(
        (np.ones(len(labels)), (labels, np.arange(len(labels)))), shape=(k, len(labels))
    )
    return vectorizer.get_feature_names_out(), np.asarray((membership @ counts).todense())


def _texts(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = [
            rng.choice(WORDS)
            if rng.random() < 0.3
            else "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(0, 40))
        ]
        if rng.random() < 0.2:
            words.insert(rng.randint(0, len(words)), "```\nfenced code words\n```")
        out.append(rng.choice(["Title\n", "", "# T\n"]) + " ".join(words))
    return out


@pytest.mark.parametrize(("max_df", "min_df"), [(0.1, 2), (0.5, 2), (1.0, 1), (0.08, 2)])
def test_counts_equal_the_vectoriser(max_df: float, min_df: int):
    rng = random.Random(int(max_df * 100) + min_df)
    texts = _texts(rng, 1500)
    k = 7
    labels = np.array([rng.randrange(k) for _ in texts], dtype=np.int64)
    got = cluster.class_counts(texts, labels, k, max_df, min_df)
    want = _reference(texts, labels, k, max_df, min_df)
    assert got is not None and want is not None
    assert got[0].dtype == want[0].dtype and got[0].tolist() == want[0].tolist()
    assert got[1].dtype == want[1].dtype and np.array_equal(got[1], want[1])


def test_no_term_left_is_none_as_with_the_vectoriser():
    k, labels = 2, np.array([0, 1] * 600, dtype=np.int64)
    only_stop_words = ["the and of a"] * 1200
    assert cluster.class_counts(only_stop_words, labels, k, 0.5, 2) is None
    assert _reference(only_stop_words, labels, k, 0.5, 2) is None
    same_everywhere = ["tar archive"] * 1200  # in every document: over any max_df < 1
    assert cluster.class_counts(same_everywhere, labels, k, 0.5, 2) is None
    assert _reference(same_everywhere, labels, k, 0.5, 2) is None
    tiny_max = ["tar"] * 1200
    assert cluster.class_counts(tiny_max, labels, k, 0.001, 2) is None
    assert _reference(tiny_max, labels, k, 0.001, 2) is None


def test_words_from_the_workers_give_the_same_counts():
    """A pooled first build's workers hand each document's label words over as text
    (`label_words`, space-separated), numbered by the parent as batches come back
    (`LabelWords.add`, any order); the counts are the vectoriser's on the label texts."""
    rng = random.Random(5)
    titles = [rng.choice(["Tar", "", "Archive ZIP"]) for _ in range(1200)]
    bodies = [_texts(rng, rng.randint(1, 3)) for _ in titles]
    k = 5
    labels = np.array([rng.randrange(k) for _ in titles], dtype=np.int64)
    texts = [cluster.label_text(t, b) for t, b in zip(titles, bodies, strict=True)]
    assert texts[0] == titles[0] + "\n" + "\n".join(bodies[0])[: cluster.LABEL_TEXT_CHARS]
    vocabulary = cluster.LabelWords()
    for n in rng.sample(range(len(texts)), len(texts)):  # batches come back in any order
        vocabulary.add(f"sha{n}", " ".join(cluster.label_words(texts[n])))
    words = [vocabulary.by_sha[f"sha{n}"] for n in range(len(texts))]
    got = cluster.class_counts(texts, labels, k, 0.3, 2, words, vocabulary)
    want = _reference(texts, labels, k, 0.3, 2)
    assert got is not None and want is not None
    assert got[0].tolist() == want[0].tolist() and np.array_equal(got[1], want[1])
    assert cluster.cluster_keywords(texts, labels, k, words=words, vocabulary=vocabulary) == (
        cluster.cluster_keywords(texts, labels, k)
    )
