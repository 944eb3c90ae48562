"""OpenAI's embeddings API, and any server that speaks it (`custom`: llama.cpp, vLLM, LM Studio,
TEI, a proxy); docs/architecture.md, "Remote providers".
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kernel.providers.base import ProviderError
from kernel.providers.http import HttpEmbeddingProvider

OPENAI_BASE = "https://api.openai.com"
# All of OpenAI's embedding models take 8192 tokens (8191 plus an end token).
OPENAI_MAX_INPUT_TOKENS = 8191


def embeddings_url(base: str) -> str:
    """`{base}/v1/embeddings` from a base, a base ending in `/v1`, an Azure deployment path or
    the full URL; a query string (Azure's api-version) is kept."""
    parts = urlsplit(base.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ProviderError(f"{base!r} is not an http(s) URL")
    path = parts.path.rstrip("/")
    if path.endswith("/embeddings"):
        pass
    elif re.search(r"/v\d+(beta)?$", path) or "/deployments/" in path:
        path += "/embeddings"
    else:
        path += "/v1/embeddings"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class OpenAIProvider(HttpEmbeddingProvider):
    name = "openai"
    url_setting = "OPENAI_BASE_URL"
    key_setting = "OPENAI_API_KEY"
    default_max_input_tokens = OPENAI_MAX_INPUT_TOKENS

    def headers(self) -> dict[str, str]:
        if self._api_key and (urlsplit(self.url).hostname or "").endswith(".azure.com"):
            return {"api-key": self._api_key}
        return super().headers()

    def payload(self, texts: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "base64"}
        if self.dimensions and self.model.startswith("text-embedding-3"):
            body["dimensions"] = self.dimensions
        return body

    def vectors_of(self, body: Any) -> list[Any]:
        data = sorted(body["data"], key=lambda item: item.get("index", 0))
        return [item["embedding"] for item in data]


class CustomProvider(OpenAIProvider):
    """Any OpenAI-compatible endpoint; the key is optional."""

    name = "custom"
    url_setting = "MDVDB_EMBEDDING_ENDPOINT"
    key_setting = "MDVDB_EMBEDDING_API_KEY"
    # llama.cpp's default physical batch and most TEI models stop at 512 tokens.
    default_max_input_tokens = 512

    def headers(self) -> dict[str, str]:
        return HttpEmbeddingProvider.headers(self)

    def payload(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts}


def openai_provider(config) -> OpenAIProvider:
    key = config.endpoint_key("OPENAI_BASE_URL", "openai")
    if not key:
        raise ProviderError(
            "openai: OPENAI_API_KEY is not set (put it in the environment or in .markdownvdb)"
        )
    base = config.env("OPENAI_BASE_URL") or OPENAI_BASE
    try:
        url = embeddings_url(base)
    except ProviderError as exc:
        raise ProviderError(f"openai: OPENAI_BASE_URL {exc}") from None
    return OpenAIProvider.for_config(config, url, key)


def custom_provider(config) -> CustomProvider:
    try:
        url = embeddings_url(config.embedding_endpoint or "")
    except ProviderError as exc:
        raise ProviderError(f"custom: MDVDB_EMBEDDING_ENDPOINT {exc}") from None
    key = config.endpoint_key("MDVDB_EMBEDDING_ENDPOINT", "custom")
    return CustomProvider.for_config(config, url, key)
