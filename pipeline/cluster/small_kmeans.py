"""The cluster stage's k-means (`KMeans(n_init=1)`'s algorithm) and exact cosine silhouette in
plain NumPy, so a small folder's ingest never imports scikit-learn (docs/clusters.md, "Small
folders: plain NumPy")."""

from __future__ import annotations

import numpy as np

MAX_ITER = 100
TOLERANCE = 1e-4  # scikit-learn's default: relative to the data's mean variance


def _squared_distances(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """(n, k) squared Euclidean distances, clipped at 0 (rounding can dip below)."""
    sq = (
        np.einsum("ij,ij->i", points, points)[:, None]
        - 2.0 * points @ centers.T
        + np.einsum("ij,ij->i", centers, centers)[None, :]
    )
    return np.maximum(sq, 0.0)


def _seed_centers(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++: each new centre is the best of 2 + log k candidates drawn in
    proportion to the squared distance to the nearest centre so far."""
    n = len(points)
    trials = 2 + int(np.log(k))
    centers = np.empty((k, points.shape[1]), dtype=points.dtype)
    centers[0] = points[rng.integers(n)]
    closest = _squared_distances(points, centers[:1])[:, 0]
    for c in range(1, k):
        total = closest.sum()
        if total <= 0:  # fewer distinct points than k: any point will do
            candidates = rng.integers(n, size=trials)
        else:
            cumulative = np.cumsum(closest)
            draws = rng.random(trials) * total
            candidates = np.minimum(np.searchsorted(cumulative, draws), n - 1)
        to_candidates = _squared_distances(points, points[candidates])  # (n, trials)
        potentials = np.minimum(closest[:, None], to_candidates).sum(axis=0)
        best = int(np.argmin(potentials))
        centers[c] = points[candidates[best]]
        closest = np.minimum(closest, to_candidates[:, best])
    return centers


def kmeans(points: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(centres, labels) of k clusters; deterministic for the same input and seed."""
    data = points.astype(np.float64, copy=False)
    rng = np.random.default_rng(seed)
    centers = _seed_centers(data, k, rng)
    tolerance = TOLERANCE * float(np.mean(np.var(data, axis=0)))
    labels = np.full(len(data), -1, dtype=np.int64)
    for _ in range(MAX_ITER):
        distances = _squared_distances(data, centers)
        new_labels = distances.argmin(axis=1)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, data)
        counts = np.bincount(labels, minlength=k)
        moved = centers.copy()
        filled = counts > 0
        moved[filled] = sums[filled] / counts[filled, None]
        for empty in np.flatnonzero(~filled):  # an emptied cluster takes the farthest point
            far = int(distances[np.arange(len(data)), labels].argmax())
            moved[empty] = data[far]
        shift = float(((moved - centers) ** 2).sum())
        centers = moved
        if shift <= tolerance:
            labels = _squared_distances(data, centers).argmin(axis=1)
            break
    return centers, labels.astype(np.int64)


def silhouette_cosine(points: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette under cosine distance; 0 for a document alone in its cluster."""
    data = points.astype(np.float64, copy=False)
    norms = np.linalg.norm(data, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit = data / norms
    distances = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)
    ids, inverse = np.unique(labels, return_inverse=True)
    if len(ids) < 2:
        return 0.0
    membership = np.zeros((len(ids), len(labels)))
    membership[inverse, np.arange(len(labels))] = 1.0
    sizes = membership.sum(axis=1)
    per_cluster = distances @ membership.T  # (n, clusters): summed distance to each
    own_size = sizes[inverse]
    own = per_cluster[np.arange(len(labels)), inverse]
    a = np.divide(own, own_size - 1, out=np.zeros_like(own), where=own_size > 1)
    means = per_cluster / sizes[None, :]
    means[np.arange(len(labels)), inverse] = np.inf
    b = means.min(axis=1)
    bigger = np.maximum(a, b)
    score = np.divide(b - a, bigger, out=np.zeros_like(a), where=bigger > 0)
    score[own_size <= 1] = 0.0
    return float(score.mean())
