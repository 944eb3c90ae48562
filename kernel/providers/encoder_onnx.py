"""The fast runtime for BERT-style encoders: an int8 ONNX graph run by onnxruntime, built
on first use and cached per user (docs/architecture.md, "The ONNX runtime").
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import numpy as np

from kernel.providers.base import ProviderError, normalize_rows


def available() -> bool:
    """onnxruntime and onnx are importable (the `minilm` extra)."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


def graph_path(folder: Path, blockwise: bool) -> Path:
    """Where the built graph of this model folder lives: keyed by its files' digests and the
    form of its down projection (`encoder_graph.blockwise_kernel`)."""
    from kernel import user_cache
    from kernel.providers.encoder_graph import GRAPH_VERSION

    weights = user_cache.source_sha256(folder / "model.safetensors")
    config = hashlib.sha256((folder / "config.json").read_bytes())
    for extra in ("sentence_bert_config.json", "1_Pooling/config.json"):
        if (folder / extra).is_file():
            config.update((folder / extra).read_bytes())
    form = "b" if blockwise else "f"
    name = f"encoder-{weights[:32]}-{config.hexdigest()[:16]}-g{GRAPH_VERSION}{form}.onnx"
    return user_cache.models_dir() / name


def ensure_graph(folder: Path, spec, rebuild: bool = False) -> Path:
    """The cached graph for `folder`, built now if absent (or `rebuild`). A cache that cannot
    be written (read-only home) still works: the graph goes to a temp file for this process."""
    from kernel.providers.encoder_graph import blockwise_kernel

    blockwise = blockwise_kernel()
    path = graph_path(folder, blockwise)
    if path.is_file() and not rebuild:
        return path
    import tempfile

    from safetensors.numpy import load_file

    from kernel import user_cache
    from kernel.providers.encoder_graph import graph_bytes

    try:
        weights = load_file(str(folder / "model.safetensors"))
    except Exception as exc:  # safetensors raises its own error type on a damaged file
        raise ProviderError(f"cannot read {folder}/model.safetensors: {exc}") from None
    try:
        data = graph_bytes(weights, spec, blockwise=blockwise)
    except KeyError as exc:
        raise ProviderError(f"{folder}/model.safetensors has no tensor {exc}") from None
    if user_cache.atomic_write(path, lambda out: out.write(data)):
        return path
    built = Path(tempfile.mkdtemp(prefix="mdvdb-graph-")) / path.name
    built.write_bytes(data)
    return built


def load(folder: Path, spec, threads: int | None = None) -> OnnxEncoder:
    """The encoder for `folder`; a cached graph that does not load (damaged, cut short by a
    full disk) is rebuilt once."""
    try:
        return OnnxEncoder(ensure_graph(folder, spec), spec, threads)
    except ProviderError:
        return OnnxEncoder(ensure_graph(folder, spec, rebuild=True), spec, threads)


class OnnxEncoder:
    """`minilm.BertEncoder`'s forward(ids, mask) -> unit rows, one text per run, a run per core
    (docs/search-quality.md, "Every core: one text per run on a worker per core")."""

    tokens_per_pass = 1  # one text per run

    def __init__(
        self,
        path: Path | bytes,
        spec,
        threads: int | None = None,
        providers: tuple[str, ...] = ("CPUExecutionProvider",),
    ):
        import onnxruntime as ort

        self.spec = spec
        self.max_tokens = spec.max_tokens
        self.path = path if isinstance(path, Path) else None
        self.workers = os.cpu_count() or 1
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle worker threads sleep instead of spinning (the cores other processes need).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(
                path if isinstance(path, bytes) else str(path),
                options,
                providers=list(providers),  # a Ray actor given a GPU may put CUDA first
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            where = "built in memory" if isinstance(path, bytes) else str(path)
            raise ProviderError(f"cannot load the encoder graph {where}: {exc}") from None

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        return normalize_rows(self.session.run(None, feed)[0])
