"""Embed: only chunk texts with no cached vector for (provider, model, dimensions), each batch
committed as it comes back. A NaN, infinite or zero vector would poison every later search
and clustering once cached: it is asked for once more, then left out (keywords only)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernel.providers.base import EmbeddingProvider, ProviderError
from pipeline.state import State


def model_key(provider: EmbeddingProvider) -> str:
    """The cache key of a vector. A provider whose model can change under the same name (a
    local model folder) adds a `revision` (its weights' SHA-256), so new weights re-embed."""
    key = f"{provider.name}:{provider.model}:{provider.dimensions}"
    revision = getattr(provider, "revision", "")
    return f"{key}:{revision}" if revision else key


def _dimensions_key(provider: EmbeddingProvider) -> str:
    return f"dimensions:{provider.name}:{provider.model}"


def restore_dimensions(state: State, provider: EmbeddingProvider) -> None:
    """A provider configured with dimensions 0 takes the size its model returns, remembered
    per (provider, model) so the cache key is known before any request."""
    if provider.dimensions == 0:
        known = state.get_value(_dimensions_key(provider))
        if known:
            provider.dimensions = int(known)


def usable_rows(vectors: np.ndarray) -> np.ndarray:
    """Per row: every value finite and the row not zero (a vector search can use it)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or not len(vectors):
        return np.ones(len(vectors), dtype=bool)
    finite = np.isfinite(vectors).all(axis=1)
    return finite & (np.abs(np.where(finite[:, None], vectors, 0)).max(axis=1) > 0)


def _learn_dimensions(state: State, provider: EmbeddingProvider, sha: bytes, text: str) -> int:
    """Embed one text to find out the model's size (its vector is kept like any other,
    when it is usable); returns 1 if it was cached."""
    vectors = provider.embed([text])
    state.set_value(_dimensions_key(provider), provider.dimensions)
    if not usable_rows(vectors).all():
        return 0
    state.put_embeddings(model_key(provider), [sha], vectors)
    return 1


def embed_missing(
    state: State,
    provider: EmbeddingProvider,
    texts: dict[bytes, str],
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
    rejected: list[bytes] | None = None,
) -> int:
    """Embed every text whose sha is not cached; returns how many were embedded. The shas
    of texts whose vectors were unusable twice are appended to `rejected`."""
    restore_dimensions(state, provider)
    learned = 0
    if provider.dimensions == 0 and texts:
        first = next(iter(texts))
        learned = _learn_dimensions(state, provider, first, texts[first])
    key = model_key(provider)
    known = state.known_embeddings(key, texts.keys())
    todo = [sha for sha in texts if sha not in known]
    if not todo:
        return learned
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    done = learned
    retry: list[bytes] = []
    for index, vectors in provider.embed_batches([[texts[s] for s in b] for b in batches]):
        batch = batches[index]
        _check_shape(provider, vectors, len(batch))
        done += _keep_usable(state, key, batch, vectors, retry)
        if progress:
            progress(done - learned, len(todo))
    # Asked once more, one text a request: a provider that fails on one text of a batch
    # (a NaN from an overflow, a zero vector for an empty tokenization) may not on its own.
    for sha in retry:
        vectors = provider.embed([texts[sha]])
        _check_shape(provider, vectors, 1)
        failed: list[bytes] = []
        done += _keep_usable(state, key, [sha], vectors, failed)
        if failed and rejected is not None:
            rejected.extend(failed)
    return done


def _check_shape(provider: EmbeddingProvider, vectors: np.ndarray, n: int) -> None:
    if vectors.shape != (n, provider.dimensions):
        raise ProviderError(
            f"{provider.name}: expected {n} vectors of {provider.dimensions} "
            f"dimensions, got shape {tuple(vectors.shape)}; check MDVDB_EMBEDDING_DIMENSIONS"
        )


def _keep_usable(
    state: State, key: str, batch: list[bytes], vectors: np.ndarray, bad: list[bytes]
) -> int:
    """Cache the usable rows of a batch; append the shas of the others to `bad`."""
    ok = usable_rows(vectors)
    if ok.all():
        state.put_embeddings(key, batch, vectors)
        return len(batch)
    keep = np.flatnonzero(ok)
    if len(keep):
        state.put_embeddings(key, [batch[i] for i in keep], np.asarray(vectors)[keep])
    bad.extend(batch[i] for i in np.flatnonzero(~ok))
    return len(keep)
