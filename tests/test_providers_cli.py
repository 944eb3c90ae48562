"""Remote providers end to end: the real CLI in a subprocess against a fake OpenAI/Ollama
server on 127.0.0.1, counting what is requested per chunk hash."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kernel.providers.base import normalize_rows
from query.index import Snapshot
from tests.conftest import run_cli
from tests.fake_embeddings import Action, FakeEmbeddingServer, text_hash, vector_for

KEY = "sk-proj-TESTKEY-4b1d2c3e4f5a6b7c8d9e"
DIMS = 64
TRANSPORT = {
    "MDVDB_EMBEDDING_BATCH_SIZE": "2",
    "MDVDB_EMBEDDING_CONCURRENCY": "2",
    "MDVDB_EMBEDDING_TIMEOUT": "5",
    "MDVDB_EMBEDDING_MAX_RETRIES": "3",
    "MDVDB_EMBEDDING_RETRY_DELAY": "0.01",
    "MDVDB_EMBEDDING_RETRY_MAX_DELAY": "0.05",
}


def openai_env(server: FakeEmbeddingServer, **extra: str) -> dict[str, str]:
    return {
        **TRANSPORT,
        "MDVDB_EMBEDDING_PROVIDER": "openai",
        "MDVDB_EMBEDDING_DIMENSIONS": str(DIMS),
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": server.url,
        **extra,
    }


def ollama_env(server: FakeEmbeddingServer, **extra: str) -> dict[str, str]:
    return {
        **TRANSPORT,
        "MDVDB_EMBEDDING_PROVIDER": "ollama",
        "MDVDB_EMBEDDING_DIMENSIONS": str(DIMS),
        "OLLAMA_HOST": server.url,
        **extra,
    }


def add_notes(root: Path, count: int) -> None:
    for i in range(count):
        (root / f"extra-{i}.md").write_text(
            f"# Note {i}\n\nIntro {i} about topic {i * 7}.\n\n"
            f"## Details {i}\n\nDetail {i} on subject {i * 13}.\n"
        )


def cli(root: Path, env: dict[str, str], *args: str, outputs: list | None = None):
    result = run_cli(*args, "--root", str(root), env=env)
    if outputs is not None:
        outputs.append(result.stdout + result.stderr)
    return result


def ingest(root: Path, env: dict[str, str]):
    """An ingest in this process (for set-up steps; the behaviour under test uses the CLI)."""
    from kernel.config import load_config
    from pipeline import ingest as pipeline_ingest

    return pipeline_ingest.ingest_folder(load_config(root, environ={**os.environ, **env}))


def check_index(root: Path, server: FakeEmbeddingServer) -> int:
    """Every chunk of the index carries exactly the server's vector for its text."""
    texts = {text_hash(t): t for r in server.requests("ok") for t in r.texts}
    snap = Snapshot.load(root / ".markdownvdb.index")
    shas = snap.table("chunks").column("sha256").to_pylist()
    assert shas, "the index has no chunks"
    want = normalize_rows(np.array([vector_for(texts[s], server.dims) for s in shas]))
    np.testing.assert_allclose(np.asarray(snap.vectors), want, atol=1e-5)
    return len(shas)


def assert_key_nowhere(root: Path, outputs: list[str]) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"API key written to {path}"
    for output in outputs:
        assert KEY not in output


@pytest.mark.slow
def test_openai_ingest_retries_and_builds_a_correct_index_without_writing_the_key(notes):
    outputs: list[str] = []
    with FakeEmbeddingServer(dims=DIMS, api_key=KEY) as server:
        server.fail_next(
            Action("status", 500),
            Action("status", 500),
            Action("status", 429, {"Retry-After": "0"}),
        )
        result = cli(notes, openai_env(server), "ingest", outputs=outputs)
        assert result.returncode == 0, result.stderr
        outcomes = [r.outcome for r in server.log]
        assert outcomes.count("500") == 2 and outcomes.count("429") == 1
        chunks = check_index(notes, server)
        assert all(n == 1 for n in server.served.values())  # nothing requested twice
        assert len(server.served) == chunks
        assert all(r.authorization == f"Bearer {KEY}" for r in server.log)

        hit = cli(
            notes, openai_env(server), "search", "extract a tar archive", "--json", outputs=outputs
        )
        assert hit.returncode == 0, hit.stderr
        assert json.loads(hit.stdout)["results"][0]["path"] == "tar.md"
    assert_key_nowhere(notes, outputs)


