"""Damage to the state is repaired, the machine's refusals are one line, and messages tell
the truth (docs/security.md, "Round two"): a damaged state cache is set aside and rebuilt
from the files; a full disk or a read-only folder gives one line and keeps the previous
index; `ingest --full` counts unchanged files as unchanged; a newer-format index is left
alone; a source folder listed twice is no symlink loop; a 5,000-digit number is one plain
line; an index overwritten in place under `mdvdb serve` is found. Through the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_discover_safety import _without_root_read_powers

QUIET = {"MDVDB_CLUSTERING_ENABLED": "false", "MDVDB_NO_WARM": "1"}
STATE = Path(".markdownvdb.state")


def _cli(*args: str, env: dict | None = None, prefix: list[str] | None = None):
    full = {**os.environ, **QUIET, **(env or {})}
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "mdvdb", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=full,
    )


def _one_line(result, code: int, *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _folder(root: Path, files: int = 5, config: str = "") -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nwords about topic{i} here\n")
    if config:
        (root / ".markdownvdb").write_text(config)
    return root


def _found(root: Path, query: str) -> list[str]:
    done = _cli("search", query, "--mode", "lexical", "--json", "--root", str(root))
    assert done.returncode == 0, done.stderr
    return [r["path"] for r in json.loads(done.stdout)["results"]]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- a damaged state cache ------------------------------------------------------------------


def _not_json(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE kv SET value = '{not json'")


def _not_utf8(db: Path) -> None:
    """A text cell whose bytes are not UTF-8 (what damage inside a page can leave)."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE manifest SET path = CAST(x'c3ff2e6d64' AS TEXT)"
            " WHERE path = (SELECT min(path) FROM manifest)"
        )


def _random_bytes(db: Path) -> None:
    db.write_bytes(os.urandom(db.stat().st_size))
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _damaged_pages(db: Path) -> None:
    with sqlite3.connect(db) as conn:  # every page in the file itself, none in the WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray(db.read_bytes())
    for at in range(4096 + 100, len(raw), 4096):  # every page but the header's
        raw[at : at + 2000] = os.urandom(min(2000, len(raw) - at))
    db.write_bytes(bytes(raw))


def test_a_state_cache_of_random_bytes_is_set_aside_by_the_ingest(tmp_path: Path):
    """The inner loop's case of the test below, in this process: the ingest the CLI runs."""
    from kernel.config import load_config
    from pipeline import ingest_folder
    from tests.conftest import build_index

    root = _folder(tmp_path / "notes", 3)
    build_index(root, QUIET)
    _random_bytes(root / STATE / "cache.sqlite3")
    report = ingest_folder(load_config(root, environ={**os.environ, **QUIET}))
    path, problem = report.errors[0]
    assert path == ".markdownvdb.state/cache.sqlite3.damaged" and "damaged" in problem
    assert report.files == 3 and len(report.errors) == 1


@pytest.mark.parametrize(
    ("damage", "full"),
    [
        pytest.param("random bytes", False, marks=pytest.mark.slow),
        pytest.param("random bytes", True, marks=pytest.mark.slow),
        pytest.param("not json", False, marks=pytest.mark.slow),
        pytest.param("damaged pages", True, marks=pytest.mark.slow),
        pytest.param("not utf-8", False, marks=pytest.mark.slow),
    ],
)
def test_a_damaged_state_cache_is_set_aside_and_rebuilt(tmp_path: Path, damage: str, full: bool):
    root = _folder(tmp_path / "notes")
    for i in range(5, 80):  # a cache of a few pages (the manifest), to damage some
        (root / f"more{i}.md").write_text(f"# More {i}\n\n" + f"filler{i} " * 50)
    assert _cli("ingest", "--root", str(root)).returncode == 0
    db = root / STATE / "cache.sqlite3"
    damages = {"random bytes": _random_bytes, "not json": _not_json, "not utf-8": _not_utf8}
    {**damages, "damaged pages": _damaged_pages}[damage](db)
    (root / "n1.md").write_text("# Note 1\n\nwords about freshword here\n")
    done = _cli("ingest", *(["--full"] if full else []), "--root", str(root))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1 and "the state cache was damaged" in warnings[0], done.stderr
    assert ".markdownvdb.state/cache.sqlite3.damaged" in warnings[0]
    assert (root / STATE / "cache.sqlite3.damaged").exists()
    assert _found(root, "freshword") == ["n1.md"]
    again = _cli("ingest", "--json", "--root", str(root))  # the new cache is sound
    assert again.returncode == 0 and not again.stderr, again.stderr
    assert json.loads(again.stdout)["unchanged"] == 80
    assert _cli("status", "--check", "--root", str(root)).returncode == 0


# -- the machine says no --------------------------------------------------------------------


