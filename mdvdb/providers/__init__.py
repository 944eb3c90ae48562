"""Embedding providers behind one small interface (`base.EmbeddingProvider`).

`get_provider` imports only the module it needs, so a command that does not embed pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mdvdb.providers.base import EmbeddingProvider, ProviderError

if TYPE_CHECKING:
    from mdvdb.config import Config

__all__ = ["EmbeddingProvider", "ProviderError", "get_provider"]


def get_provider(config: Config) -> EmbeddingProvider:
    name = config.embedding_provider
    if name == "local":
        from mdvdb.providers.local import LocalProvider

        return LocalProvider(
            config.embedding_model, config.embedding_dimensions, cache_dir=config.state_path
        )
    raise ProviderError(
        f"embedding provider {name!r} is not available in this build "
        "(set MDVDB_EMBEDDING_PROVIDER=local)"
    )
