"""Embed: only chunk texts whose SHA-256 has no cached vector for the current
(provider, model, dimensions). Each batch is committed as it comes back, so an interrupted run
resumes where it stopped and a moved or reverted file costs no embedding at all.
"""

from __future__ import annotations

from collections.abc import Callable

from mdvdb.providers.base import EmbeddingProvider, ProviderError
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
    """A provider configured with dimensions 0 takes the size its model returns. The size is
    remembered per (provider, model), so the cache key is known before any request and a run
    with everything cached sends none."""
    if provider.dimensions == 0:
        known = state.get_value(_dimensions_key(provider))
        if known:
            provider.dimensions = int(known)


def _learn_dimensions(state: State, provider: EmbeddingProvider, sha: bytes, text: str) -> None:
    """Embed one text to find out the model's size (its vector is kept like any other)."""
    vectors = provider.embed([text])
    state.set_value(_dimensions_key(provider), provider.dimensions)
    state.put_embeddings(model_key(provider), [sha], vectors)


def embed_missing(
    state: State,
    provider: EmbeddingProvider,
    texts: dict[bytes, str],
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Embed every text whose sha is not cached; returns how many were embedded."""
    restore_dimensions(state, provider)
    learned = 0
    if provider.dimensions == 0 and texts:
        first = next(iter(texts))
        _learn_dimensions(state, provider, first, texts[first])
        learned = 1
    key = model_key(provider)
    known = state.known_embeddings(key, texts.keys())
    todo = [sha for sha in texts if sha not in known]
    if not todo:
        return learned
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    done = learned
    for index, vectors in provider.embed_batches([[texts[s] for s in b] for b in batches]):
        batch = batches[index]
        if vectors.shape != (len(batch), provider.dimensions):
            raise ProviderError(
                f"{provider.name}: expected {len(batch)} vectors of {provider.dimensions} "
                f"dimensions, got shape {tuple(vectors.shape)}; check MDVDB_EMBEDDING_DIMENSIONS"
            )
        state.put_embeddings(key, batch, vectors)
        done += len(batch)
        if progress:
            progress(done - learned, len(todo))
    return done
