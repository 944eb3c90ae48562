"""Build an ONNX graph of a BERT-style encoder straight from its safetensors, int8 where it is safe
(docs/architecture.md, "The ONNX encoder graph").
"""

from __future__ import annotations

import numpy as np

# Bump when the graph this module writes changes: it is part of the cache key.
GRAPH_VERSION = 3
OPSET = 20  # for the Gelu operator (exact erf form)
MS_DOMAIN = "com.microsoft"
BLOCK = 256  # the down projection's quantisation block (input channels per scale)


def blockwise_kernel() -> bool:
    """onnxruntime here runs 8-bit `MatMulNBits` with int8 products: x86 from 1.22 (before
    that, and on other CPUs, an 8-bit node fails at run time)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    import onnxruntime

    try:
        major, minor = (int(part) for part in onnxruntime.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (1, 22)


def _int8_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """weight (in, out) -> int8 weights and one float32 scale per output column (symmetric)."""
    peak = np.abs(weight).max(axis=0)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    quantised = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    return quantised, scale


def _int8_blocks(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """weight (out, in) -> `MatMulNBits`' 8-bit layout: per output row, blocks of BLOCK input
    channels (the last one zero-padded), each quantised as `_int8_columns` quantises a column;
    values stored with the default zero point 128."""
    rows, inputs = weight.shape
    blocks = -(-inputs // BLOCK)
    padded = np.zeros((rows, blocks * BLOCK), np.float32)
    padded[:, :inputs] = weight
    quantised, scale = _int8_columns(padded.reshape(rows * blocks, BLOCK).T)
    stored = (quantised.T.astype(np.int16) + 128).astype(np.uint8)
    return stored.reshape(rows, blocks, BLOCK), scale


def graph_bytes(
    weights: dict[str, np.ndarray], spec, quantise: bool = True, blockwise: bool = False
) -> bytes:
    """The encoder graph, serialised: input_ids, attention_mask (int64, batch x length) ->
    `embedding` (batch x hidden), pooled, not yet unit length. `quantise=False`: every product
    float32 (a warm query path); `blockwise`: the down projection as 8-bit `MatMulNBits`."""
    from onnx import TensorProto
    from onnx import helper as oh

    g = _Graph({k.removeprefix("bert."): v for k, v in weights.items()}, spec, quantise, blockwise)
    x = g.embeddings()
    # onnxruntime's fused attention: 1 = a real token in the key padding mask.
    mask32 = g.node("Cast", ["attention_mask"], to=TensorProto.INT32)
    for i in range(spec.layers):
        x = g.layer(x, f"encoder.layer.{i}.", mask32)
    pooled = g.pooled(x)
    g.nodes.append(oh.make_node("Identity", [pooled], ["embedding"], name="out"))
    inputs = [
        oh.make_tensor_value_info(n, TensorProto.INT64, ["batch", "length"])
        for n in ("input_ids", "attention_mask")
    ]
    output = oh.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", spec.hidden_size])
    graph = oh.make_graph(g.nodes, "bert_encoder", inputs, [output], g.inits)
    model = oh.make_model(
        graph, opset_imports=[oh.make_opsetid("", OPSET), oh.make_opsetid(MS_DOMAIN, 1)]
    )
    model.ir_version = 9
    return model.SerializeToString()


class _Graph:
    """The nodes and initialisers of the encoder graph, added block by block."""

    def __init__(
        self, w: dict[str, np.ndarray], spec, quantise: bool, blockwise: bool = False
    ) -> None:
        self.w, self.spec, self.quantise = w, spec, quantise
        self.blockwise = quantise and blockwise  # the down projection's form
        self.inits: list = []
        self.nodes: list = []
        self.hidden = spec.hidden_size
        self.axis2 = self.const("axis2", np.array([2], np.int64))
        # where q, k and v begin and end in the fused projection's output
        self.bounds = [
            self.const(f"at{j}", np.array([j * self.hidden], np.int64)) for j in range(4)
        ]

    def const(self, name: str, value) -> str:
        from onnx import numpy_helper as nh

        self.inits.append(nh.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], domain: str = "", **attrs) -> str:
        from onnx import helper as oh

        name = f"{op}_{len(self.nodes)}"
        self.nodes.append(oh.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def int8_linear(self, x: str, name: str, weight: np.ndarray, bias: np.ndarray) -> str:
        const, node = self.const, self.node
        if not self.quantise:
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

    def down_projection(self, x: str, prefix: str) -> str:
        """float32, or 8-bit per block (`blockwise`): see the module docstring."""
        weight, bias = self.w[prefix + ".weight"], self.w[prefix + ".bias"]
        if not self.blockwise:
            product = self.node("MatMul", [x, self.const(prefix + ".weight.T", weight.T.copy())])
            return self.node("Add", [product, self.const(prefix + ".bias", bias)])
        packed, scales = _int8_blocks(weight)
        product = self.node(
            "MatMulNBits",
            [x, self.const(prefix + ".int8b", packed), self.const(prefix + ".scaleb", scales)],
            domain=MS_DOMAIN,
            K=weight.shape[1],
            N=weight.shape[0],
            bits=8,
            block_size=BLOCK,
            accuracy_level=4,  # int8 products, the activations quantised per block
        )
        return self.node("Add", [product, self.const(prefix + ".bias", bias)])

    def layer_norm(self, x: str, prefix: str) -> str:
        scale = self.const(prefix + ".weight", self.w[prefix + ".weight"])
        shift = self.const(prefix + ".bias", self.w[prefix + ".bias"])
        eps = self.spec.layer_norm_eps
        return self.node("LayerNormalization", [x, scale, shift], axis=-1, epsilon=eps)

    def embeddings(self) -> str:
        """Word + position (sliced to the input length) + token type 0, normalised."""
        const, node, w = self.const, self.node, self.w
        word = node("Gather", [const("word", w["embeddings.word_embeddings.weight"]), "input_ids"])
        length = node(
            "Gather",
            [node("Shape", ["input_ids"]), const("one_i", np.array([1], np.int64))],
            axis=0,
        )
        zero = const("zero_i", np.array([0], np.int64))
        position = node(
            "Slice", [const("pos", w["embeddings.position_embeddings.weight"]), zero, length, zero]
        )
        x = node("Add", [word, position])
        x = node("Add", [x, const("type0", w["embeddings.token_type_embeddings.weight"][0])])
        return self.layer_norm(x, "embeddings.LayerNorm")

    def layer(self, x: str, p: str, mask32: str) -> str:
        """One transformer layer: fused attention, then the feed-forward block."""
        node, w, hidden = self.node, self.w, self.hidden
        att = p + "attention."
        names = ("query", "key", "value")
        qkv_w = np.concatenate([w[f"{att}self.{n}.weight"] for n in names])
        qkv_b = np.concatenate([w[f"{att}self.{n}.bias"] for n in names])
        scale = np.float32(1.0 / np.sqrt(hidden // self.spec.heads))
        qkv_w[:hidden] *= scale  # fold 1/sqrt(d) into the query projection
        qkv_b[:hidden] *= scale
        qkv = self.int8_linear(x, f"{att}qkv", qkv_w, qkv_b)
        bounds = self.bounds
        q, k, v = (node("Slice", [qkv, bounds[j], bounds[j + 1], self.axis2]) for j in range(3))
        context = node(
            "MultiHeadAttention",
            [q, k, v, "", mask32],
            domain=MS_DOMAIN,
            num_heads=self.spec.heads,
            scale=1.0,
        )
        out_w, out_b = w[f"{att}output.dense.weight"], w[f"{att}output.dense.bias"]
        x = node("Add", [self.int8_linear(context, f"{att}out", out_w, out_b), x])
        x = self.layer_norm(x, f"{att}output.LayerNorm")
        up_w, up_b = w[f"{p}intermediate.dense.weight"], w[f"{p}intermediate.dense.bias"]
        up = node("Gelu", [self.int8_linear(x, f"{p}up", up_w, up_b)], approximate="none")
        x = node("Add", [self.down_projection(up, f"{p}output.dense"), x])
        return self.layer_norm(x, f"{p}output.LayerNorm")

    def pooled(self, x: str) -> str:
        """The [CLS] row, or the mean over the mask, as the model's pooling config says."""
        from onnx import TensorProto

        const, node = self.const, self.node
        if self.spec.cls_pooling:
            return node("Gather", [x, const("cls", np.array(0, np.int64))], axis=1)
        keep = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
        weights_ = node("Unsqueeze", [keep, self.axis2])
        axis1 = const("axis1", np.array([1], np.int64))
        total = node("ReduceSum", [node("Mul", [x, weights_]), axis1], keepdims=0)
        count = node("ReduceSum", [weights_, axis1], keepdims=0)
        count = node("Max", [count, const("tiny", np.array(1e-9, np.float32))])
        return node("Div", [total, count])
