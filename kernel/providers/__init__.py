"""Embedding providers behind one small interface (`base.EmbeddingProvider`).

`get_provider` imports only the module it needs, so a command that does not embed pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.providers.base import EmbeddingProvider, ProviderError

if TYPE_CHECKING:
    from kernel.config import Config

__all__ = ["EmbeddingProvider", "ProviderError", "get_provider"]


def get_provider(config: Config) -> EmbeddingProvider:
    """The configured provider. Remote ones connect lazily: creating one costs no request."""
    name = config.embedding_provider
    if name == "local":
        from kernel.config import local_model_is_encoder

        if local_model_is_encoder(config.embedding_model):
            from kernel.providers.minilm import MiniLMProvider

            return MiniLMProvider(config.embedding_model, config.embedding_dimensions, config.root)
        from kernel.providers.local import LocalProvider

        return LocalProvider(config.embedding_model, config.embedding_dimensions)
    if name == "openai":
        from kernel.providers.openai import openai_provider

        return openai_provider(config)
    if name == "custom":
        from kernel.providers.openai import custom_provider

        return custom_provider(config)
    if name == "ollama":
        from kernel.providers.ollama import ollama_provider

        return ollama_provider(config)
    raise ProviderError(
        f"embedding provider {name!r} is unknown (use local, openai, ollama or custom)"
    )