@pytest.mark.slow
def test_switching_provider_and_back_requests_nothing(notes):
    with (
        FakeEmbeddingServer(dims=DIMS, api_key=KEY) as openai_server,
        FakeEmbeddingServer(dims=48) as ollama_server,
    ):
        to_openai = openai_env(openai_server)
        to_ollama = ollama_env(ollama_server, MDVDB_EMBEDDING_DIMENSIONS="48")
        ingest(notes, to_openai)
        first = len(openai_server.log)
        assert first > 0

        status = cli(notes, to_ollama, "status")
        assert status.returncode == 0
        assert "index built with openai:text-embedding-3-small" in status.stdout
        assert "ollama:nomic-embed-text" in status.stdout
        # a search says the same (one check), with what to do, and asks no server anything
        found = cli(notes, to_ollama, "search", "anything", "--mode", "semantic")
        assert found.returncode == 1 and found.stderr.count("\n") == 1
        assert "index built with openai:text-embedding-3-small" in found.stderr
        assert "asks for ollama:nomic-embed-text (48 dims): run `mdvdb ingest`" in found.stderr
        assert len(ollama_server.log) == 0

        assert ingest(notes, to_ollama).chunks_embedded > 0
        check_index(notes, ollama_server)
        ollama_first = len(ollama_server.log)

        back = cli(notes, to_openai, "ingest")
        assert back.returncode == 0 and "0 chunks embedded" in back.stdout
        check_index(notes, openai_server)  # the index holds openai's vectors again
        assert ingest(notes, to_ollama).chunks_embedded == 0
        check_index(notes, ollama_server)
        assert len(openai_server.log) == first
        assert len(ollama_server.log) == ollama_first
        assert set(openai_server.served.values()) == {1}
        assert set(ollama_server.served.values()) == {1}


