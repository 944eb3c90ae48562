"""Build an ONNX graph of a BERT-style encoder straight from its safetensors, int8 where it is safe.

No torch and no exporter: the graph is written node by node with the `onnx` package, from the
same tensors the NumPy forward pass (`minilm.BertEncoder`) reads, so the two compute the same
function. It is built once per model (a few seconds) and cached per user (`encoder_onnx`).

Quantisation, chosen by measurement (docs/search-quality.md, "A fast runtime for MiniLM"):
the weight matrices are stored as int8 with one scale per output column (symmetric), and each
product runs as onnxruntime's `DynamicQuantizeMatMul` (the activations are quantised to uint8
per tensor on the fly; on CPUs with VNNI/AMX the product is an integer kernel). Two places stay
float32 because int8 there moved vectors too far from the reference:
- the feed-forward down projection, whose input (the GELU output) has a few channels with
  outliers ~20x the rest: with it in int8 the cosine to the NumPy vectors fell to 0.89 for
  some texts; without it the worst of 51 texts is 0.993 (per-tensor) to 0.996 (per-column);
- the attention products (Q·Kᵀ and softmax·V), which have no fixed weights to quantise; they
  run in onnxruntime's fused `MultiHeadAttention` (~10% faster than the same graph in plain
  MatMul/Softmax/Transpose nodes, same vectors).
The attention scale 1/√d is folded into the query weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Bump when the graph this module writes changes: it is part of the cache key.
GRAPH_VERSION = 2
OPSET = 20  # for the Gelu operator (exact erf form)
MS_DOMAIN = "com.microsoft"


def _int8_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """weight (in, out) -> int8 weights and one float32 scale per output column (symmetric)."""
    peak = np.abs(weight).max(axis=0)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    quantised = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    return quantised, scale


def build_graph(weights: dict[str, np.ndarray], spec, out: Path, quantise: bool = True) -> None:
    """Write the encoder graph to `out` (`graph_bytes`)."""
    out.write_bytes(graph_bytes(weights, spec, quantise))


def graph_bytes(weights: dict[str, np.ndarray], spec, quantise: bool = True) -> bytes:
    """The encoder graph, serialised: inputs input_ids, attention_mask (int64, batch x
    length); output `embedding` (batch x hidden), pooled as the model's pooling config says
    (mean over the mask, or the [CLS] row), not yet unit length. `quantise=False` keeps every
    product float32: the reference's function on onnxruntime's kernels (a warm process's
    query path, `minilm.warm_queries`)."""
    from onnx import TensorProto
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    w = {k.removeprefix("bert."): v for k, v in weights.items()}
    hidden, heads = spec.hidden_size, spec.heads
    head_dim = hidden // heads
    inits: list = []
    nodes: list = []

    def const(name: str, value) -> str:
        inits.append(nh.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], domain: str = "", **attrs) -> str:
        name = f"{op}_{len(nodes)}"
        nodes.append(oh.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def int8_linear(x: str, name: str, weight: np.ndarray, bias: np.ndarray) -> str:
        if not quantise:
            product = node("MatMul", [x, const(name + ".weight.T", np.ascontiguousarray(weight.T))])
            return node("Add", [product, const(name + ".bias", bias.astype(np.float32))])
        quantised, scale = _int8_columns(np.ascontiguousarray(weight.T))
        return node(
            "DynamicQuantizeMatMul",
            [
                x,
                const(name + ".int8", quantised),
                const(name + ".scale", scale),
                "",
                const(name + ".bias", bias.astype(np.float32)),
            ],
            domain=MS_DOMAIN,
        )

    def float_linear(x: str, prefix: str) -> str:
        weight = const(prefix + ".weight.T", np.ascontiguousarray(w[prefix + ".weight"].T))
        product = node("MatMul", [x, weight])
        return node("Add", [product, const(prefix + ".bias", w[prefix + ".bias"])])

    def layer_norm(x: str, prefix: str) -> str:
        scale = const(prefix + ".weight", w[prefix + ".weight"])
        shift = const(prefix + ".bias", w[prefix + ".bias"])
        return node("LayerNormalization", [x, scale, shift], axis=-1, epsilon=spec.layer_norm_eps)

    # Embeddings: word + position (sliced to the input length) + token type 0.
    word = node("Gather", [const("word", w["embeddings.word_embeddings.weight"]), "input_ids"])
    length = node(
        "Gather", [node("Shape", ["input_ids"]), const("one_i", np.array([1], np.int64))], axis=0
    )
    zero = const("zero_i", np.array([0], np.int64))
    position = node(
        "Slice", [const("pos", w["embeddings.position_embeddings.weight"]), zero, length, zero]
    )
    x = node("Add", [word, position])
    x = node("Add", [x, const("type0", w["embeddings.token_type_embeddings.weight"][0])])
    x = layer_norm(x, "embeddings.LayerNorm")

    # onnxruntime's fused attention: 1 = a real token in the key padding mask.
    mask32 = node("Cast", ["attention_mask"], to=TensorProto.INT32)
    keep = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    scale = np.float32(1.0 / np.sqrt(head_dim))
    axis2 = const("axis2", np.array([2], np.int64))
    bounds = [const(f"at{j}", np.array([j * hidden], np.int64)) for j in range(4)]
    for i in range(spec.layers):
        p = f"encoder.layer.{i}."
        att = p + "attention."
        qkv_w = np.concatenate([w[f"{att}self.{n}.weight"] for n in ("query", "key", "value")])
        qkv_b = np.concatenate([w[f"{att}self.{n}.bias"] for n in ("query", "key", "value")])
        qkv_w[:hidden] *= scale  # fold 1/sqrt(d) into the query projection
        qkv_b[:hidden] *= scale
        qkv = int8_linear(x, f"{att}qkv", qkv_w, qkv_b)
        q, k, v = (node("Slice", [qkv, bounds[j], bounds[j + 1], axis2]) for j in range(3))
        context = node(
            "MultiHeadAttention",
            [q, k, v, "", mask32],
            domain=MS_DOMAIN,
            num_heads=heads,
            scale=1.0,
        )
        out_w, out_b = w[f"{att}output.dense.weight"], w[f"{att}output.dense.bias"]
        x = node("Add", [int8_linear(context, f"{att}out", out_w, out_b), x])
        x = layer_norm(x, f"{att}output.LayerNorm")
        up_w, up_b = w[f"{p}intermediate.dense.weight"], w[f"{p}intermediate.dense.bias"]
        up = node("Gelu", [int8_linear(x, f"{p}up", up_w, up_b)], approximate="none")
        x = node("Add", [float_linear(up, f"{p}output.dense"), x])
        x = layer_norm(x, f"{p}output.LayerNorm")

    if spec.cls_pooling:
        pooled = node("Gather", [x, const("cls", np.array(0, np.int64))], axis=1)
    else:
        weights_ = node("Unsqueeze", [keep, axis2])
        axis1 = const("axis1", np.array([1], np.int64))
        total = node("ReduceSum", [node("Mul", [x, weights_]), axis1], keepdims=0)
        count = node("ReduceSum", [weights_, axis1], keepdims=0)
        count = node("Max", [count, const("tiny", np.array(1e-9, np.float32))])
        pooled = node("Div", [total, count])
    nodes.append(oh.make_node("Identity", [pooled], ["embedding"], name="out"))
    inputs = [
        oh.make_tensor_value_info(n, TensorProto.INT64, ["batch", "length"])
        for n in ("input_ids", "attention_mask")
    ]
    output = oh.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])
    graph = oh.make_graph(nodes, "bert_encoder", inputs, [output], inits)
    model = oh.make_model(
        graph, opset_imports=[oh.make_opsetid("", OPSET), oh.make_opsetid(MS_DOMAIN, 1)]
    )
    model.ir_version = 9
    return model.SerializeToString()
