"""Embed: only chunk texts whose SHA-256 has no cached vector for the current
(provider, model, dimensions). Each batch is committed as it comes back, so an interrupted run
resumes where it stopped and a moved or reverted file costs no embedding at all.
"""

from __future__ import annotations

from collections.abc import Callable

from mdvdb.providers.base import EmbeddingProvider, ProviderError
from pipeline.state import State


def model_key(provider: EmbeddingProvider) -> str:
    return f"{provider.name}:{provider.model}:{provider.dimensions}"


def embed_missing(
    state: State,
    provider: EmbeddingProvider,
    texts: dict[bytes, str],
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Embed every text whose sha is not cached; returns how many were embedded."""
    key = model_key(provider)
    known = state.known_embeddings(key, texts.keys())
    todo = [sha for sha in texts if sha not in known]
    if not todo:
        return 0
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    done = 0
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
            progress(done, len(todo))
    return done
