"""What a user or a harness meets at the edges of every command: the default limit, a closed
pipe, --version, a misspelt setting, a missing path, a damaged index, the off-switch and the
dormant hook form of ingest. All through the real `mdvdb` process."""

from __future__ import annotations

import json
import shutil
import signal
import string
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, build_index, copy_markdown, run_cli

BAD_FRONTMATTER = "---\ntitle: [unclosed\n---\n# Broken\n\nThe body still counts.\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture notes plus 14 distinct pages that all say `bolt`, one 520 KB page (each
    closed-pipe output is over twice a 64 KB pipe buffer: 520 KB for get, 129 KB for the
    search with --explain, 717 KB for grep; every 100 KB of page costs ~0.2 CPU-s to ingest)
    and one page whose frontmatter does not parse; ingested once for the module."""
    root = tmp_path_factory.mktemp("hygiene") / "notes"
    copy_markdown(FIXTURES / "notes", root)
    for i in range(14):
        # Words of its own on each page (letters: digits are no difference to the
        # near-duplicate signature), or the pages would collapse into one result.
        own = " ".join(
            "".join(string.ascii_lowercase[(i * 5 + j * 11 + k * k) % 26] for k in range(7))
            for j in range(12)
        )
        (root / f"bolt-{i:02}.md").write_text(f"# Bolt {own.split()[0]}\n\nA bolt holds {own}.\n")
    (root / "big.md").write_text("# Big\n\n" + "a long line of text\n" * 26_000)
    (root / "broken.md").write_text(BAD_FRONTMATTER)
    return build_index(root)


@pytest.mark.slow
def test_default_limit_is_ten_in_cli_library_and_request(project: Path):
    from query import open_index
    from query.request import SearchRequest, run_request

    data = json.loads(run_cli("search", "bolt", "--json", "--root", str(project)).stdout)
    assert len(data["results"]) == 10 and data["total"] >= 14
    listed = run_cli("search", "bolt", "--files", "--root", str(project)).stdout
    assert len(listed.splitlines()) == 10
    index = open_index(project)
    assert len(index.search("bolt").results) == 10
    assert len(run_request(index, SearchRequest(query="bolt")).tiers.results) == 10
    # One declaration: the setting moves every one of them.
    env = {"MDVDB_SEARCH_DEFAULT_LIMIT": "3"}
    data = json.loads(run_cli("search", "bolt", "--json", "--root", str(project), env=env).stdout)
    assert len(data["results"]) == 3


def read_one_line_then_close(*args: str) -> subprocess.CompletedProcess:
    """`mdvdb ... | head -1`: read one line and hang up while mdvdb still writes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, first, err)


@pytest.mark.parametrize(
    "args",
    [
        ("get", "big.md"),
        (
            "search",
            "long line of text",
            "-n",
            "500",
            "--per-file",
            "0",
            "--no-collapse",
            "--explain",
        ),
        ("grep", "long line", "-n", "100000", "--per-file-limit", "100000"),
    ],
    ids=["get", "search", "grep"],
)
def test_a_closed_pipe_ends_quietly(project: Path, args: tuple[str, ...]):
    done = read_one_line_then_close(*args, "--root", str(project))
    assert done.stdout  # it did start writing
    assert done.stderr == b"", done.stderr.decode()
    # Each output is far larger than a pipe's buffer, so the process was still writing when
    # the reader left: as `cat big | head -1`, it ends by SIGPIPE (a shell says 141).
    assert done.returncode == -signal.SIGPIPE


def test_version():
    done = run_cli("--version")
    assert (done.returncode, done.stdout) == (0, f"mdvdb {version('markdown-vdb')}\n")
    assert "--version" in run_cli("--help").stdout


def test_unknown_key_in_config_file_is_warned_once_with_a_suggestion(notes: Path):
    (notes / ".markdownvdb").write_text("MDVDB_SEARCH_DEFAULT_LIMT=3\nMDVDB_WATCH=false\n")
    done = run_cli("status", "--check", "--root", str(notes))
    assert done.returncode == 4  # no index yet: the warning changes nothing else
    assert done.stderr == (
        f"mdvdb: warning: {notes / '.markdownvdb'}: unknown key MDVDB_SEARCH_DEFAULT_LIMT "
        "(did you mean MDVDB_SEARCH_DEFAULT_LIMIT?)\n"
    )
    # A variable of the shell is not ours to judge.
    clean = run_cli("status", "--check", "--root", str(notes), env={"MDVDB_SOMETHING": "1"})
    assert clean.stderr.count("\n") == 1


