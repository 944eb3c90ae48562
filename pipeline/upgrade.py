"""No waiting for quality (docs/upgrade.md): with a slow contextual model configured whose
vectors are not all cached yet, an ingest publishes the static model's index first, then
spends `MDVDB_UPGRADE_SECONDS` filling the configured model's cache; the run that finds every
chunk cached publishes the configured model's index. One model per index."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kernel import private
from kernel.config import PROVIDER_DEFAULTS, Config, local_model_is_encoder

if TYPE_CHECKING:
    from kernel.providers.base import EmbeddingProvider

# The progress of the upgrade under way, for `mdvdb status` (written after each run's share).
PROGRESS_FILE = "upgrade.json"


def _slow(config: Config) -> bool:
    """A model that embeds a folder at a fraction of the static model's speed here (on Ray
    the actors embed it in the parse: the cluster is its speed, docs/scale-out.md)."""
    return (
        config.executor == "local"
        and config.embedding_provider == "local"
        and local_model_is_encoder(config.embedding_model)
    )


def target_of(config: Config) -> dict[str, Any]:
    """What a static-stage index records it is upgrading to (`meta["upgrading_to"]`)."""
    return {
        "provider": config.embedding_provider,
        "model": config.embedding_model,
        "dimensions": config.embedding_dimensions,
    }


def static_stage(config: Config) -> Config | None:
    """The configuration of the index to publish first, or None (the configured model's index
    is published already, the model is quick, or `MDVDB_UPGRADE_SECONDS=0`)."""
    if config.upgrade_seconds <= 0 or not _slow(config):
        return None
    from kernel.shards import published_meta

    try:
        meta = published_meta(config)
    except Exception:  # noqa: BLE001 - no index, or one that cannot be read: build one
        meta = {}
    built = {k: meta.get(k) for k in ("provider", "model", "dimensions")}
    wanted = target_of(config)
    if built == wanted or (config.embedding_dimensions == 0 and built["model"] == wanted["model"]):
        return None
    model, dimensions = PROVIDER_DEFAULTS["local"]
    return replace(
        config, embedding_provider="local", embedding_model=model, embedding_dimensions=dimensions
    )


def advance(
    config: Config,
    provider: EmbeddingProvider | None,
    seconds: float,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict:
    """Embed for the configured model the published manifest's chunks its cache lacks, a
    committed batch at a time until `seconds` have passed (at least one batch); the progress
    as `mdvdb status` shows it."""
    from kernel.providers import get_provider
    from pipeline.embed import embed_missing, model_key, restore_dimensions
    from pipeline.stages import chunk_key
    from pipeline.state import State

    started = time.perf_counter()
    with State(config.state_path, index_path=config.index_path) as state:
        own = provider is None
        provider = provider or get_provider(config)
        try:
            restore_dimensions(state, provider)
            texts = _chunk_texts(state, chunk_key(config))
            key = model_key(provider)
            known = state.known_embeddings(key, texts) if provider.dimensions else set()
            todo = [(sha, text) for sha, text in texts.items() if sha not in known]
            size, asked = config.embedding_batch_size, 0
            while asked < len(todo) and (not asked or time.perf_counter() - started < seconds):
                part = dict(todo[asked : asked + size])
                embed_missing(state, provider, part, size, rejected=[])
                asked += len(part)
                if progress is not None:
                    progress("upgrade", asked, len(todo))
        finally:
            release = getattr(provider, "release_encoder", None)
            if release is not None:  # its session is the next stages' memory (embed stage)
                release()
            if own:
                provider.close()
    elapsed = time.perf_counter() - started
    left = len(todo) - asked
    progress = {
        "model": config.embedding_model,
        "chunks": len(texts),
        "done": len(texts) - left,
        "left": left,
        "chunks_per_second": round(asked / elapsed, 1) if asked and elapsed > 0 else None,
        "written_at": time.time(),
        "complete": left == 0,
    }
    _write_progress(config, progress)
    return progress


def _chunk_texts(state, chunks: str) -> dict[bytes, str]:
    """chunk sha -> the text its vector is made of, for every file of the stored manifest
    (what the embed stage of a direct build embeds)."""
    shas = sorted({entry.sha256 for entry in state.manifest().values()})
    texts: dict[bytes, str] = {}
    for doc in state.get_chunks(chunks, shas).values():
        for c in doc["chunks"]:
            texts[bytes.fromhex(c["sha256"])] = c["embed_text"]
    return texts


def _write_progress(config: Config, progress: dict) -> None:
    path = config.state_path / PROGRESS_FILE
    temp = path.with_name(f".{PROGRESS_FILE}.{os.getpid()}")
    private.write_file(temp, json.dumps(progress).encode())
    os.replace(temp, path)  # a reader sees the old progress or the new one, never half


def progress_of(config: Config) -> dict | None:
    """The upgrade the published index is the static stage of, as `mdvdb status` shows it
    (model, chunks done and left, share, ETA); None when the index is no static stage."""
    from kernel.shards import published_meta

    try:
        meta = published_meta(config)
    except Exception:  # noqa: BLE001 - a damaged or missing index is no upgrade's stage
        return None
    target = meta.get("upgrading_to") if isinstance(meta, dict) else None
    if not isinstance(target, dict):
        return None
    try:
        raw = json.loads((config.state_path / PROGRESS_FILE).read_bytes())
    except (OSError, ValueError):
        raw = {}
    if not isinstance(raw, dict) or raw.get("model") != target.get("model"):
        raw = {}
    chunks, done = int(raw.get("chunks") or 0), int(raw.get("done") or 0)
    rate = raw.get("chunks_per_second")
    left = max(chunks - done, 0)
    return {
        "model": target.get("model"),
        "chunks": chunks,
        "done": done,
        "left": left,
        "share": round(done / chunks, 4) if chunks else 0.0,
        "eta_seconds": round(left / rate, 1) if rate else None,
    }
