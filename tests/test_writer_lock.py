"""One writer at a time, with real processes: a second writer waits naming the holder or,
with --no-wait, exits 1 at once; a holder killed with SIGKILL blocks nobody."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.tasks import STAGES
from tests.conftest import REPO, run_cli

# Holds the lock for argv[2] seconds, or until a line arrives on its stdin (`_release`).
HOLDER = """
import select, sys
from pathlib import Path
from pipeline.lock import WriterLock
lock = WriterLock(Path(sys.argv[1]), command="test-holder")
lock.acquire()
print("held", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))
lock.release()
"""


def _hold(state: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state), str(seconds)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release(holder: subprocess.Popen) -> None:
    """The holder lets go now (a normal release, not a death)."""
    holder.stdin.write("\n")
    holder.stdin.flush()


def test_no_wait_exits_1_naming_the_holder(notes: Path):
    holder = _hold(notes / ".markdownvdb.state", 30)
    try:
        started = time.monotonic()
        result = run_cli("ingest", "--no-wait", "--root", str(notes))
        assert result.returncode == 1
        assert time.monotonic() - started < 15
        assert f"pid {holder.pid} (test-holder) since" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert not (notes / ".markdownvdb.index").exists()


def test_status_names_the_writer_holding_the_lock(indexed_notes: Path):
    """`mdvdb status` (text and --json) says which process holds the lock, and nothing once
    it is gone, even killed (its side file then names a dead process)."""
    holder = _hold(indexed_notes / ".markdownvdb.state", 30)
    try:
        text = run_cli("status", "--root", str(indexed_notes))
        assert text.returncode == 0
        assert f"writer:     pid {holder.pid} (test-holder, since " in text.stdout
        shown = json.loads(run_cli("status", "--json", "--root", str(indexed_notes)).stdout)
        assert shown["writer"]["pid"] == holder.pid
        assert shown["writer"]["command"] == "test-holder"
        assert abs(shown["writer"]["since"] - time.time()) < 60
    finally:
        holder.kill()
        holder.wait()
    assert (indexed_notes / ".markdownvdb.state" / "writer.json").exists()  # left by the kill
    shown = json.loads(run_cli("status", "--json", "--root", str(indexed_notes)).stdout)
    assert shown["writer"] is None


def test_status_names_no_writer_for_a_side_file_whose_pid_holds_no_lock(indexed_notes: Path):
    """A killed writer's side file whose pid now belongs to a live process that holds no
    lock (pid reuse): `status` names no writer. Linux (/proc/locks) only."""
    if not Path("/proc/locks").exists():
        pytest.skip("no /proc/locks")
    state = indexed_notes / ".markdownvdb.state"
    (state / "writer.lock").touch()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        info = {"pid": sleeper.pid, "command": "mdvdb ingest", "since": time.time()}
        (state / "writer.json").write_text(json.dumps(info))
        shown = json.loads(run_cli("status", "--json", "--root", str(indexed_notes)).stdout)
        assert shown["writer"] is None
        text = run_cli("status", "--root", str(indexed_notes))
        assert text.returncode == 0 and "writer:" not in text.stdout
    finally:
        sleeper.kill()
        sleeper.wait()


def test_second_writer_waits_then_runs(notes: Path):
    """The holder lets go once the second writer says it waits (not after a fixed time: no
    idle seconds, and no race with a slow start-up on a loaded machine)."""
    holder = _hold(notes / ".markdownvdb.state", 60)
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    writer = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(notes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = []
        while not said or "waiting for the index lock" not in said[-1]:
            line = writer.stderr.readline()
            assert line, "".join(said)  # it ended (or closed stderr) without waiting
            said.append(line)
        assert f"waiting for the index lock held by pid {holder.pid} (test-holder)" in said[-1]
        assert (notes / ".markdownvdb.index").exists() is False  # still waiting
        _release(holder)
        holder.wait(timeout=30)
        _out, err = writer.communicate(timeout=300)
    finally:
        holder.kill()
        writer.kill()
        holder.wait()
        writer.wait()
    assert writer.returncode == 0, "".join(said) + err
    assert (notes / ".markdownvdb.index").is_file()


def test_the_hook_form_is_quiet_while_another_writer_runs(notes: Path):
    """`ingest --if-present --no-wait` (the Stop hook) in a set-up folder while a watcher holds
    the lock: that writer is already bringing the index up to date, so exit 0 and silence;
    plain `--no-wait` still exits 1."""
    (notes / ".markdownvdb").write_text("# set up\n")
    holder = _hold(notes / ".markdownvdb.state", 30)
    try:
        hook = run_cli("ingest", "--if-present", "--quiet", "--no-wait", "--root", str(notes))
        assert (hook.returncode, hook.stdout, hook.stderr) == (0, "", "")
        plain = run_cli("ingest", "--no-wait", "--root", str(notes))
        assert plain.returncode == 1 and "another writer" in plain.stderr
    finally:
        holder.kill()
        holder.wait()


def test_killed_holder_blocks_nobody(notes: Path):
    state = notes / ".markdownvdb.state"
    holder = _hold(state, 60)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    info = json.loads((state / "writer.json").read_text())  # left behind by the killed one
    assert info["pid"] == holder.pid
    result = run_cli("ingest", "--no-wait", "--root", str(notes))
    assert result.returncode == 0, result.stderr
    assert not (state / "writer.json").exists()


@pytest.mark.slow
def test_stale_temp_file_removed_and_live_index_kept(notes: Path):
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    # write_index's temp name: "." + the index name + random part + ".tmp"
    stale = notes / "..markdownvdb.index.k1ll3d.tmp"
    stale.write_bytes(b"half an index")
    other = notes / ".unrelated.tmp"
    other.write_bytes(b"not ours")
    (notes / "new.md").write_text("# New\n\nA new note about otters.\n")
    result = run_cli("ingest", "--root", str(notes))
    assert result.returncode == 0, result.stderr
    assert not stale.exists()
    assert other.exists()


@pytest.mark.slow
def test_damaged_doit_db_does_not_block_the_next_run(notes: Path):
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    db = notes / ".markdownvdb.state" / "doit.sqlite3"
    db.write_bytes(b"this is not a database" * 100)
    (notes / "tar.md").write_text("# tar\n\nChanged content about tape archives.\n")
    result = run_cli("ingest", "--root", str(notes), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["changed"] == 1


def test_published_index_is_private_whatever_the_umask(notes: Path):
    """It holds the notes' text: 0600 under umask 022 (docs/security.md)."""
    old = os.umask(0o022)
    try:
        assert run_cli("ingest", "--root", str(notes)).returncode == 0
    finally:
        os.umask(old)
    assert (notes / ".markdownvdb.index").stat().st_mode & 0o777 == 0o600


