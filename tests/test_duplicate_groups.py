"""Near-duplicate groups (pipeline/duplicates.py) are the connected components of signatures
within 3 bits: the bucketed search finds exactly the pairs a brute-force comparison finds."""

from __future__ import annotations

import numpy as np

from pipeline import duplicates


def _brute_force_groups(signatures: np.ndarray) -> np.ndarray:
    unique, inverse = np.unique(signatures, return_inverse=True)
    m = len(unique)
    labels = np.arange(m)
    distance = duplicates.popcount(unique[:, None] ^ unique[None, :])
    a, b = np.nonzero(np.triu(distance <= duplicates.MAX_DISTANCE, 1))
    changed = True
    while changed:  # smallest index of each component
        low = np.minimum(labels[a], labels[b])
        changed = bool(((labels[a] != low) | (labels[b] != low)).any())
        np.minimum.at(labels, a, low)
        np.minimum.at(labels, b, low)
        labels = labels[labels]
    return labels[inverse]


def test_components_find_every_pair_within_three_bits() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(1, 2**63, size=400, dtype=np.uint64)
    copies = []
    for _ in range(600):  # near copies (1-3 flipped bits) of random bases, chains included
        source = base[rng.integers(0, len(base))] if rng.random() < 0.7 else copies[-1]
        flips = rng.choice(64, size=rng.integers(1, 4), replace=False).astype(np.uint64)
        copies.append(source ^ np.bitwise_or.reduce(np.uint64(1) << flips))
    signatures = np.concatenate([base, np.asarray(copies, dtype=np.uint64)])
    rng.shuffle(signatures)
    unique = np.unique(signatures)
    labels = duplicates._components(unique)
    expected = _brute_force_groups(unique)
    assert (labels != np.arange(len(unique))).sum() > 100  # many groups to find
    assert np.array_equal(labels, expected)