def _small_disk(tmp_path: Path) -> Path | None:
    """A 4 MB tmpfs (root with CAP_SYS_ADMIN: this CI and a developer's container), else
    None: the test then uses a file-size limit for the same ENOSPC-like refusal."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return None
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    return mount if done.returncode == 0 else None


def _fill(disk: Path, leave_kb: int) -> Path:
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as out:
        out.write(b"\0" * max(0, free - leave_kb * 1024))
    return filler


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_keeps_the_previous_index(tmp_path: Path):
    """Filled at several points of an edit's ingest (the state's transaction, the index's
    temp file): each is one line naming what could not be written, exit 1, the published
    index byte for byte as it was, no temp file left; with room again the next ingest
    publishes the edit."""
    disk = _small_disk(tmp_path)
    if disk is None:
        pytest.skip("no tmpfs to fill (not root): the file-size limit case below covers it")
    try:
        root = disk / "notes"
        root.mkdir()
        for i in range(30):
            text = " ".join(f"word{i}x{j}" for j in range(300))
            (root / f"n{i}.md").write_text(f"# Note {i}\n\n{text}\n")
        assert _cli("ingest", "--root", str(root)).returncode == 0
        index = root / ".markdownvdb.index"
        for round_, leave_kb in enumerate((40, 300, 700)):
            for i in range(30):
                with open(root / f"n{i}.md", "a") as out:
                    out.write(f"\nedit{round_} " + " ".join(f"e{round_}w{j}" for j in range(60)))
            before = _digest(index)
            filler = _fill(disk, leave_kb)
            try:
                done = _cli("ingest", "--root", str(root))
            finally:
                filler.unlink()
            line = _one_line(done, 1, "cannot write", "free some space")
            assert "No space left on device" in line or "disk is full" in line, line
            assert _digest(index) == before
            assert not [p for p in os.listdir(root) if p.startswith(".markdownvdb.index.")]
            assert _cli("ingest", "--root", str(root)).returncode == 0
            assert (
                _found(root, f"e{round_}w5")
                and _cli("status", "--verify", "--root", str(root)).returncode == 0
            )
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_file_size_limit_is_one_line_and_keeps_the_previous_index(tmp_path: Path):
    """RLIMIT_FSIZE (a real EFBIG from the kernel, as a full disk gives ENOSPC) below the
    next index's size: one line, exit 1, the previous index intact, no temp file left (the
    inner loop's case; the full disk itself, and the recovery, are the test above)."""
    import resource

    from tests.conftest import build_index

    root = build_index(_folder(tmp_path / "notes", 20), QUIET)
    index = root / ".markdownvdb.index"
    before = _digest(index)
    for i in range(20):
        (root / f"n{i}.md").write_text(
            f"# Note {i}\n\n" + " ".join(f"w{i}x{j}" for j in range(900))
        )
    limit = index.stat().st_size + 4096

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **QUIET},
        preexec_fn=small_files,
    )
    line = _one_line(done, 1, "cannot write", "file-size limit")
    assert "File too large" in line or "disk I/O error" in line, line  # the index or SQLite
    assert _digest(index) == before
    assert not [p for p in os.listdir(root) if p.startswith(".markdownvdb.index.")]


# The hook form (23 lines of traceback before) in the inner loop; the other writers in CI.
@pytest.mark.parametrize(
    "args",
    [
        ("ingest", "--if-present", "--quiet", "--no-wait"),
        pytest.param(("ingest",), marks=pytest.mark.slow),
        pytest.param(("serve", "--idle-timeout", "5"), marks=pytest.mark.slow),
        pytest.param(("mcp", "--http", "45999"), marks=pytest.mark.slow),
    ],
    ids=["hook", "ingest", "serve", "mcp-http"],
)
def test_a_read_only_folder_is_one_line_for_every_writer(tmp_path: Path, args: tuple):
    """A folder the user cannot write (run without root's override, as in CI): one line
    saying so and how to keep the index elsewhere, exit 1."""
    prefix = _without_root_read_powers()
    base = tmp_path / "ro"
    base.mkdir()
    root = _folder(base / "notes", 2, "\n")
    os.chmod(tmp_path, 0o755)
    for path in (root, *root.iterdir()):
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        done = _cli(*args, "--root", str(root), prefix=prefix)
        _one_line(done, 1, "cannot write", "read-only", "MDVDB_STATE_DIR")
    finally:
        root.chmod(0o755)


# -- messages that tell the truth -----------------------------------------------------------


