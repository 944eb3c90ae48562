"""Damage is found and never crashes a reader: flipped bytes and truncations of a real index
make `status --verify` fail, every reader either answers or prints one line (no signal, no
traceback), and `ingest --full` restores exactly the clean build."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel import index_format
from kernel.config import load_config
from query import open_index
from query.verify import verify
from tests.conftest import build_index

ENV = {"MDVDB_CLUSTERING_ENABLED": "false", "MDVDB_NO_WARM": "1"}
QUERIES = ["extract a tar archive", "network ports", "git branch merge", "cooking pasta"]
TOPICS = ["tar archive extract", "network ports tcp", "git branch merge", "cooking pasta sauce"]


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mdvdb", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **ENV},
    )


def _pages(root: Path, n: int) -> Path:
    root.mkdir(parents=True)
    rng = random.Random(7)
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        words = " ".join(rng.choice(topic.split() + ["note", "page", "detail"]) for _ in range(40))
        (root / f"page{i:03d}.md").write_text(
            f"---\ntags: [t{i % 7}]\nrating: {i % 5}\n---\n# Page {i} {topic}\n\n{words}\n\n"
            f"## Details {i}\n\nmore about {topic} in page {i}\n"
        )
    return root


def _flip(data: bytes, flips: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out = bytearray(data)
    for _ in range(flips):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _results(root: Path) -> list:
    out = []
    for query in QUERIES:
        found = _cli("search", query, "--json", "-n", "5", "--root", str(root))
        assert found.returncode == 0, found.stderr
        out.append(
            [
                (r["path"], r["start_line"], round(r["score"], 6))
                for r in json.loads(found.stdout)["results"]
            ]
        )
    return out


def _reader_survives(result: subprocess.CompletedProcess) -> None:
    assert result.returncode >= 0, f"killed by signal {-result.returncode}"
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.slow
def test_forty_flips_in_a_400_page_index(tmp_path: Path):
    root = _pages(tmp_path / "notes", 400)
    assert _cli("ingest", "--root", str(root)).returncode == 0
    clean_results = _results(root)
    index = root / ".markdownvdb.index"
    clean = index.read_bytes()
    for seed in range(3):
        index.write_bytes(_flip(clean, 40, seed))
        checked = _cli("status", "--verify", "--root", str(root))
        assert checked.returncode == 1, checked.stdout
        assert "Traceback" not in checked.stderr
        for args in (
            ["search", QUERIES[0]],
            ["search", QUERIES[1], "--mode", "lexical"],
            ["search", QUERIES[2], "--mode", "semantic", "--json"],
            ["search", "--filter", "rating>=3"],
            ["get", "page001.md"],
            ["status"],
        ):
            _reader_survives(_cli(*args, "--root", str(root)))
        rebuilt = _cli("ingest", "--full", "--root", str(root))
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert _cli("status", "--verify", "--root", str(root)).returncode == 0
        assert _results(root) == clean_results


@pytest.mark.slow
def test_a_damaged_index_is_one_line_for_each_reader(tmp_path: Path):
    """A bad string offset used to abort search (rc 134) and segfault get/status (rc 139)."""
    root = _pages(tmp_path / "notes", 12)
    assert _cli("ingest", "--root", str(root)).returncode == 0
    index = root / ".markdownvdb.index"
    opened = index_format.read_index(index)
    where = opened.layouts["chunks"]["columns"][6]["b"][1]  # chunks.text offsets
    del opened
    data = bytearray(index.read_bytes())
    data[where[0] + 4 * 5 : where[0] + 4 * 6] = (10**9).to_bytes(4, "little")
    index.write_bytes(bytes(data))
    for args in (["search", "tar"], ["get", "page001.md"], ["status"], ["status", "--check"]):
        result = _cli(*args, "--root", str(root))
        _reader_survives(result)
        assert result.returncode == 1
        assert "index damaged: run `mdvdb ingest --full`" in result.stderr
    assert _cli("status", "--verify", "--root", str(root)).returncode == 1
    assert _cli("ingest", "--root", str(root)).returncode == 0  # rebuilt, nothing reused
    assert _cli("status", "--verify", "--root", str(root)).returncode == 0


@pytest.mark.slow
def test_an_old_format_is_refused_in_one_line_and_rebuilt_by_a_plain_ingest(tmp_path: Path):
    root = _pages(tmp_path / "notes", 5)
    assert _cli("ingest", "--root", str(root)).returncode == 0
    index = root / ".markdownvdb.index"
    data = bytearray(index.read_bytes())
    previous = index_format.FORMAT_VERSION - 1  # what the last release wrote
    data[8:12] = previous.to_bytes(4, "little")
    index.write_bytes(bytes(data))
    found = _cli("search", "tar", "--root", str(root))
    assert found.returncode == 1 and f"format {previous}" in found.stderr
    assert len(found.stderr.strip().splitlines()) == 1
    assert _cli("ingest", "--root", str(root)).returncode == 0
    assert _cli("search", "tar", "--root", str(root)).returncode == 0


@pytest.mark.slow
def test_a_nan_vector_in_the_index_does_not_empty_hybrid_search(tmp_path: Path):
    root = _pages(tmp_path / "notes", 12)
    assert _cli("ingest", "--root", str(root)).returncode == 0
    index = root / ".markdownvdb.index"
    opened = index_format.read_index(index)
    values = opened.layouts["chunks"]["columns"][9]["c"][0]["b"][1]
    del opened
    data = bytearray(index.read_bytes())
    data[values[0] : values[0] + 4] = bytes.fromhex("0000c07f")  # float32 NaN
    index.write_bytes(bytes(data))
    found = _cli("search", "tar archive extract", "--json", "--root", str(root))
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"]
    assert _cli("status", "--verify", "--root", str(root)).returncode == 1


@pytest.fixture(scope="module")
def small_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    root = _pages(tmp_path_factory.mktemp("damage") / "notes", 20)
    build_index(root, ENV)
    return root, (root / ".markdownvdb.index").read_bytes()


def test_any_flip_or_truncation_is_found_and_never_crashes(small_index):
    """In-process (a signal would kill the test run): every damaged copy fails verify, and
    opening, searching and reading it either works or raises the one-line damage error."""
    # hypothesis is imported here: every xdist worker imports every test module (~0.2 CPU-s).
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        flips=st.lists(
            st.tuples(st.integers(0, 2**31), st.integers(1, 255)), min_size=1, max_size=8
        ),
        cut=st.one_of(st.none(), st.integers(0, 2**31)),
    )
    def damaged(flips, cut):
        root, clean = small_index
        data = bytearray(clean)
        for at, mask in flips:
            data[at % len(data)] ^= mask
        if cut is not None:
            data = data[: cut % len(data)]
        assume(bytes(data) != clean)  # two flips of one bit cancel out
        work = root.parent / "work"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(root, work, ignore=shutil.ignore_patterns(".markdownvdb.state"))
        (work / ".markdownvdb.index").write_bytes(bytes(data))
        assert not verify(work / ".markdownvdb.index", work).ok
        config = load_config(work, environ={**os.environ, **ENV})
        try:
            index = open_index(config=config)
            index.search("tar archive", limit=5)
            index.search("network", limit=5, mode="lexical")
            index.get_document("page001.md")
            index.status()
        except index_format.IndexFormatError:
            pass  # one line: "index damaged: ..." or a torn/foreign file
        except Exception:
            assert index_format.damage_message(), "an error from an index that passes its checks"

    damaged()
