"""Hostile folders, round two (docs/security.md, "Round two: links, special files, sizes,
text"): nothing of ours is reached through a link, special files are never opened, every
read is bounded, and no encoding stops a stage. Every case runs the real CLI in a temp folder,
under an address-space limit (a runaway read fails here instead of filling the machine) and a
timeout."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

QUIET = {"MDVDB_CLUSTERING_ENABLED": "false", "MDVDB_NO_WARM": "1"}
MEMORY_CAP = 3 << 30  # bytes of address space for each command


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _cli(
    *args: str, env: dict | None = None, timeout: float = 60, warm: bool = False, cwd=REPO
) -> subprocess.CompletedProcess:
    """The real `mdvdb` (`warm`: the warm client's path too, as a user's shell runs it)."""
    base = {**os.environ, **QUIET}
    if warm:
        base.pop("MDVDB_NO_WARM")
    return subprocess.run(
        [sys.executable, "-m", "mdvdb", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
        cwd=cwd,
        preexec_fn=_capped,
    )


def _folder(root: Path, notes: int = 3) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, notes + 1):
        (root / f"note{i}.md").write_text(f"# Note {i}\n\nplain words about topic{i} here\n")
    return root


def _warnings(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if "warning" in line]


def _found(root: Path, query: str) -> list[str]:
    result = _cli("search", query, "--mode", "lexical", "--json", "--root", str(root))
    assert result.returncode == 0, result.stderr
    return [r["path"] for r in json.loads(result.stdout)["results"]]


def _tree(folder: Path) -> dict[str, bytes]:
    """Every entry under `folder` with its bytes (links as their target): what must stay."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        out[key] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return out


# -- item 1: a cloned repository's links never make us delete or write outside ---------------


