"""The warm path: `mdvdb serve` answers CLI calls, exits when idle, and the CLI falls back."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, start_serve

SOCKET = Path(".markdownvdb.state") / "serve.sock"


def broken_numpy(tmp_path: Path) -> dict[str, str]:
    """An environment where importing NumPy fails: only a warm answer can succeed in it,
    because the forwarding client never imports NumPy."""
    fake = tmp_path / "fake"
    (fake / "numpy").mkdir(parents=True)
    (fake / "numpy" / "__init__.py").write_text("raise ImportError('numpy blocked by test')\n")
    return {"PYTHONPATH": str(fake)}


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.slow
def test_serve_answers_identically_then_exits_when_idle(indexed_notes: Path, tmp_path: Path):
    cold = run_cli("search", "extract a tar archive", "--root", str(indexed_notes))
    cold_json = run_cli("search", "tar", "--json", "-n", "3", "--root", str(indexed_notes))
    cold_get = run_cli("get", "tar.md", "--root", str(indexed_notes))
    assert cold.returncode == 0 and cold.stdout

    # 6 s: room for a client's start on a loaded machine between the calls below
    server = start_serve(indexed_notes, idle_timeout=6)
    try:
        sock = indexed_notes / SOCKET
        assert wait_for(sock.exists, 60), server.stderr.read() if server.poll() else "no socket"
        mode = os.stat(sock)
        assert stat.S_ISSOCK(mode.st_mode) and stat.S_IMODE(mode.st_mode) == 0o600
        assert mode.st_uid == os.getuid()

        env = broken_numpy(tmp_path)
        warm = run_cli("search", "extract a tar archive", "--root", str(indexed_notes), env=env)
        assert (warm.returncode, warm.stdout, warm.stderr) == (0, cold.stdout, cold.stderr)
        warm_json = run_cli(
            "search", "tar", "--json", "-n", "3", "--root", str(indexed_notes), env=env
        )
        assert warm_json.stdout == cold_json.stdout
        assert (
            run_cli("get", "tar.md", "--root", str(indexed_notes), env=env).stdout
            == cold_get.stdout
        )
        # Errors and exit codes come back unchanged too.
        missing = run_cli("get", "nope.md", "--root", str(indexed_notes), env=env)
        assert missing.returncode == 1 and "not in the index" in missing.stderr
        (indexed_notes / ".mdvdb-off").write_text("")
        off = run_cli("search", "tar", "--root", str(indexed_notes), env=env)
        assert off.returncode == 5
        (indexed_notes / ".mdvdb-off").unlink()

        # Idle for 6 s (room for a client's start on a loaded machine between the calls
        # above): it exits by itself and removes its socket.
        assert server.wait(timeout=30) == 0
        assert not sock.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    # Gone: the CLI runs the command itself (it now needs NumPy), with the same output.
    assert run_cli("search", "tar", "--root", str(indexed_notes), env=env).returncode != 0
    again = run_cli("search", "extract a tar archive", "--root", str(indexed_notes))
    assert (again.returncode, again.stdout) == (0, cold.stdout)


def test_stale_socket_falls_back(indexed_notes: Path):
    """A socket file left by a killed server is ignored (and replaced by the next serve)."""
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.chdir(indexed_notes / ".markdownvdb.state")
    try:
        listener.bind("serve.sock")
    finally:
        os.chdir(indexed_notes)
    listener.close()  # bound but nobody listening: connect is refused
    done = run_cli("search", "tar", "--root", str(indexed_notes))
    assert done.returncode == 0 and "tar.md" in done.stdout
    # Nobody holds the serve lock, so the file is known stale: `serve --status` removes it.
    status = run_cli("serve", "--status", "--root", str(indexed_notes))
    assert status.returncode == 1 and "removed a stale socket" in status.stdout
    assert not (indexed_notes / SOCKET).exists()


def pid_in(text: str) -> int:
    import re

    match = re.search(r"\(pid (\d+)", text)
    assert match, text
    return int(match.group(1))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) is gone for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_background_server_stays_answers_100_calls_and_is_idempotent(notes: Path, tmp_path: Path):
    import socket
    from concurrent.futures import ThreadPoolExecutor

    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    cold = run_cli("search", "extract a tar archive", "-n", "3", "--root", str(notes))
    started = run_cli("serve", "--background", "--root", str(notes))
    assert started.returncode == 0, started.stderr
    pid = pid_in(started.stdout)
    try:
        time.sleep(3)  # it used to die within a second of its own readiness probe
        assert alive(pid)
        # Clients that hang up at once, or never send anything, cost it nothing.
        sock_dir = notes / ".markdownvdb.state"
        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        os.chdir(sock_dir)
        try:
            for _ in range(5):
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as rude:
                    rude.connect("serve.sock")
            stalled.connect("serve.sock")
        finally:
            os.chdir(tmp_path)

        env = broken_numpy(tmp_path)  # only a forwarded call can answer

        def one(_: int):
            return run_cli(
                "search", "extract a tar archive", "-n", "3", "--root", str(notes), env=env
            )

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(one, range(100)))
        stalled.close()
        assert [a.returncode for a in answers] == [0] * 100, answers[0].stderr
        assert {a.stdout for a in answers} == {cold.stdout}

        # A second start reports the running one and leaves it alone; so does a foreground one.
        again = run_cli("serve", "--background", "--root", str(notes))
        assert again.returncode == 0 and "already serving" in again.stdout
        assert pid_in(again.stdout) == pid
        foreground = run_cli("serve", "--root", str(notes))
        assert foreground.returncode == 1
        assert f"already serving {sock_dir / 'serve.sock'} (pid {pid})" in foreground.stderr
        assert foreground.stderr.count("\n") == 1
        status = run_cli("serve", "--status", "--root", str(notes))
        assert status.returncode == 0 and f"pid {pid}," in status.stdout
        assert " 100 calls" in status.stdout and alive(pid)
        data = json.loads(run_cli("serve", "--status", "--json", "--root", str(notes)).stdout)
        assert data["running"] and data["pid"] == pid and data["requests"] == 100
        assert data["root"] == str(notes) and data["watching"] is True
    finally:
        stop = run_cli("serve", "--stop", "--root", str(notes))
    assert stop.returncode == 0 and f"stopped the warm process (pid {pid})" in stop.stdout
    assert wait_for(lambda: not alive(pid), 10)
    assert not (notes / SOCKET).exists()
    status = run_cli("serve", "--status", "--root", str(notes))
    assert status.returncode == 1 and "not serving" in status.stdout
    assert run_cli("serve", "--stop", "--root", str(notes)).returncode == 0  # nothing to stop


@pytest.mark.slow
def test_concurrent_background_starts_give_one_server(indexed_notes: Path):
    argv = [sys.executable, "-m", "mdvdb", "serve", "--background", "--root", str(indexed_notes)]
    starts = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        outputs = [start.communicate(timeout=300) for start in starts]
        assert [start.returncode for start in starts] == [0, 0, 0], outputs
        pids = {pid_in(out) for out, _ in outputs}
        assert len(pids) == 1, outputs
        assert sum("already serving" in out for out, _ in outputs) == 2
    finally:
        stop = run_cli("serve", "--stop", "--root", str(indexed_notes))
    assert stop.returncode == 0 and f"(pid {pids.pop()})" in stop.stdout


@pytest.mark.slow
def test_answers_stay_whole_while_the_watcher_ingests(indexed_notes: Path):
    """A warm server's watcher ingests while it answers: doit swapped sys.stdout around each
    stage, process-wide, and a search that ran meanwhile answered nothing with exit code 0.
    Here a file changes every 0.1 s while 60 searches go through the warm process."""
    import threading

    server = start_serve(indexed_notes)
    done = threading.Event()

    def edit() -> None:
        page = indexed_notes / "churn.md"
        n = 0
        while not done.is_set():
            n += 1
            page.write_text(f"# Churn {n}\n\nA page the watcher indexes again, round {n}.\n")
            time.sleep(0.1)

    editor = threading.Thread(target=edit)
    try:
        assert wait_for((indexed_notes / SOCKET).exists, 60), "no socket"
        editor.start()
        assert wait_for(lambda: "chunks indexed" in _log_so_far(server), 60)
        for _ in range(60):
            warm = run_cli(
                "search", "extract a tar archive", "--json", "-n", "3", "--root", str(indexed_notes)
            )
            assert warm.returncode == 0, warm.stderr
            assert json.loads(warm.stdout)["results"], warm.stdout
    finally:
        done.set()
        if editor.is_alive():
            editor.join()
        server.kill()
        server.wait()


def _log_so_far(server: subprocess.Popen) -> str:
    """The server's stderr read so far, without blocking (its watcher's lines)."""
    import select

    text = getattr(server, "_seen", "")
    while select.select([server.stderr], [], [], 0)[0]:
        line = server.stderr.readline()
        if not line:
            break
        text += line
    server._seen = text
    return text
