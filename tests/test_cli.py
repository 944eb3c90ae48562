"""The real `mdvdb` command in a subprocess: output shapes and exit codes."""

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.slow
def test_ingest_search_get_status_json(notes: Path):
    r = run_cli("ingest", "--root", str(notes), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["files"] == 4 and report["added"] == 4 and report["errors"] == []

    r = run_cli("search", "how do I extract an archive", "--root", str(notes), "--json", "-n", "3")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["query"] == "how do I extract an archive"
    assert len(data["results"]) == 3
    first = data["results"][0]
    assert {
        "path",
        "heading",
        "heading_path",
        "start_line",
        "end_line",
        "score",
        "excerpt",
        "metadata",
    } <= set(first)
    assert first["path"] == "tar.md"
    assert first["metadata"]["tags"] == ["archive", "cli"]
    lines = (notes / "tar.md").read_text().split("\n")
    assert lines[first["start_line"] - 1].startswith("#")
    assert first["heading_path"][0] == "tar"

    r = run_cli("get", "tar.md", "--root", str(notes), "--json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["metadata"]["category"] == "tools"
    assert doc["content"] == (notes / "tar.md").read_text()

    r = run_cli("status", "--root", str(notes), "--json")
    status = json.loads(r.stdout)
    assert status["files"] == 4 and status["fresh"] is True
    assert status["provider"] == "local" and status["dimensions"] == 256


def test_min_score_and_limit(indexed_notes: Path):
    # A cosine of 0.99 is out of reach; (hybrid scores are relative: the best hit is near 1).
    r = run_cli(
        "search",
        "bread",
        "--root",
        str(indexed_notes),
        "--json",
        "--min-score",
        "0.99",
        "--mode",
        "semantic",
    )
    assert json.loads(r.stdout)["results"] == []
    r = run_cli("search", "bread", "--root", str(indexed_notes), "--json", "--min-score", "1.01")
    assert json.loads(r.stdout)["results"] == []
    r = run_cli("search", "bread", "--root", str(indexed_notes), "--json", "-n", "1")
    assert len(json.loads(r.stdout)["results"]) == 1


def test_human_output_and_summary_line(notes: Path):
    r = run_cli("ingest", "--root", str(notes))
    assert r.returncode == 0
    assert "4 files: 4 added, 0 changed, 0 removed, 0 unchanged" in r.stdout
    r = run_cli("search", "open ports", "--root", str(notes))
    # The "Open ports" heading holds every query word, but a heading is not a title (issue
    # 35: only the title and the aliases are): the best content match.
    assert r.stdout.startswith("## Content Matches\n1. guides/networking.md:3-")


def test_status_reports_stale_and_new_files(indexed_notes: Path):
    (indexed_notes / "tar.md").write_text("# tar\n\nchanged\n")
    (indexed_notes / "fresh.md").write_text("# Fresh\n")
    status = json.loads(run_cli("status", "--root", str(indexed_notes), "--json").stdout)
    assert status["stale_files"] == ["tar.md"]
    assert status["new_files"] == ["fresh.md"]
    assert status["fresh"] is False


@pytest.mark.slow
def test_exit_codes(notes: Path, indexed_notes: Path, tmp_path: Path):
    # No index yet: a clear error, exit 1, no traceback.
    r = run_cli("search", "x", "--root", str(notes))
    assert r.returncode == 1 and "mdvdb ingest" in r.stderr and "Traceback" not in r.stderr
    # Usage errors: exit 2.
    assert run_cli("search", "--root", str(notes)).returncode == 2
    assert run_cli("search", "x", "--bogus-flag").returncode == 2
    assert run_cli("search", "x", "-n", "zero").returncode == 2
    # A path outside the root is refused (indexed_notes: the same notes, ingested).
    r = run_cli("get", "../../etc/passwd", "--root", str(indexed_notes))
    assert r.returncode == 1 and "outside the project root" in r.stderr
    r = run_cli("get", "nope.md", "--root", str(indexed_notes))
    assert r.returncode == 1 and "not in the index" in r.stderr
    # A foreign file where the index should be.
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / ".markdownvdb.index").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    r = run_cli("search", "x", "--root", str(tmp_path / "foreign"))
    assert r.returncode == 1 and "not a Markdown VDB index" in r.stderr


def test_bad_config_in_search_is_usage_error(notes: Path):
    r = run_cli("search", "x", "--root", str(notes), env={"MDVDB_SEARCH_DEFAULT_LIMIT": "many"})
    assert r.returncode == 2 and "MDVDB_SEARCH_DEFAULT_LIMIT (from the environment)" in r.stderr


@pytest.mark.slow
def test_doit_runs_the_same_tasks(notes: Path):
    (notes / "dodo.py").write_text("from pipeline.tasks import *  # noqa\n")
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "doit", "list"], cwd=notes, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    for stage in ("discover", "parse", "chunk", "embed", "cluster", "schema", "pack"):
        assert stage in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "doit", "--db-file", ".doit.db", "pack"],
        cwd=notes,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    r = run_cli("search", "git branch", "--root", str(notes), "--json")
    assert json.loads(r.stdout)["results"][0]["path"] == "git-basics.md"