def test_ingest_reports_missing_paths(project: Path):
    done = run_cli("ingest", "does/not/exist.md", "tar.md", "--root", str(project), cwd=project)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "mdvdb: ingest: no such file or folder: does/not/exist.md\n"


def test_ingest_of_a_deleted_indexed_file_removes_it(indexed_notes: Path):
    (indexed_notes / "tar.md").unlink()
    done = run_cli("ingest", "tar.md", "--json", "--root", str(indexed_notes), cwd=indexed_notes)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["removed"] == 1


def test_status_lists_the_problems_of_the_files(project: Path):
    done = run_cli("status", "--root", str(project))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [header] = [line for line in lines if line.startswith("problems:")]
    assert header == "problems:   1 file"
    assert any(line.startswith("  broken.md: ") for line in lines)


def test_status_calls_a_damaged_index_damaged(project: Path, tmp_path: Path):
    damaged = tmp_path / "damaged"
    shutil.copytree(project, damaged, ignore=shutil.ignore_patterns(".markdownvdb.state"))
    index = damaged / ".markdownvdb.index"
    with open(index, "r+b") as fh:
        fh.truncate(index.stat().st_size // 2)
    done = run_cli("status", "--root", str(damaged))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("mdvdb: index damaged: run `mdvdb ingest --full`")
    assert str(index) in done.stderr
    assert "no index" not in done.stderr and done.stderr.count("\n") == 1
    assert "mdvdb ingest --full" in done.stderr
    data = json.loads(run_cli("status", "--json", "--root", str(damaged)).stdout)
    assert data["exists"] is False and str(index) in data["damaged"]


@pytest.mark.slow
def test_status_check_says_off_as_search_does(project: Path):
    off = project / ".mdvdb-off"
    off.touch()
    try:
        search = run_cli("search", "bolt", "--root", str(project))
        check = run_cli("status", "--check", "--root", str(project))
        plain = run_cli("status", "--root", str(project))
    finally:
        off.unlink()
    assert search.returncode == check.returncode == 5
    assert check.stderr == search.stderr and search.stderr.count("\n") == 1
    assert "switched off" in check.stderr and check.stdout == ""
    assert plain.returncode == 0 and "`mdvdb search` exits 5" in plain.stdout
    assert run_cli("status", "--check", "--root", str(project)).returncode == 0


def test_ingest_if_present_is_dormant_where_mdvdb_is_not_used(notes: Path):
    before = sorted(p.name for p in notes.iterdir())
    done = run_cli("ingest", "--if-present", "--quiet", "--no-wait", cwd=notes)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert sorted(p.name for p in notes.iterdir()) == before  # no index, no state folder

    # Set up (a .markdownvdb), but switched off: still nothing.
    (notes / ".markdownvdb").write_text("MDVDB_WATCH_DEBOUNCE_MS=300\n")
    (notes / ".mdvdb-off").touch()
    done = run_cli("ingest", "--if-present", cwd=notes)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not (notes / ".markdownvdb.index").exists()

    # Switched on again: the hook indexes.
    (notes / ".mdvdb-off").unlink()
    done = run_cli("ingest", "--if-present", "--quiet", cwd=notes)
    assert done.returncode == 0, done.stderr
    assert (notes / ".markdownvdb.index").exists()


@pytest.mark.slow
def test_plain_ingest_still_sets_a_folder_up(notes: Path):
    done = run_cli("ingest", cwd=notes)
    assert done.returncode == 0, done.stderr
    assert (notes / ".markdownvdb.index").exists()
    # An index alone (no .markdownvdb) counts as set up for the hook form.
    (notes / "new.md").write_text("# New\n\nA new page.\n")
    done = run_cli("ingest", "--if-present", "--json", cwd=notes)
    assert done.returncode == 0 and json.loads(done.stdout)["added"] == 1
