"""Nothing may touch the network: ingest and search with sockets blocked in the process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BLOCK = """
import socket, sys
def _refuse(*a, **k):
    raise OSError("network access attempted")
socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
from mdvdb.cli import main
sys.argv = ["mdvdb", *sys.argv[1:]]
main()
"""


def test_search_loads_its_model_with_sockets_blocked_and_no_cache(indexed_notes: Path, tmp_path):
    """The inner loop's case (an ingest without a model cache, below, is `slow`): a search
    in a home with no cache at all loads the model from the installed package alone."""
    env = {"HF_HUB_OFFLINE": "0", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    args = ["search", "bread starter", "--root", str(indexed_notes), "--json"]
    r = subprocess.run(
        [sys.executable, "-c", BLOCK, *args], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["path"] == "guides/cooking.md"


@pytest.mark.slow
def test_ingest_and_search_with_sockets_blocked(notes: Path, tmp_path: Path):
    env = {"HF_HUB_OFFLINE": "0", "HOME": str(tmp_path)}  # no cache to fall back on
    for args in (
        ["ingest", "--root", str(notes)],
        ["search", "bread starter", "--root", str(notes), "--json"],
    ):
        r = subprocess.run(
            [sys.executable, "-c", BLOCK, *args],
            capture_output=True,
            text=True,
            env={**env, "PATH": "/usr/bin:/bin"},
        )
        assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["path"] == "guides/cooking.md"
