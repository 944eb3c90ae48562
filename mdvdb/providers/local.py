"""The offline default: WordLlama static embeddings, read straight from the wheel's files.

WordLlama's own loader looks for its bundled files in the wrong folder, then tries to download,
and imports pydantic, requests and toml on the way (~350 ms). Its model is only a token
embedding table averaged over tokens, so we read the safetensors table and the tokenizer JSON
ourselves: ~40 ms to load, nothing touches the network.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from mdvdb.providers.base import ProviderError, SequentialBatches, normalize_rows

CONFIG_NAME = "l2_supercat"
NATIVE_DIMENSIONS = 256


def wordllama_folder() -> Path:
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ProviderError(
            "the local embedding model needs the 'wordllama' package: pip install wordllama"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=1)
def load_tokenizer():
    """The Llama-2 tokenizer shipped with WordLlama; also used to count chunk tokens."""
    from tokenizers import Tokenizer

    path = wordllama_folder() / "tokenizers" / f"{CONFIG_NAME}_tokenizer_config.json"
    if not path.is_file():
        raise ProviderError(f"local model tokenizer missing: {path}")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@lru_cache(maxsize=1)
def load_table() -> np.ndarray:
    from safetensors.numpy import load_file

    path = wordllama_folder() / "weights" / f"{CONFIG_NAME}_{NATIVE_DIMENSIONS}.safetensors"
    if not path.is_file():
        raise ProviderError(f"local model weights missing: {path}")
    return np.ascontiguousarray(load_file(str(path))["embedding.weight"], dtype=np.float32)


class LocalProvider(SequentialBatches):
    name = "local"

    def __init__(self, model: str = "wordllama-l2-supercat", dimensions: int = 256):
        if dimensions > NATIVE_DIMENSIONS:
            raise ProviderError(f"local model gives at most {NATIVE_DIMENSIONS} dimensions")
        self.model = model
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        table = load_table()
        encodings = load_tokenizer().encode_batch(list(texts), add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        ids = np.fromiter(
            (i for e in encodings for i in e.ids), dtype=np.int64, count=int(lengths.sum())
        )
        np.clip(ids, 0, table.shape[0] - 1, out=ids)
        # Matryoshka truncation: the first d dimensions of a WordLlama vector are a model.
        rows = table[ids, : self.dimensions]
        sums = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        nonempty = lengths > 0
        if nonempty.any():
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[nonempty]
            sums[nonempty] = np.add.reduceat(rows, starts, axis=0)
        return normalize_rows(sums / np.maximum(lengths, 1)[:, None])
