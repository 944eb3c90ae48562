"""The cluster stage's small-folder path (plain NumPy) against scikit-learn's, on the same input;
and a real ingest of a small folder that never imports scikit-learn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.cluster import topics as cluster
from tests.test_clusters import TOPICS, write_corpus


def blobs(per: int = 20, dims: int = 16, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Four tight, well-separated groups of unit vectors, and each row's group."""
    rng = np.random.default_rng(seed)
    centres = np.eye(dims)[:4] * 5
    points = np.concatenate([c + rng.normal(0, 0.3, (per, dims)) for c in centres])
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), np.repeat(np.arange(4), per)


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def with_sklearn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "NUMPY_BELOW", 0)


@pytest.mark.slow
def test_stop_words_are_scikit_learns():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from pipeline.cluster.stop_words import ENGLISH_STOP_WORDS as ours

    assert ours == ENGLISH_STOP_WORDS


@pytest.mark.slow
def test_kmeans_finds_the_groups_scikit_learn_finds(monkeypatch: pytest.MonkeyPatch):
    points, truth = blobs()
    centres, labels = cluster.fit_kmeans(points, 4)
    assert same_partition(labels, truth)
    assert np.allclose(np.linalg.norm(centres, axis=1), 1.0)
    again = cluster.fit_kmeans(points, 4)  # deterministic for the same seed
    assert np.array_equal(again[1], labels) and np.array_equal(again[0], centres)
    with_sklearn(monkeypatch)
    assert same_partition(cluster.fit_kmeans(points, 4)[1], labels)


def test_kmeans_more_clusters_than_distinct_points():
    points = np.repeat(np.eye(3, dtype=np.float32), 4, axis=0)  # 3 distinct rows
    centres, labels = cluster.fit_kmeans(points, 5)
    assert centres.shape == (5, 3) and labels.shape == (12,)
    assert len(set(labels.tolist())) >= 3


@pytest.mark.slow
def test_silhouette_is_scikit_learns(monkeypatch: pytest.MonkeyPatch):
    points, truth = blobs(per=7)
    rng = np.random.default_rng(0)
    for labels in (truth, rng.integers(0, 3, len(truth)), np.r_[0, np.ones(27, dtype=int)]):
        ours = cluster.silhouette(points, labels)
        with monkeypatch.context() as patch:
            with_sklearn(patch)
            theirs = cluster.silhouette(points, labels)
        assert ours == pytest.approx(theirs, abs=1e-6)


def corpus_texts(tmp_path: Path) -> list[str]:
    write_corpus(tmp_path, per_topic=8)
    return [p.read_text(encoding="utf-8") for p in sorted(tmp_path.rglob("*.md"))]


def test_keywords_name_the_topics(tmp_path: Path):
    texts = corpus_texts(tmp_path)
    texts += ["<b>Bold</b> https://x.io/path and `code`\n```\nfenced words here\n```\nplain"]
    rng = np.random.default_rng(1)
    cases = [(texts, np.repeat(np.arange(4), 8).tolist() + [0], 4)]
    cases += [(texts[:5], rng.integers(0, 2, 5).tolist(), 2)]  # small: no df pruning
    cases += [(["the and of", "a an the"], [0, 1], 2)]  # nothing but stop words
    cases += [(texts, rng.integers(0, 6, len(texts)).tolist(), 6)]
    results = []
    for docs, labels, k in cases:
        results.append(cluster.cluster_keywords(docs, np.array(labels), k))
    assert all(results[0]) and results[2] == [[], []]
    vocab = set(" ".join(TOPICS.values()).split()) | set(TOPICS)
    assert {w for words in results[0] for w in words} <= vocab | {"bold", "plain", "fenced"}


def test_small_ingest_never_imports_scikit_learn(tmp_path: Path):
    """The real CLI, `-X importtime` listing every module the ingest imported."""
    root = tmp_path / "topics"
    write_corpus(root, per_topic=3)
    env = {**os.environ}
    env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mdvdb", "ingest", "--json", "--root", root],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "pipeline.cluster.small_kmeans" in imported  # the stage ran, on the NumPy path
    assert not {m for m in imported if m.split(".")[0] in ("sklearn", "scipy")}


def test_above_20k_documents_k_is_chosen_on_a_sample_and_fitted_on_all():
    """Many documents: the candidate k are tried on a sample (`K_SEARCH_SAMPLE`) and only
    the chosen one is fitted on every document; on 24 separated topics it finds all 24."""
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(7)
    n = cluster.MINIBATCH_ABOVE + 1000
    centres = rng.normal(size=(24, 16))
    truth = rng.integers(24, size=n)
    vectors = (centres[truth] + 0.05 * rng.normal(size=(n, 16))).astype(np.float32)
    choice = cluster.choose_and_fit(vectors, 24)
    assert sorted(choice.tried) == cluster.candidate_ks(n, 24) == [12, 15, 19, 24]
    assert choice.k == 24 and len(choice.labels) == n
    assert adjusted_rand_score(truth, choice.labels) > 0.95
