"""The offline default: WordLlama static embeddings, read straight from the wheel's files
(no download, none of WordLlama's loader; docs/architecture.md, "The default embedding model").
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernel.providers.base import ProviderError, SequentialBatches, normalize_rows

CONFIG_NAME = "l2_supercat"
NATIVE_DIMENSIONS = 256


def wordllama_folder() -> Path:
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ProviderError(
            "the local embedding model needs the 'wordllama' package: pip install wordllama"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def tokenizer_path() -> Path:
    path = wordllama_folder() / "tokenizers" / f"{CONFIG_NAME}_tokenizer_config.json"
    if not path.is_file():
        raise ProviderError(f"local model tokenizer missing: {path}")
    return path


@lru_cache(maxsize=1)
def load_tokenizer():
    """The Llama-2 tokenizer shipped with WordLlama; also used to count chunk tokens."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path()))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def weights_path() -> Path:
    path = wordllama_folder() / "weights" / f"{CONFIG_NAME}_{NATIVE_DIMENSIONS}.safetensors"
    if not path.is_file():
        raise ProviderError(f"local model weights missing: {path}")
    return path


@lru_cache(maxsize=4)
def load_table(cache_dir: Path | None = None) -> np.ndarray:
    """The token table as float32: a memory-mapped `.npy` copy of the wheel's fp16 table in
    `cache_dir` (the per-user cache), so a query touches only its own rows; None: no copy."""
    source = weights_path()
    if cache_dir is None:
        return _read_safetensors(source)
    from kernel.user_cache import atomic_write, source_sha256

    try:
        cached = cache_dir / f"{source_sha256(source)}.f32.npy"
        if cached.is_file():
            table = np.load(cached, mmap_mode="r")
            if table.dtype == np.float32 and table.ndim == 2:
                return table
    except (OSError, ValueError):  # an unreadable or foreign cache: read the weights
        return _read_safetensors(source)
    table = _read_safetensors(source)
    atomic_write(cached, lambda fh: np.save(fh, table))
    return table


def _read_safetensors(path: Path) -> np.ndarray:
    from safetensors.numpy import load_file

    return np.ascontiguousarray(load_file(str(path))["embedding.weight"], dtype=np.float32)


QUICK_CHARS = 256  # the lookup BPE is quadratic in text length: for queries only


@lru_cache(maxsize=4)
def quick_bpe(cache_dir: Path | None):
    """The lookup BPE (kernel.providers.bpe), kept in the per-user cache under the tokenizer
    file's SHA-256; None without a cache."""
    if cache_dir is None:
        return None
    from kernel.providers.bpe import QueryBPE
    from kernel.user_cache import source_sha256

    try:
        source = tokenizer_path()
        path = cache_dir / f"{source_sha256(source)}.bpe.sqlite3"
        return QueryBPE(path) if path.is_file() else QueryBPE.build(source, path)
    except Exception:  # a read-only or broken cache: the Rust tokenizer still works
        return None


class LocalProvider(SequentialBatches):
    name = "local"
    # Re-embedding is cheaper than a second copy of the index's vectors (pipeline.state).
    cheap_to_recompute = True

    def __init__(
        self,
        model: str = "wordllama-l2-supercat",
        dimensions: int = 256,
        cache_dir: Path | None = None,
        use_cache: bool = True,
    ):
        """`cache_dir`: where the derived model files live (default: the per-user cache,
        `kernel.user_cache`); `use_cache=False` reads the model's own files every time."""
        if dimensions > NATIVE_DIMENSIONS:
            raise ProviderError(f"local model gives at most {NATIVE_DIMENSIONS} dimensions")
        self.model = model
        self.dimensions = dimensions
        if use_cache and cache_dir is None:
            from kernel.user_cache import models_dir

            cache_dir = models_dir()
        self.cache_dir = cache_dir if use_cache else None

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Short texts (a query) go through the lookup BPE, which starts in a millisecond;
        bulk text through the Rust tokenizer. Both give the same ids."""
        if len(texts) == 1 and len(texts[0]) <= QUICK_CHARS:
            bpe = quick_bpe(self.cache_dir)
            if bpe is not None:
                return [bpe.encode(t) for t in texts]
        encodings = load_tokenizer().encode_batch(list(texts), add_special_tokens=False)
        return [e.ids for e in encodings]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return self.embed_token_ids(self._token_ids(texts))

    def embed_token_ids(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """The vectors of texts already tokenized (`pipeline.chunking` hands the ids on). Each
        text's rows are summed on their own, so its vector is the same in any batch (a
        parallel ingest equals the serial one)."""
        table = load_table(self.cache_dir)
        d, last = self.dimensions, table.shape[0] - 1
        out = np.zeros((len(token_ids), d), dtype=np.float32)
        for i, ids in enumerate(token_ids):
            if ids:
                rows = np.asarray(ids, dtype=np.int64)
                np.clip(rows, 0, last, out=rows)
                out[i] = table[rows, :d].sum(axis=0) / len(ids)
        return normalize_rows(out)
