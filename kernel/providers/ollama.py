"""Ollama: `POST {OLLAMA_HOST}/api/embed` with a batch `input` (Ollama 0.3.4 and later;
docs/architecture.md, "Remote providers").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from kernel.providers.base import ProviderError
from kernel.providers.http import HttpEmbeddingProvider

DEFAULT_HOST = "http://127.0.0.1:11434"


def ollama_url(host: str | None) -> str:
    """Read OLLAMA_HOST the way Ollama does: a bare `host[:port]` is http on port 11434,
    and the `0.0.0.0` a server binds to means this machine."""
    raw = (host or "").strip() or DEFAULT_HOST
    if "://" not in raw:
        hostport = raw.rstrip("/")
        if ":" not in hostport.rsplit("]", 1)[-1]:
            hostport += ":11434"
        raw = f"http://{hostport}"
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderError(f"ollama: OLLAMA_HOST {host!r} is not a host or http(s) URL")
    base = raw.rstrip("/")
    if parts.hostname == "0.0.0.0":
        base = base.replace("0.0.0.0", "127.0.0.1", 1)
    return f"{base}/api/embed"


class OllamaProvider(HttpEmbeddingProvider):
    name = "ollama"
    url_setting = "OLLAMA_HOST"
    key_setting = None
    default_max_input_tokens = 2048

    def payload(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts, "truncate": True}

    def vectors_of(self, body: Any) -> list[Any]:
        return body["embeddings"]

    def fix_for(self, status: int, message: str) -> str:
        if status == 404 and "not found" in message:
            return f"run `ollama pull {self.model}` or set MDVDB_EMBEDDING_MODEL"
        if status == 404:
            return "check OLLAMA_HOST (Ollama 0.3.4 or later serves /api/embed)"
        return super().fix_for(status, message)


def ollama_provider(config) -> OllamaProvider:
    return OllamaProvider.for_config(config, ollama_url(config.env("OLLAMA_HOST")))