def _cloned_with_shards_link(tmp_path: Path) -> tuple[Path, Path]:
    """A real `git clone` of a repository whose `.markdownvdb.index.shards` is a symlink to
    a folder beside it (`../outside`), holding dot-files a careless clean-up deletes."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".bashrc").write_text("export PATH=/usr/bin\n")
    (outside / ".profile.tmp").write_text("keep me\n")
    (outside / "notes.txt").write_text("mine\n")
    upstream = _folder(tmp_path / "upstream")
    (upstream / ".markdownvdb.index.shards").symlink_to("../outside")
    git = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(upstream)], check=True)
    subprocess.run([*git, "-C", str(upstream), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(upstream), "commit", "-qm", "notes"], check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream), str(clone)], check=True)
    assert (clone / ".markdownvdb.index.shards").is_symlink()
    return clone, outside


@pytest.mark.parametrize(
    "form",
    [
        "ingest",
        pytest.param("hook", marks=pytest.mark.slow),
        pytest.param("shards=2", marks=pytest.mark.slow),
    ],
)
def test_a_cloned_shards_link_never_deletes_or_writes_outside(tmp_path: Path, form: str):
    clone, outside = _cloned_with_shards_link(tmp_path)
    before = _tree(outside)
    if form == "hook":  # the form a git hook runs; the folder is set up by its config file
        (clone / ".markdownvdb").write_text("MDVDB_CHUNK_MAX_TOKENS=512\n")
        args, env = ["ingest", "--if-present", "--quiet", "--no-wait"], {}
    else:
        args, env = ["ingest"], ({"MDVDB_SHARDS": "2"} if form == "shards=2" else {})
    for _ in range(2):  # the clean-up runs at the start of every ingest
        result = _cli(*args, "--root", str(clone), env=env)
        if form == "shards=2":  # the walk's warnings, then the refusal: one line each
            assert result.returncode == 1, result.stderr
            assert "Traceback" not in result.stderr
            *shown, message = result.stderr.strip().splitlines()
            assert message.startswith("mdvdb: ") and "symlink" in message, result.stderr
            assert ".markdownvdb.index.shards" in message, message
            # the failed run still shows what its walk found
            assert shown == [
                "warning: .markdownvdb.index.shards: symlink points outside "
                "the project root, skipped"
            ], result.stderr
        else:
            assert result.returncode == 0, result.stderr
            assert "Traceback" not in result.stderr
        assert _tree(outside) == before
    if form != "shards=2":
        assert _found(clone, "topic2") == ["note2.md"]


def test_our_index_and_state_through_a_link_inside_the_root_are_refused(tmp_path: Path):
    """Inside the root too: the index is never read through a link (a reader says so in one
    line; the next ingest replaces the link by the index), and the state folder a folder
    chooses must be a real folder."""
    root = _folder(tmp_path / "notes")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    index = root / ".markdownvdb.index"
    index.rename(root / "elsewhere.index")
    index.symlink_to("elsewhere.index")
    found = _cli("search", "topic1", "--root", str(root))
    assert found.returncode == 1, found.stderr
    assert found.stderr.count("\n") == 1 and "symlink" in found.stderr, found.stderr
    assert _cli("ingest", "--root", str(root)).returncode == 0
    assert not index.is_symlink() and _found(root, "topic1") == ["note1.md"]
    state = root / ".markdownvdb.state"
    state.rename(root / "cache")
    state.symlink_to("cache")
    result = _cli("ingest", "--root", str(root))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "is a symlink" in result.stderr, result.stderr
    assert "MDVDB_STATE_DIR" in result.stderr


# -- item 3: our own files through links to endless or huge files ---------------------------


OWN_FILES = (".markdownvdb", ".gitignore", ".markdownvdb.schema.yml")


def _hostile_own_file(root: Path, name: str, how: str) -> None:
    path = root / name
    if how == "big":
        path.write_text("# " + "x" * (2 << 20) + "\n")  # 2 MiB of one comment line
    else:
        path.symlink_to(how)


@pytest.mark.parametrize(
    ("name", "how"),
    [
        (".markdownvdb", "/dev/zero"),
        *[
            pytest.param(name, how, marks=pytest.mark.slow)
            for name in OWN_FILES
            for how in ("/dev/zero", "/dev/urandom", "big")
            if (name, how) != (".markdownvdb", "/dev/zero")
        ],
    ],
)
def test_own_files_through_links_or_too_big_are_refused_in_one_line(
    tmp_path: Path, name: str, how: str
):
    root = _folder(tmp_path / "notes")
    _hostile_own_file(root, name, how)
    started = time.monotonic()
    if name == ".markdownvdb":  # the configuration cannot be trusted: nothing runs
        for command in (["ingest"], ["search", "topic1"], ["grep", "topic1"], ["status"]):
            result = _cli(*command, "--root", str(root), warm=True, timeout=10)
            assert result.returncode == 2, (command, result.stderr)
            message = result.stderr.strip()
            assert "\n" not in message and "Traceback" not in message, message
            assert ".markdownvdb" in message and "cannot read configuration" in message
    else:  # a rules file: reported and left out, every note still indexed and searched
        result = _cli("ingest", "--root", str(root), timeout=10)
        assert result.returncode == 0, result.stderr
        assert [w for w in _warnings(result) if name in w], result.stderr
        assert "Traceback" not in result.stderr
        assert _found(root, "topic3") == ["note3.md"]
        grep = _cli("grep", "topic3", "--root", str(root), timeout=10)
        assert grep.returncode == 0 and "note3.md" in grep.stdout, grep.stderr
        if name == ".gitignore":
            assert [w for w in _warnings(grep) if ".gitignore" in w], grep.stderr
    assert time.monotonic() - started < 60


def _rg_child(parent: int, deadline: float) -> int:
    """The pid of the rg process `parent` started."""
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/comm") as fh:
                    name = fh.read().strip()
            except OSError:
                continue
            if int(fields[1]) == parent and name == "rg":
                return int(entry)
        time.sleep(0.05)
    raise AssertionError("no rg process started")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds rg's pid in /proc")
def test_grep_says_so_when_rg_is_killed(tmp_path: Path):
    """rg ended by a signal (the kernel's OOM killer, a user's kill) is an error, exit 1, not
    "No matches.". Deterministic: nobody reads mdvdb's output, so mdvdb stops reading rg's
    and rg blocks on a full pipe until it is killed."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "many.md").write_text("".join(f"needle line {i}\n" for i in range(100_000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "grep", "needle", "--root", str(root)]
        + ["--limit", "1000000", "--per-file-limit", "1000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **QUIET},
        cwd=REPO,
    )
    try:
        rg = _rg_child(proc.pid, time.monotonic() + 30)
        time.sleep(0.5)  # both pipes fill
        os.kill(rg, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert b"No matches." not in out
    last = err.decode().strip().splitlines()[-1]
    assert last == "mdvdb: ripgrep was ended by signal SIGKILL; the search did not finish"


# -- item 5: a symlink swapped in between the walk and the read ----------------------------

# Runs the real CLI in a process with an audit hook (sys.addaudithook, a public API that only
# observes): on the Nth open of the watched note, which the walk never opens (it stats), the
# note is replaced by a symlink before the open happens. The 1st open is discover's hash, the
# 2nd the parse's read: the swap lands exactly in the window each check closes.
SWAPPER = """
import os, sys
note, target, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = [0]
def hook(event, args):
    if event == "open" and args and isinstance(args[0], str) and args[0] == note:
        seen[0] += 1
        if seen[0] == nth:
            os.unlink(note)
            os.symlink(target, note)
sys.addaudithook(hook)
sys.argv = ["mdvdb", *sys.argv[4:]]
from mdvdb.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize(
    ("when", "where"),
    [
        ("hash", "ignored"),
        pytest.param("hash", "outside", marks=pytest.mark.slow),
        pytest.param("parse", "ignored", marks=pytest.mark.slow),
        pytest.param("parse", "outside", marks=pytest.mark.slow),
    ],
)
def test_a_symlink_swapped_in_after_the_walk_is_not_indexed(tmp_path: Path, when: str, where: str):
    """`ignored`: a link to a gitignored note inside the root (only the device/inode check,
    or the parse's hash of what it read, tells it from the walked file); `outside`: a link
    leaving the root."""
    root = _folder(tmp_path / "notes")
    (root / ".gitignore").write_text("private/\n")
    (root / "private").mkdir()
    secret = "# Secret\n\nthe zanzibar launch codes\n"
    (root / "private" / "codes.md").write_text(secret)
    (tmp_path / "codes.md").write_text(secret)
    target = (
        str(root / "private" / "codes.md") if where == "ignored" else str(tmp_path / "codes.md")
    )
    note = root.resolve() / "swapped.md"  # as the walk joins it
    note.write_text("# Swapped\n\nan ordinary note\n")
    nth = {"hash": 1, "parse": 2}[when]
    result = subprocess.run(
        [sys.executable, "-c", SWAPPER, str(note), target, str(nth), "ingest", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **QUIET, "MDVDB_WORKERS": "1"},
        cwd=REPO,
        preexec_fn=_capped,
    )
    assert note.is_symlink(), "the swap did not happen"
    assert result.returncode == 0, result.stderr
    (line,) = [w for w in _warnings(result) if "swapped.md" in w]
    expected = {
        ("hash", "ignored"): "replaced since the walk",
        ("hash", "outside"): "symlink points outside the project root",
        ("parse", "ignored"): "changed while indexing",
        ("parse", "outside"): "symlink points outside the project root",
    }[(when, where)]
    assert expected in line, line
    assert _found(root, "zanzibar launch codes") == []
    assert [_found(root, f"topic{i}") for i in (1, 3)] == [["note1.md"], ["note3.md"]]


# -- item 6: FIFOs (and sockets, devices) are never opened ---------------------------------

FIFO_NAMES = (
    "x.md",
    ".gitignore",
    ".markdownvdb",
    ".markdownvdb.schema.yml",
    ".markdownvdb.index",
    ".markdownvdb.state/cache.sqlite3",
    ".markdownvdb.state/writer.json",
)
# ingest last: it replaces a FIFO where the index should be
COMMANDS = (("status",), ("search", "topic1"), ("grep", "topic1"), ("ingest",))


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _folder(tmp_path_factory.mktemp("fifo") / "notes")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    return root


def _with_fifo(indexed: Path, tmp_path: Path, name: str) -> Path:
    root = tmp_path / "notes"
    shutil.copytree(indexed, root, symlinks=True)
    path = root / name
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return root


@pytest.mark.parametrize(
    "name",
    [
        "x.md",
        *[pytest.param(name, marks=pytest.mark.slow) for name in FIFO_NAMES if name != "x.md"],
    ],
)
def test_a_fifo_never_hangs_a_command(indexed: Path, tmp_path: Path, name: str):
    """Each command finishes within 10 s (the timeout fails the test) with at most one line
    about the FIFO; the index and the other notes stay usable where the FIFO is not the
    index or the configuration."""
    root = _with_fifo(indexed, tmp_path, name)
    for command in COMMANDS:
        result = _cli(*command, "--root", str(root), warm=True, timeout=10)
        assert "Traceback" not in result.stderr, (command, result.stderr)
        about = [line for line in result.stderr.splitlines() if name.rsplit("/", 1)[-1] in line]
        assert len(about) <= 1, (command, result.stderr)
        if name == ".markdownvdb":
            assert result.returncode == 2 and about, (command, result.stderr)
        elif name.startswith(".markdownvdb.state/") and command == ("ingest",):
            assert result.returncode == 1 and about and "FIFO" in about[0], result.stderr
        elif name == ".markdownvdb.index" and command[0] in ("status", "search"):
            assert result.returncode == 1 and "FIFO" in result.stderr, (command, result.stderr)
        else:
            assert result.returncode == 0, (command, result.stderr)
        if name in ("x.md", ".gitignore") and command == ("ingest",):
            assert about and "FIFO" in about[0], result.stderr


def _watch(root: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "watch", "--debounce-ms", "100", "--root", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env={**os.environ, **QUIET},
        cwd=REPO,
        preexec_fn=_capped,
    )


def _wait_for(log: Path, text: str, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        content = log.read_text()
        if text in content:
            return content
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged: {log.read_text()}")


@pytest.mark.slow
def test_watch_meets_fifos_keeps_indexing_and_answers_sigterm(indexed: Path, tmp_path: Path):
    root = _with_fifo(indexed, tmp_path, "x.md")
    os.mkfifo(root / ".gitignore")
    log = tmp_path / "watch.log"
    watch = _watch(root, log)
    try:
        _wait_for(log, "full walk")  # the first batch: the FIFOs reported, nothing hangs
        os.mkfifo(root / "y.md")
        (root / "fresh.md").write_text("# Fresh\n\nquokka sightings\n")
        deadline = time.monotonic() + 60
        while _found(root, "quokka") != ["fresh.md"]:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        started = time.monotonic()
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(timeout=10) == 0
        assert time.monotonic() - started < 10
    finally:
        watch.kill()
        watch.wait()
    content = log.read_text()
    assert "Traceback" not in content and "a FIFO" in content, content
    assert "watch: stopped" in content


# -- item 8: a per-file size cap ------------------------------------------------------------


def test_a_file_over_the_size_cap_is_reported_skipped_and_settles(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    (root / "big.md").write_text("# Big\n\n" + "wombat " * 100 + "\n")
    env = {"MDVDB_MAX_FILE_BYTES": "500"}
    result = _cli("ingest", "--root", str(root), env=env)
    assert result.returncode == 0, result.stderr
    (line,) = _warnings(result)
    assert "big.md" in line and "MDVDB_MAX_FILE_BYTES (500 bytes)" in line and "skipped" in line
    assert _found(root, "wombat") == [] and _found(root, "topic1") == ["note1.md"]
    check = _cli("status", "--check", "--root", str(root), env=env)
    assert check.returncode == 0, check.stdout + check.stderr


def _peak_kb(argv: list[str], env: dict) -> tuple[subprocess.CompletedProcess, int]:
    """Run `argv` under GNU time: the result and the peak resident set (KB) of the process
    and its children."""
    if not os.path.exists("/usr/bin/time"):
        pytest.skip("GNU time is not installed")
    result = subprocess.run(
        ["/usr/bin/time", "-v", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **QUIET, **env},
        cwd=REPO,
    )
    peak = [line for line in result.stderr.splitlines() if "Maximum resident set size" in line]
    return result, int(peak[0].rsplit(":", 1)[1])


def _one_line_file(path: Path, mb: int) -> None:
    with path.open("w") as fh:
        for _ in range(mb):
            fh.write("y" * (1 << 20))
        fh.write(" needle\n")


@pytest.mark.slow
def test_a_200_mb_note_ingests_in_bounded_memory(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    with (root / "huge.md").open("w") as fh:
        paragraph = "# Section\n\n" + "words about nothing in particular " * 30 + "\n\n"
        for _ in range((200 << 20) // len(paragraph)):
            fh.write(paragraph)
    argv = [sys.executable, "-m", "mdvdb", "ingest", "--root", str(root)]
    result, peak = _peak_kb(argv, {})
    assert result.returncode == 0, result.stderr
    assert [w for w in _warnings(result) if "huge.md" in w and "MDVDB_MAX_FILE_BYTES" in w]
    assert peak < 1_500_000, peak
    assert _found(root, "topic2") == ["note2.md"]


@pytest.mark.slow
def test_grep_over_a_189_mb_one_line_file_in_bounded_memory(tmp_path: Path):
    """rg searches it (grep has no size cap: rg streams a file); the matching line is too
    long to show and is named in one warning, read in bounded pieces."""
    root = _folder(tmp_path / "notes")
    _one_line_file(root / "line.md", 189)
    argv = [sys.executable, "-m", "mdvdb", "grep", "needle", "--root", str(root)]
    result, peak = _peak_kb(argv, {})
    assert result.returncode == 0, result.stderr
    assert peak < 1_500_000, peak
    assert "line.md: a matching line too long to show, left out" in result.stderr
    assert "No matches." in result.stdout


def test_a_matching_line_too_long_to_show_is_named_not_read_whole(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    _one_line_file(root / "line.md", 5)  # over the 4 MiB of one rg message
    (root / "short.md").write_text("# Short\n\na needle here\n")
    result = _cli("grep", "needle", "--root", str(root))
    assert result.returncode == 0, result.stderr
    assert "short.md" in result.stdout and "line.md" not in result.stdout
    assert "line.md: a matching line too long to show, left out" in result.stderr


# -- item 2, "text is text": NUL bytes and other encodings ----------------------------------

TEXTS = {
    "nul.md": b"# Nul\n\nbefore\x00after the okapi\n",
    "utf16-bom.md": "\ufeff# Sixteen\n\nthe okapi in UTF-16\n".encode("utf-16-le"),
    "utf16-be-bom.md": "\ufeff# Sixteen BE\n\nthe okapi big end\n".encode("utf-16-be"),
    "utf16-nobom.md": "# Sixteen bare\n\nthe okapi without a mark\n".encode("utf-16-le"),
    "latin1.md": "# Café\n\nthe okapi naïve\n".encode("latin-1"),
    "binary.md": bytes(range(256)) * 64,
}


def test_nul_bytes_and_other_encodings_never_stop_an_ingest(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    for name, raw in TEXTS.items():
        (root / name).write_bytes(raw)
    for _ in range(2):
        result = _cli("ingest", "--root", str(root))
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert _found(root, "topic1") == ["note1.md"]
    okapi = set(_found(root, "okapi"))
    assert {"nul.md", "utf16-bom.md", "utf16-be-bom.md", "utf16-nobom.md", "latin1.md"} <= okapi
    latin = json.loads(_cli("get", "latin1.md", "--json", "--root", str(root)).stdout)
    assert latin["title"] == "Café" and "naïve" in latin["content"]
    sixteen = json.loads(_cli("get", "utf16-bom.md", "--json", "--root", str(root)).stdout)
    assert sixteen["content"].startswith("# Sixteen\n") and sixteen["title"] == "Sixteen"
    first = _cli("ingest", "--full", "--root", str(root))
    assert first.returncode == 0, first.stderr
    reported = "\n".join(_warnings(first))
    assert "nul.md: holds NUL bytes" in reported
    assert "utf16-nobom.md: no byte-order mark; read as UTF-16-LE" in reported
    assert "latin1.md: not UTF-8" in reported and "Windows-1252" in reported
    assert "utf16-bom.md" not in reported  # a marked encoding is not a problem
    check = _cli("status", "--check", "--root", str(root))
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_watch_keeps_indexing_after_a_nul_or_utf16_file(tmp_path: Path):
    root = _folder(tmp_path / "notes")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    log = tmp_path / "watch.log"
    watch = _watch(root, log)
    try:
        _wait_for(log, "full walk")
        (root / "nul.md").write_bytes(TEXTS["nul.md"])
        (root / "utf16.md").write_bytes(TEXTS["utf16-bom.md"])
        _wait_for(log, "nul.md: holds NUL bytes")
        (root / "later.md").write_text("# Later\n\nthe pangolin arrives\n")
        deadline = time.monotonic() + 60
        while _found(root, "pangolin") != ["later.md"]:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        assert "utf16.md" in _found(root, "okapi")
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(timeout=10) == 0
    finally:
        watch.kill()
        watch.wait()
    assert "ingest failed" not in log.read_text(), log.read_text()
