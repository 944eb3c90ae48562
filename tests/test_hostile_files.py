"""No file stops the rest: each hostile file in a 10-file folder is reported by path on one
line, the nine others are indexed, `mdvdb ingest` exits 0 within 10 s of pipeline time, and
`status --check` settles to 0 afterwards (an agent's "stale -> ingest" loop ends)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fake_embeddings import FakeEmbeddingServer
from tests.test_discover_safety import _without_root_read_powers

BUDGET_S = 10.0  # the pipeline's own time per ingest (interpreter start-up not included)
QUIET = {"MDVDB_CLUSTERING_ENABLED": "false", "MDVDB_NO_WARM": "1"}


def _cli(*args: str, env: dict | None = None, prefix: list[str] | None = None, timeout=120):
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "mdvdb", *args],
        capture_output=True,
        text=True,
        timeout=timeout,  # an alias bomb used to run forever
        env={**os.environ, **QUIET, **(env or {})},
        cwd=REPO,
    )


def _folder(root: Path) -> Path:
    root.mkdir(parents=True)
    for i in range(1, 10):
        (root / f"note{i}.md").write_text(f"# Note {i}\n\nplain words about topic{i} here\n")
    return root


def _ingest_ok(root: Path, bad: str, env=None, prefix=None, again: bool = True) -> dict:
    """One ingest: exit 0, one line naming the bad file, the nine good ones indexed. With
    `again`, a second ingest's --json report and a search say so; without, the published
    index itself (its files table, read here: no second process)."""
    human = _cli("ingest", "--root", str(root), env=env, prefix=prefix)
    assert human.returncode == 0, human.stderr
    warnings = [line for line in human.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and bad in warnings[0], human.stderr
    assert "Traceback" not in human.stderr
    if not again:
        from kernel import index_format

        files = index_format.read_index(root / ".markdownvdb.index").tables["files"]
        paths = files.column("path").to_pylist()
        assert "note5.md" in paths, paths
        return {"files": len(paths)}
    report = json.loads(
        _cli("ingest", "--json", "--root", str(root), env=env, prefix=prefix).stdout
    )
    listing = _cli("search", "topic5", "--mode", "lexical", "--json", "--root", str(root))
    assert "note5.md" in listing.stdout
    return report


def _timed_full(root: Path, env=None, prefix=None, budget: bool = True) -> dict:
    result = _cli("ingest", "--full", "--json", "--root", str(root), env=env, prefix=prefix)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # Clustering (on only in the NaN test) imports scikit-learn: seconds on a loaded machine.
    assert not budget or report["seconds"] < BUDGET_S, report["stage_seconds"]
    return report


def _settles(root: Path, prefix=None) -> None:
    check = _cli("status", "--check", "--root", str(root), prefix=prefix)
    assert check.returncode == 0, check.stdout + check.stderr
    status = _cli("status", "--root", str(root), prefix=prefix)
    assert "problems:" in status.stdout, status.stdout


def _alias_bomb() -> str:
    lines = ["---", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join([*lines, "---", "# Bomb", "", "the bomb body is searchable", ""])


FRONTMATTER = {
    "alias bomb": _alias_bomb(),
    "recursive alias": "---\na: &a [*a]\n---\n# Rec\n\nthe bomb body is searchable\n",
    "too deep": "---\nx: " + "[" * 40 + "]" * 40 + "\n---\n# Deep\n\nthe bomb body is searchable\n",
    "too many keys": "---\n"
    + "".join(f"k{i}: {i}\n" for i in range(16000))
    + "---\n# Keys\n\nthe bomb body is searchable\n",
    "too large": "---\nx: '" + "a" * 200_000 + "'\n---\n# Big\n\nthe bomb body is searchable\n",
}


# One case runs in the inner loop; the others are the same end-to-end check (ingest, search,
# get, a full re-ingest, status) on other frontmatter, about 3 CPU-s each: `slow`.
@pytest.mark.parametrize(
    "case",
    [c if c == "recursive alias" else pytest.param(c, marks=pytest.mark.slow) for c in FRONTMATTER],
)
def test_hostile_frontmatter_is_reported_and_its_body_indexed(tmp_path: Path, case: str):
    root = _folder(tmp_path / "notes")
    (root / "bad.md").write_text(FRONTMATTER[case])
    report = _ingest_ok(root, "bad.md", again=False)
    assert report["files"] == 10
    found = _cli("search", "bomb body searchable", "--mode", "lexical", "--json", "--root", root)
    assert json.loads(found.stdout)["results"][0]["path"] == "bad.md"
    assert json.loads(_cli("get", "bad.md", "--json", "--root", str(root)).stdout)["metadata"] == {}
    _timed_full(root)
    _settles(root)


@pytest.mark.slow
def test_a_megabyte_heading_line_is_cut_for_storage(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    (root / "big.md").write_text("# " + "x" * 1_000_000 + "\n\nafter the long heading\n")
    report = _ingest_ok(root, "big.md")
    assert report["files"] == 10
    _timed_full(root)
    doc = json.loads(_cli("get", "big.md", "--json", "--root", str(root)).stdout)
    assert all(len(s["heading"]) <= 1000 for s in doc["sections"])
    assert _cli("status", "--verify", "--root", str(root)).returncode == 0


@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_reported_and_watch_survives_it(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    bad = os.fsencode(root) + b"/bad\xff\xfe.md"
    with open(bad, "wb") as fh:
        fh.write(b"# Bad name\n\nundecodable name\n")
    report = _ingest_ok(root, "bad\\xff\\xfe.md")
    assert report["files"] == 9
    _timed_full(root)
    assert _cli("status", "--check", "--root", str(root)).returncode == 0

    log = open(tmp_path / "watch.log", "w")  # noqa: SIM115 - a file nobody has to drain
    watch = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "watch", "--root", str(root)],
        stderr=log,
        env={**os.environ, **QUIET, "MDVDB_WATCH_DEBOUNCE_MS": "100"},
    )
    try:
        time.sleep(6)  # the first walk
        with open(os.fsencode(root) + b"/other\xfa.md", "wb") as fh:
            fh.write(b"# Other\n\nanother undecodable name\n")
        os.unlink(bad)
        time.sleep(1)
        (root / "fresh.md").write_text("# Fresh\n\nwatchable freshword\n")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = _cli("search", "freshword", "--mode", "lexical", "--json", "--root", root)
            if "fresh.md" in found.stdout:
                break
            assert watch.poll() is None, (tmp_path / "watch.log").read_text()
            time.sleep(1)
        else:
            raise AssertionError("watch did not index fresh.md: " + log.name)
        assert watch.poll() is None
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(60)
        log.close()
    assert "Traceback" not in (tmp_path / "watch.log").read_text()


@pytest.mark.slow
def test_unreadable_folder_and_file_are_reported_and_status_settles(tmp_path: Path):
    prefix = _without_root_read_powers()
    root = _folder(tmp_path / "notes")
    sub = root / "private"
    sub.mkdir()
    (sub / ".gitignore").write_text("*.tmp\n")
    (sub / "hidden.md").write_text("# Hidden\n")
    sub.chmod(0)
    try:
        report = _ingest_ok(root, "private", prefix=prefix)
        assert report["files"] == 9
        _timed_full(root, prefix=prefix)
        _settles(root, prefix=prefix)
    finally:
        sub.chmod(0o755)

    locked = root / "locked.md"
    locked.write_text("# Locked\n")
    locked.chmod(0)
    try:
        for _ in range(2):  # the second ingest: the same one problem, still settled
            _ingest_ok(root, "locked.md", prefix=prefix)
            _settles(root, prefix=prefix)
        status = json.loads(_cli("status", "--json", "--root", str(root), prefix=prefix).stdout)
        assert [e["path"] for e in status["errors"]].count("locked.md") == 1
    finally:
        locked.chmod(0o644)
    # Readable again: now it is a new file, and the next ingest takes it.
    assert _cli("status", "--check", "--root", str(root)).returncode == 3


@pytest.mark.slow
def test_a_provider_that_returns_nan_for_one_text(tmp_path: Path):
    """A real HTTP server answers NaN for one text: that section is reported, retried once,
    indexed for keywords only, never cached; clustering and hybrid search still work."""
    root = _folder(tmp_path / "notes")
    (root / "poison.md").write_text("# Poison\n\npoisonword makes the server answer NaN\n")
    with FakeEmbeddingServer(dims=32) as server:
        server.poison = "poisonword"
        env = {
            "MDVDB_EMBEDDING_PROVIDER": "custom",
            "MDVDB_EMBEDDING_ENDPOINT": server.url,
            "MDVDB_EMBEDDING_MODEL": "fake",
            "MDVDB_EMBEDDING_DIMENSIONS": "32",
            "MDVDB_EMBEDDING_RETRY_DELAY": "0.01",
            "MDVDB_CLUSTERING_ENABLED": "true",
        }
        report = _ingest_ok(root, "poison.md", env=env)
        assert report["files"] == 10
        poisoned = [r for r in server.requests("ok") if any("poisonword" in t for t in r.texts)]
        # First ingest: the batch and one retry; the JSON ingest after it asks nothing.
        assert len(poisoned) == 2
        verify = _cli("status", "--verify", "--json", "--root", str(root), env=env)
        assert verify.returncode == 0, verify.stdout
        assert json.loads(verify.stdout)["keyword_only"] == 1
        hybrid = _cli("search", "poisonword", "--json", "--root", str(root), env=env)
        assert hybrid.returncode == 0, hybrid.stderr
        assert json.loads(hybrid.stdout)["results"][0]["path"] == "poison.md"
        other = _cli("search", "topic3", "--json", "--root", str(root), env=env)
        assert json.loads(other.stdout)["results"][0]["path"] == "note3.md"
        # --full re-chunks but does not re-embed an unchanged file: the section stays
        # keyword-only until its file changes (then it is asked for again).
        _timed_full(root, env=env, budget=False)
        again = _cli("status", "--verify", "--json", "--root", str(root), env=env)
        assert again.returncode == 0 and json.loads(again.stdout)["keyword_only"] == 1
        (root / "poison.md").write_text("# Poison\n\npoisonword twice, still NaN\n")
        before = len(server.requests("ok"))
        _ingest_ok(root, "poison.md", env=env)
        assert len(server.requests("ok")) - before == 2  # the batch and one retry


@pytest.mark.slow
def test_a_long_single_line_paragraph_gives_no_zero_vector(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    words = " ".join(f"word{i % 50}" for i in range(600))
    (root / "long.md").write_text(f"# Long\n\n{words}\n")
    result = _cli("ingest", "--root", str(root))
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
    verify = _cli("status", "--verify", "--root", str(root))
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.slow
def test_many_frontmatter_fields_pack_in_linear_time(tmp_path: Path):
    """16 files x 1000 distinct keys = 16k typed columns: pack took 360 s (a column appended
    at a time); now seconds."""
    root = tmp_path / "notes"
    root.mkdir()
    for f in range(16):
        keys = "".join(f"f{f}_{i}: {i}\n" for i in range(1000))
        (root / f"k{f}.md").write_text(f"---\n{keys}---\n# K{f}\n\nbody\n")
    result = _cli("ingest", "--json", "--root", str(root))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stage_seconds"]["pack"] < 30, report["stage_seconds"]
    schema = _cli("schema", "--json", "--root", str(root))
    assert schema.returncode == 0
