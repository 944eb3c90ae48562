"""The embedding provider interface shared by ingest (pipeline) and query embedding.

Providers live outside `pipeline/` so that the read side can embed a query without importing
the write side. A provider returns unit-length float32 rows, so a dot product is a cosine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

import numpy as np


class ProviderError(RuntimeError):
    """A provider failed in a way the user must fix or retry; the message is one line and
    never contains a secret."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    name: str
    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts; shape (len(texts), dimensions), float32, unit-length rows."""
        ...

    def embed_batches(self, batches: Sequence[Sequence[str]]) -> Iterator[tuple[int, np.ndarray]]:
        """Yield (batch index, vectors) as batches complete, in any order, so the caller can
        persist each one at once (an interrupted run keeps what came back)."""
        ...

    def close(self) -> None: ...


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class SequentialBatches:
    """Mixin: `embed_batches` as a plain loop over `embed`, for providers with no concurrency."""

    def embed_batches(self, batches: Sequence[Sequence[str]]) -> Iterator[tuple[int, np.ndarray]]:
        for i, batch in enumerate(batches):
            yield i, self.embed(batch)  # type: ignore[attr-defined]

    def close(self) -> None:
        return None