@pytest.mark.slow
def test_network_down_mid_run_keeps_finished_batches_and_the_old_index(notes):
    with FakeEmbeddingServer(dims=DIMS, api_key=KEY) as server:
        env = openai_env(server, MDVDB_EMBEDDING_CONCURRENCY="1")
        ingest(notes, env)
        add_notes(notes, 10)
        server.down_after = server.successes() + 3

        failed = cli(notes, env, "ingest")
        assert failed.returncode == 1
        assert failed.stderr.startswith("mdvdb: openai: connection lost")
        assert failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr
        kept = server.successes()

        # The network is still down: the old index is intact and readable.
        status = json.loads(cli(notes, env, "status", "--json").stdout)
        assert status["files"] == 4 and len(status["new_files"]) == 10

        server.down_after = None
        old = cli(notes, env, "search", "extract a tar archive", "--json")
        assert old.returncode == 0, old.stderr
        assert json.loads(old.stdout)["results"][0]["path"] == "tar.md"
        ingest(notes, env)
        assert server.successes() > kept + 1
        assert set(server.served.values()) == {1}  # the kept batches were not asked again
        query = text_hash("extract a tar archive")
        assert check_index(notes, server) == len(set(server.served) - {query})


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_requests_only_the_rest(notes):
    add_notes(notes, 8)
    with FakeEmbeddingServer(dims=DIMS, api_key=KEY, latency=0.15) as server:
        env = {
            **os.environ,
            **openai_env(server, MDVDB_EMBEDDING_CONCURRENCY="1", MDVDB_EMBEDDING_BATCH_SIZE="1"),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "mdvdb", "ingest", "--root", str(notes)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while server.successes() < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = set(server.served)
        db = sqlite3.connect(notes / ".markdownvdb.state" / "cache.sqlite3")
        cached = {bytes(r[0]).hex() for r in db.execute("SELECT sha256 FROM embeddings")}
        db.close()
        assert len(cached) >= 3 and cached <= before

        served_before = server.served.copy()
        ingest(notes, env)
        asked_again = {h for h in server.served if server.served[h] > served_before.get(h, 0)}
        assert not asked_again & cached  # nothing that was kept is requested again
        # At most the one batch in flight at the kill is asked twice (batch size 1).
        assert sum(server.served.values()) - len(server.served) <= 1
        assert check_index(notes, server) == len(server.served)


@pytest.mark.slow
def test_query_time_failures_are_one_line_exit_1(notes):
    outputs: list[str] = []
    with FakeEmbeddingServer(dims=DIMS, api_key=KEY) as server:
        env = openai_env(server)  # 3 retries for an ingest...
        ingest(notes, env)
        server.api_key = "sk-rotated"
        refused = cli(notes, env, "search", "tar", outputs=outputs)
        assert refused.returncode == 1
        assert refused.stderr.startswith("mdvdb: openai: HTTP 401")
        assert "OPENAI_API_KEY" in refused.stderr and refused.stderr.count("\n") == 1
    down = cli(notes, env, "search", "tar", outputs=outputs)  # the server is gone
    assert down.returncode == 1
    assert down.stderr.startswith("mdvdb: openai: cannot connect at http://127.0.0.1")
    assert "(3 attempts)" in down.stderr  # ...at most 2 for a search
    assert "Traceback" not in down.stderr
    assert_key_nowhere(notes, outputs)


def test_a_wrong_dimension_stops_before_anything_is_written(notes):
    with FakeEmbeddingServer(dims=DIMS) as server:
        server.answer_dims = 32
        result = cli(notes, ollama_env(server), "ingest")
    assert result.returncode == 1
    assert "MDVDB_EMBEDDING_DIMENSIONS=32" in result.stderr
    assert not (notes / ".markdownvdb.index").exists()
    db = sqlite3.connect(notes / ".markdownvdb.state" / "cache.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == 0
    db.close()


@pytest.mark.slow
def test_custom_endpoint_with_dimensions_0_takes_the_endpoint_size(notes):
    with FakeEmbeddingServer(dims=DIMS) as server:
        env = {
            **TRANSPORT,
            "MDVDB_EMBEDDING_PROVIDER": "custom",
            "MDVDB_EMBEDDING_ENDPOINT": server.url,
            "MDVDB_EMBEDDING_MODEL": "nomic-embed-text-v1.5.Q8_0.gguf",
        }
        assert cli(notes, env, "ingest").returncode == 0
        hit = cli(notes, env, "search", "extract a tar archive", "--json")
        assert hit.returncode == 0, hit.stderr
        assert json.loads(hit.stdout)["results"][0]["path"] == "tar.md"
        assert Snapshot.load(notes / ".markdownvdb.index").meta["dimensions"] == DIMS
        requests = len(server.log)
        (notes / ".markdownvdb.index").unlink()
        assert ingest(notes, env).published  # rebuilt from the cache, size remembered
        assert len(server.log) == requests
        check_index(notes, server)


@pytest.mark.slow
def test_ctrl_c_during_a_hung_request_exits_at_once_and_keeps_the_batches(notes):
    add_notes(notes, 4)
    with FakeEmbeddingServer(dims=DIMS, api_key=KEY) as server:
        server.down_after = 3
        server.down_action = Action("hang", seconds=30)
        env = {**os.environ, **openai_env(server, MDVDB_EMBEDDING_CONCURRENCY="1")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "mdvdb", "ingest", "--root", str(notes)],
            env=env,
            # Ctrl-C as a terminal delivers it: a test run started in the background by a
            # non-interactive shell ignores SIGINT, and the child would inherit that.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not server.requests("hang") and time.monotonic() < deadline:
            time.sleep(0.02)
        interrupted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130 and stderr == "mdvdb: interrupted\n", stderr
        assert time.monotonic() - interrupted < 5  # not held up by the hung socket
        db = sqlite3.connect(notes / ".markdownvdb.state" / "cache.sqlite3")
        assert db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == 6  # 3 batches of 2
        db.close()

        server.down_after = None
        ingest(notes, env)
        assert set(server.served.values()) == {1}
        assert check_index(notes, server) == len(server.served)