def _doit_list(root: Path, env: dict) -> None:
    """`doit list` in `root` answers with the stages, well before a held lock is freed."""
    started = time.monotonic()
    listed = subprocess.run(
        [sys.executable, "-m", "doit", "list"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    names = sorted(line.split()[0] for line in listed.stdout.splitlines() if line.strip())
    assert names == sorted(STAGES)
    assert time.monotonic() - started < 20


def test_doit_list_answers_while_the_writer_lock_is_held(notes: Path):
    """Importing the tasks (a `dodo.py`) takes no lock and opens no database: `doit list`
    answers while another writer holds the lock (the holder keeps it 60 s; the listing
    would wait that long, and fail, if importing the tasks took it)."""
    (notes / "dodo.py").write_text((REPO / "dodo.py").read_text())
    holder = _hold(notes / ".markdownvdb.state", 60)
    try:
        _doit_list(notes, {**os.environ, "PYTHONPATH": str(REPO)})
        assert holder.poll() is None  # still holding it
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_doit_list_answers_while_an_ingest_holds_the_lock(notes: Path):
    """Importing the tasks (a `dodo.py`) takes no lock and opens no database: `doit list`
    and `doit help` answer at once while another writer holds the lock; `doit` itself (a
    real run) waits for it like any writer."""
    state = notes / ".markdownvdb.state"
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    (notes / "dodo.py").write_text((REPO / "dodo.py").read_text())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = _hold(state, 60)
    try:
        _doit_list(notes, env)
        # A run is a writer: it waits for the holder instead of writing beside it.
        running = subprocess.Popen(
            [sys.executable, "-m", "doit"], cwd=notes, env=env, stderr=subprocess.PIPE, text=True
        )
        time.sleep(2)
        assert running.poll() is None
    finally:
        holder.kill()
        holder.wait()
    assert running.wait(timeout=120) == 0, running.stderr.read()