def test_a_full_ingest_counts_unchanged_files_as_unchanged(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    (root / "n2.md").write_text("# Note 2\n\nnew words\n")
    report = json.loads(_cli("ingest", "--full", "--json", "--root", str(root)).stdout)
    assert (report["added"], report["changed"], report["unchanged"]) == (0, 1, 4)
    again = json.loads(_cli("ingest", "--full", "--json", "--root", str(root)).stdout)
    assert (again["changed"], again["unchanged"]) == (0, 5)


def _as_newer(path: Path) -> None:
    with open(path, "r+b") as out:
        out.seek(8)
        out.write(struct.pack("<I", 99))


def test_an_index_a_newer_mdvdb_wrote_is_left_alone_and_called_newer(tmp_path: Path):
    """An older mdvdb called it "damaged" and replaced it on the next ingest. Now readers
    and `status` say a newer mdvdb wrote it, and no ingest (plain or --full) writes over
    it: one line, exit 1, the file untouched."""
    root = _folder(tmp_path / "notes")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    index = root / ".markdownvdb.index"
    _as_newer(index)
    before = _digest(index)
    for args in (("search", "topic1"), ("status",), ("get", "n1.md")):
        line = _one_line(_cli(*args, "--root", str(root)), 1, "written by a newer mdvdb")
        assert "damaged" not in line and "format 99" in line
    for args in (("ingest",), ("ingest", "--full")):
        _one_line(_cli(*args, "--root", str(root)), 1, "newer mdvdb", "will not replace it")
    assert _digest(index) == before


@pytest.mark.slow
def test_a_sharded_index_a_newer_mdvdb_wrote_is_left_alone(tmp_path: Path):
    root = _folder(tmp_path / "notes", 6, "MDVDB_SHARDS=2\n")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    folder = root / ".markdownvdb.index.shards"
    manifest = json.loads((folder / "manifest.json").read_text())
    shard = folder / manifest["files"][0]["name"]
    _as_newer(shard)
    _one_line(_cli("ingest", "--full", "--root", str(root)), 1, "newer mdvdb", shard.name)
    manifest["format"] = 7
    (folder / "manifest.json").write_text(json.dumps(manifest))
    before = _digest(folder / "manifest.json")
    _one_line(_cli("ingest", "--root", str(root)), 1, "newer mdvdb", "manifest.json")
    _one_line(_cli("search", "topic1", "--root", str(root)), 1, "written by a newer mdvdb")
    assert _digest(folder / "manifest.json") == before


def test_a_source_folder_listed_twice_is_walked_once_and_no_symlink_loop(tmp_path: Path):
    root = _folder(tmp_path / "notes", 0, "MDVDB_SOURCE_DIRS=docs,docs,./docs/\n")
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("# A\n\nwords about twice\n")
    done = _cli("ingest", "--json", "--root", str(root))
    report = json.loads(done.stdout)
    assert report["files"] == 1 and report["errors"] == [], report["errors"]
    grep = _cli("grep", "twice", "--root", str(root))
    assert grep.returncode == 0 and "loop" not in grep.stderr and not grep.stderr, grep.stderr
    assert grep.stdout.count("docs/a.md") == 1


def test_a_huge_number_in_frontmatter_is_one_plain_line(tmp_path: Path):
    """Python's own refusal says "use sys.set_int_max_str_digits() to increase the limit":
    advice for a programmer, not for the user of a folder. YAML, JSON and TOML alike."""
    root = _folder(tmp_path / "notes", 2)
    digits = "9" * 5000
    (root / "yaml.md").write_text(f"---\nbig: {digits}\n---\n# Y\n\nyamlword\n")
    (root / "json.md").write_text(f'---\n{{"big": {digits}}}\n---\n# J\n\njsonword\n')
    (root / "toml.md").write_text(f"+++\nbig = {digits}\n+++\n# T\n\ntomlword\n")
    done = _cli("ingest", "--root", str(root))
    assert done.returncode == 0, done.stderr
    warnings = [x for x in done.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 3, done.stderr
    for line in warnings:
        assert "a number of 5000 digits (the limit is 4300); body indexed" in line, line
        assert "set_int_max_str_digits" not in line
    assert _found(root, "tomlword") == ["toml.md"]


@pytest.mark.slow
def test_an_index_overwritten_in_place_under_serve_is_found(tmp_path: Path):
    """Zeroed where it lies, its size and mtime put back: the warm server used to answer
    from the zeros. Now every call says the index is damaged (one line, exit 1) until an
    ingest publishes a new one, which the server then answers from."""
    root = _folder(tmp_path / "notes")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    warm = {"MDVDB_NO_WARM": "", "MDVDB_WATCH": "false"}
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "serve", "--idle-timeout", "120", "--root", str(root)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **QUIET, **warm},
    )
    try:
        deadline = time.monotonic() + 90
        while _cli("serve", "--status", "--root", str(root)).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        first = _cli("search", "topic3", "--json", "--root", str(root), env=warm)
        assert json.loads(first.stdout)["results"][0]["path"] == "n3.md"
        index = root / ".markdownvdb.index"
        st = index.stat()
        with open(index, "r+b") as out:
            out.write(b"\0" * st.st_size)
        os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns))
        for args in (("search", "topic3"), ("get", "n3.md")):
            _one_line(_cli(*args, "--root", str(root), env=warm), 1, "index damaged", "in place")
        status = json.loads(_cli("serve", "--status", "--json", "--root", str(root)).stdout)
        assert status["requests"] >= 3  # those answers came from the server
        assert _cli("ingest", "--root", str(root)).returncode == 0
        again = _cli("search", "topic3", "--json", "--root", str(root), env=warm)
        assert json.loads(again.stdout)["results"][0]["path"] == "n3.md"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
