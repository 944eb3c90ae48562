"""Servers that cannot be knocked over (docs/security.md, "Round two"): the warm socket of
`mdvdb serve` answers any bytes with an error and SIGTERM in every state; `mdvdb mcp
--http` survives a flood of idle connections (header timeout, connection cap below the
open-file limit) and answers a bad request with an error; stdio MCP answers a malformed
line with a JSON-RPC error. Real servers on 127.0.0.1 and Unix sockets, raw clients and the
MCP SDK's client."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

SOCKET = Path(".markdownvdb.state") / "serve.sock"


def _at(sock: socket.socket, path: Path, bind: bool = False) -> None:
    """Connect (or bind) `sock` by a name relative to its folder, as mdvdb does: a temp
    folder's full path can pass the 108 bytes AF_UNIX allows."""
    with contextlib.chdir(path.parent):
        (sock.bind if bind else sock.connect)(path.name)


def _raw_exchange(path: Path, payload: bytes, shut: bool = True, timeout: float = 10.0) -> bytes:
    """Send `payload` on the Unix socket, then read until the server closes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    _at(sock, path)
    try:
        sock.sendall(payload)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
        return data
    finally:
        sock.close()


def test_the_warm_decoder_refuses_the_marshal_bomb_and_any_bound_in_microseconds():
    """The 11 bytes that made marshal build 1.5 billion list entries, and the other ways a
    message can lie (a length, a count, a depth, a number), are refused by the decoder the
    server runs, without allocating what they announce; a real message round-trips."""
    from mdvdb.cli.warm_wire import HEADER, MAX_DEPTH, WireError, decode, encode

    request = {"argv": ["search", "caf\udcc3", "-n", "3"], "cwd": "/x", "env": {"A": "1"}}
    reply = {"stdout": "é\n", "code": 0, "uptime": 1.5, "watching": True, "none": None}
    for value in (request, reply):
        assert decode(encode(value), 1 << 20) == value
    bad = [
        b"[[[[[[[[[[N",  # marshal's list of 0x5b5b5b5b entries
        b"MDW1\xff\xff\xff\xff",  # 4 GiB announced
        b"MDW1\x00\x00\x00\x05l[[[[",  # a list of 1.5 billion items in 5 bytes
        b"MDW1\x00\x00\x00\x05s\x7f\xff\xff\xff",  # a 2 GiB string
        encode({"argv": ["search"]})[:HEADER],  # a header without its body
        b"MDW1\x00\x00\x00\x03i\xff1",  # a 255-digit number
        b"MDW1" + (5 * (MAX_DEPTH + 2)).to_bytes(4, "big") + b"l\x00\x00\x00\x01" * (MAX_DEPTH + 2),
    ]
    started = time.perf_counter()
    for data in bad:
        with pytest.raises(WireError):
            decode(data, 1 << 20)
    assert time.perf_counter() - started < 0.1
    with pytest.raises(WireError):
        encode({"a": [[[[[[[[[[1]]]]]]]]]]})  # deeper than MAX_DEPTH: never sent either


def _start_serve(root: Path, log: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "serve", "--idle-timeout", "120", "--root", str(root)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "MDVDB_WATCH": "false"},
    )
    deadline = time.monotonic() + 90
    while run_cli("serve", "--status", "--root", str(root)).returncode != 0:
        assert server.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    return server


@pytest.mark.slow
def test_the_warm_socket_answers_any_bytes_with_an_error_and_sigterm_always(
    indexed_notes: Path, tmp_path: Path
):
    from mdvdb.cli.warm_wire import decode

    cold = run_cli("search", "extract a tar archive", "--root", str(indexed_notes))
    server = _start_serve(indexed_notes, tmp_path / "serve.log")
    sock = indexed_notes / SOCKET
    try:
        for payload in (
            b"[[[[[[[[[[N",
            b"MDW1\xff\xff\xff\xff",
            b"MDW1\x00\x00\x00\x05l[[[[",
            b"MDW1\x00\x00\x00\x01N",  # a well-formed message that is no request
            os.urandom(3000),
        ):
            started = time.monotonic()
            reply = decode(_raw_exchange(sock, payload), 1 << 20)
            assert time.monotonic() - started < 5, payload[:12]
            assert reply["code"] == 1 and "bad warm request" in reply["stderr"], reply
        # The server still answers the CLI, warm, with the cold answer's bytes.
        warm = run_cli("search", "extract a tar archive", "--root", str(indexed_notes))
        assert (warm.returncode, warm.stdout) == (0, cold.stdout)
        status = run_cli("serve", "--status", "--json", "--root", str(indexed_notes))
        assert json.loads(status.stdout)["requests"] >= 1  # it was answered warm

        # SIGTERM while a client holds a half-sent request: the server ends at once.
        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _at(stalled, sock)
        stalled.sendall(b"MDW1\x00\x00\x10\x00d")
        time.sleep(0.3)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0
        stalled.close()
        assert not sock.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


@pytest.mark.slow
def test_the_warm_client_falls_back_when_the_reply_is_garbage(indexed_notes: Path):
    """A process at the socket that answers bytes of another protocol (an older mdvdb's
    marshal, a stray program): the CLI runs the command itself, same output, one call."""
    cold = run_cli("search", "tar", "--root", str(indexed_notes))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _at(listener, indexed_notes / SOCKET, bind=True)
    listener.listen(4)
    lock = os.open(indexed_notes / ".markdownvdb.state" / "serve.lock", os.O_RDWR | os.O_CREAT)
    import fcntl

    fcntl.flock(lock, fcntl.LOCK_EX)  # looks served: the client does connect

    def garbage() -> None:
        conn, _ = listener.accept()
        conn.recv(1 << 16)
        conn.sendall(b"[[[[[[[[[[N")
        conn.close()

    thread = threading.Thread(target=garbage, daemon=True)
    thread.start()
    try:
        done = run_cli("search", "tar", "--root", str(indexed_notes))
        thread.join(10)
        assert not thread.is_alive()  # the client did ask it
        assert (done.returncode, done.stdout, done.stderr) == (0, cold.stdout, cold.stderr)
    finally:
        os.close(lock)
        listener.close()


# -- mcp --http ---------------------------------------------------------------------------


def _guarded_app_server(header_seconds: float, cap: int):
    """uvicorn with `guarded_protocol` over a one-line ASGI app, on a thread: the same
    protocol `mdvdb mcp --http` runs, without the model."""
    import asyncio

    import uvicorn

    from mdvdb.mcp_transports import guarded_protocol

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        http=guarded_protocol(header_seconds, cap),
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # a thread's server: the test's signals
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return server, thread, port


def _closed_by(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes `sock` before `deadline` (time.monotonic)."""
    try:
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _reply(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_the_http_guard_times_out_idle_and_slow_heads_and_caps_connections():
    """The protocol of `mdvdb mcp --http` (mdvdb.mcp_transports): a connection that sends
    nothing, or its head a byte at a time, gets 408 and is closed at the header timeout; a
    new connection past the cap closes the oldest one still waiting; a request that is not
    HTTP gets 400; an ordinary request is answered throughout."""
    server, thread, port = _guarded_app_server(header_seconds=1.0, cap=4)
    try:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
        # Six idle connections and a cap of four: the two oldest were closed for the others.
        assert [b"408" in _reply(s, 0.3) for s in idle[:2]] == [True, True]
        slow = socket.create_connection(("127.0.0.1", port))
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\n":
            slow.sendall(bytes([byte]))
            if b"408" in _reply(slow, 0.05):
                break
        else:
            raise AssertionError("a head sent a byte at a time was never cut off")
        started = time.monotonic()
        assert all(b"408" in _reply(s, 3) for s in idle[2:])
        assert time.monotonic() - started < 3
        fine = socket.create_connection(("127.0.0.1", port))
        fine.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _reply(fine, 5).startswith(b"HTTP/1.1 200")
        for garbage in (b"GARBAGE\r\n\r\n", b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n"):
            bad = socket.create_connection(("127.0.0.1", port))
            bad.sendall(garbage)
            assert _reply(bad, 5).startswith(b"HTTP/1.1 400"), garbage
        for s in [*idle, slow, fine, bad]:
            s.close()
    finally:
        server.should_exit = True
        thread.join(10)


def _start_http(root: Path, nofile: int) -> tuple[subprocess.Popen, int, str]:
    """`mdvdb mcp --http PORT` with an open-file limit of `nofile` (soft and hard)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    server = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "mcp", "--http", str(port), "--root", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
        env={**os.environ, "MDVDB_WATCH": "false"},
    )
    banner = server.stderr.readline()
    deadline = time.monotonic() + 90
    while True:
        assert server.poll() is None, banner + server.stderr.read()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port, banner
        except OSError:
            assert time.monotonic() < deadline, "mdvdb mcp --http never listened"
            time.sleep(0.2)


async def _sdk_search(port: int, token: str, query: str):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as client,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (r, w),
        ClientSession(r, w) as session,
    ):
        await session.initialize()
        return await session.call_tool("search", {"query": query})


@pytest.mark.slow
def test_mcp_http_survives_a_thousand_idle_connections(indexed_notes: Path):
    """1,000 connections that never send a byte, against a server allowed 256 open files
    (EMFILE in accept, and a dead server, before): it stays up, the MCP SDK's client gets
    its answer during the flood and after it, and every idle connection is closed by the
    header timeout."""
    import asyncio

    from mdvdb.mcp_transports import HEADER_SECONDS

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1400:  # the test's own end of 1,000 connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    server, port, banner = _start_http(indexed_notes, nofile=256)
    token = (indexed_notes / ".markdownvdb.state" / "mcp-http.token").read_text().strip()
    flood: list[socket.socket] = []
    try:
        for _ in range(1000):
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        assert server.poll() is None
        found = asyncio.run(asyncio.wait_for(_sdk_search(port, token, "extract a tar archive"), 60))
        assert found.structured_content["results"][0]["path"] == "tar.md"
        deadline = time.monotonic() + HEADER_SECONDS + 15
        assert all(_closed_by(sock, deadline) for sock in flood)
        assert server.poll() is None
        found = asyncio.run(asyncio.wait_for(_sdk_search(port, token, "extract a tar archive"), 60))
        assert found.structured_content["results"][0]["path"] == "tar.md"
    finally:
        for sock in flood:
            sock.close()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        rest = server.stderr.read()
    assert "Traceback" not in rest and "Too many open files" not in rest, rest[-2000:]


# -- stdio MCP ----------------------------------------------------------------------------


@pytest.mark.slow
def test_mcp_stdio_answers_every_malformed_line(indexed_notes: Path):
    """Lines that are not JSON, not UTF-8, hold a lone surrogate, lack a method or nest
    100,000 deep each get a JSON-RPC error (with the request's id when the line has one),
    and the session goes on: the next tool call is answered."""
    server = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "mcp", "--root", str(indexed_notes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MDVDB_WATCH": "false"},
    )

    def send(line: bytes) -> dict:
        import select

        server.stdin.write(line + b"\n")
        server.stdin.flush()
        ready, _, _ = select.select([server.stdout], [], [], 30)
        assert ready, f"no answer to {line[:40]!r}"  # a dropped line: the client waits forever
        return json.loads(server.stdout.readline())

    try:
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        assert send(json.dumps(hello).encode())["id"] == 1
        server.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

        def call(ident: int, query: str) -> bytes:
            arguments = {"name": "search", "arguments": {"query": query}}
            message = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": arguments}
            return json.dumps(message).encode()

        cases = [
            (b"not json", None, -32700),
            (b"\xff\xfe garbage", None, -32700),
            (b"[" * 100_000, None, -32700),
            (b'{"jsonrpc":"2.0","id":2}', 2, -32600),
            (call(3, "\ud800"), 3, -32700),
        ]
        for line, ident, code in cases:
            answer = send(line)
            assert answer["id"] == ident and answer["error"]["code"] == code, (line[:40], answer)
        answer = send(call(4, "extract a tar archive"))
        assert answer["id"] == 4 and "tar.md" in answer["result"]["content"][0]["text"]
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    assert "Traceback" not in server.stderr.read().decode()
