"""Per-shard calls over TCP: a shard server (`mdvdb serve --shards 0,1 --listen HOST:PORT`)
answers the `ShardPart` calls of the shards it serves, and a reader with
`MDVDB_SHARD_SERVERS=HOST:PORT,...` (a router: `mdvdb serve`, `mdvdb search`, the library)
sends them there instead of mapping postings and vectors itself.

The protocol follows the warm server's (mdvdb/cli/warm.py): a request, then its answer; but a
connection is kept and carries one request after another, so every message says its own
length. A round of a query is one request per server (`op: calls`: a call per shard it
serves, answered side by side), and the router writes every server's request before it
reads any answer (`exchange_all`): a round costs one round trip, not one per shard. The encoding
is not marshal (a TCP port is reachable by other users of the machine, and marshal is not
meant for untrusted bytes): an 8-byte length, a JSON header, then the raw bytes of every NumPy
array the header names (dtype from a short allow-list, shape). A request names the shard FILE
(`shard-003-g000012.index`), so the server scores exactly the generation the router pinned.

There is no authentication: bind a shard server to 127.0.0.1 or a private network
(docs/scale-out.md). What crosses the wire per query and shard: the query's term hashes with
their global idf and the chunks that score (BM25F), the query vector and the shard's best
rows of its cosines with a fill for the rest (`ShardPart.dense`), page tf, feedback postings;
the router merges them in the one-file order, so every option of a search (filters, tiers,
collapse, feedback) answers exactly as on one machine. `--mode semantic` still receives a
cosine per chunk (it ranks raw cosines under any filter).
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from kernel import index_format, shards
from query.shards.part import CALLS, ShardPart

DTYPES = frozenset({"float32", "float64", "int32", "int64", "uint64", "uint8", "bool"})
MAX_MESSAGE = 1 << 30
TIMEOUT = 60.0
IDLE_CONNECTION = 300.0  # a server closes a connection idle this long
PARALLEL_CORES = 2  # a server runs a round's shards on threads from this many cores
SHARD_FILE = re.compile(r"shard-(\d{3})-g(\d{6})\.index")
_LENGTH = struct.Struct("<Q")
# The calls' names and arguments: a router refuses a server of another protocol (another
# mdvdb release) in one line rather than failing inside a query. Raise it with any change.
PROTOCOL = 2


class ShardServerError(index_format.IndexFormatError):
    """A shard server that does not answer, or answers an error; one line."""


# -- encoding -----------------------------------------------------------------------------
def encode(value: Any) -> bytes:
    arrays: list[np.ndarray] = []

    def plain(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            arrays.append(np.ascontiguousarray(v))
            return {"__nd": len(arrays) - 1}
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        if isinstance(v, np.generic):
            return v.item()
        return v

    header = json.dumps(
        {
            "value": plain(value),
            "arrays": [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays],
        }
    ).encode()
    return b"".join([_LENGTH.pack(len(header)), header, *(a.tobytes() for a in arrays)])


def decode(data: bytes) -> Any:
    """The value `encode` wrote; ValueError for anything else (sizes, types, dtypes)."""
    if len(data) < _LENGTH.size:
        raise ValueError("short message")
    (size,) = _LENGTH.unpack_from(data)
    if size > len(data) - _LENGTH.size:
        raise ValueError("truncated header")
    header = json.loads(data[_LENGTH.size : _LENGTH.size + size])
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        raise ValueError("not a shard message")
    arrays, at = [], _LENGTH.size + size
    for desc in header["arrays"]:
        dtype, shape = desc.get("dtype"), desc.get("shape")
        if dtype not in DTYPES or not isinstance(shape, list):
            raise ValueError(f"bad array {desc!r}")
        if not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"bad shape {shape!r}")
        count = int(np.prod(shape)) if shape else 1
        nbytes = count * np.dtype(dtype).itemsize
        if at + nbytes > len(data):
            raise ValueError("truncated array")
        arrays.append(np.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(shape))
        at += nbytes

    def restore(v: Any) -> Any:
        if isinstance(v, dict):
            if set(v) == {"__nd"}:
                return arrays[int(v["__nd"])]
            return {k: restore(x) for k, x in v.items()}
        if isinstance(v, list):
            return [restore(x) for x in v]
        return v

    return restore(header["value"])


def _read_exact(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise EOFError("the connection closed mid-message")
        got += n
    return bytes(buffer)


def read_message(sock: socket.socket) -> bytes | None:
    """One whole message off a connection (its length, its header, the arrays the header
    sizes); None at a clean end of the connection."""
    first = sock.recv(_LENGTH.size, socket.MSG_WAITALL)
    if not first:
        return None
    if len(first) < _LENGTH.size:
        raise ValueError("short message")
    (size,) = _LENGTH.unpack(first)
    if size > MAX_MESSAGE:
        raise ValueError("message too large")
    header = _read_exact(sock, size)
    try:
        arrays = json.loads(header).get("arrays") or []
        body = sum(
            int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize
            for a in arrays
            if a.get("dtype") in DTYPES
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError("unreadable header") from None
    if body > MAX_MESSAGE:
        raise ValueError("message too large")
    return first + header + _read_exact(sock, body)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class _Idle:
    """Open connections to each server, not in use: a round takes one per server it asks
    and gives it back once the answer is read, so one reader's queries reuse them and
    concurrent queries (a router serving several clients) each get their own."""

    def __init__(self):
        self._held: dict[str, list[socket.socket]] = {}
        self._lock = threading.Lock()

    def take(self, address: str) -> socket.socket | None:
        with self._lock:
            found = self._held.get(address)
            return found.pop() if found else None

    def give(self, address: str, sock: socket.socket) -> None:
        with self._lock:
            self._held.setdefault(address, []).append(sock)


_IDLE = _Idle()


def _connect(address: str, timeout: float) -> socket.socket:
    sock = socket.create_connection(_split(address), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _checked(address: str, reply: Any) -> Any:
    if not isinstance(reply, dict):
        raise ShardServerError(f"shard server {address}: malformed reply")
    if "error" in reply:
        raise ShardServerError(f"shard server {address}: {reply['error']}")
    return reply.get("value")


def exchange_all(requests: Sequence[tuple[str, dict]], timeout: float = TIMEOUT) -> list:
    """Each (address, request) to its server, all at once: one thread per server of the
    round (a small pool kept by the process), so the servers work at the same time and
    each answer is read and decoded as soon as it comes; a round costs one round trip
    whatever the number of servers. A kept connection the server has closed meanwhile is
    opened again once; any other failure, or an error answer, is a ShardServerError."""
    if len(requests) == 1:
        return [_exchange_one(*requests[0], timeout)]
    return list(_round_pool().map(lambda r: _exchange_one(*r, timeout), requests))


_POOL: list[ThreadPoolExecutor] = []


def _round_pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(32))
    return _POOL[0]


def _exchange_one(address: str, request: dict, timeout: float) -> Any:
    message = encode(request)
    sock = _IDLE.take(address)
    fresh = sock is None
    raw = None
    try:
        if sock is None:
            sock = _connect(address, timeout)
        sock.settimeout(timeout)
        sock.sendall(message)
        raw = read_message(sock)
        if raw is None:
            raise EOFError("the server closed the connection")
    except (OSError, ValueError, EOFError) as exc:
        if sock is not None:
            sock.close()
        if fresh:
            raise ShardServerError(f"shard server {address}: {exc}") from None
        sock, raw = _again(address, message, timeout)  # a kept connection gone: anew
    try:
        reply = decode(raw)
    except ValueError as exc:
        sock.close()
        raise ShardServerError(f"shard server {address}: {exc}") from None
    _IDLE.give(address, sock)
    return _checked(address, reply)


def _again(address: str, message: bytes, timeout: float) -> tuple[socket.socket, bytes]:
    try:
        sock = _connect(address, timeout)
    except OSError as exc:
        raise ShardServerError(f"shard server {address}: {exc}") from None
    try:
        sock.sendall(message)
        raw = read_message(sock)
        if raw is None:
            raise EOFError("the server closed the connection")
    except (OSError, ValueError, EOFError) as exc:
        sock.close()
        raise ShardServerError(f"shard server {address}: {exc}") from None
    return sock, raw


def exchange(address: str, request: dict, timeout: float = TIMEOUT) -> Any:
    """One request to a shard server on a kept connection to it; its answer, or
    ShardServerError."""
    return exchange_all([(address, request)], timeout)[0]


# -- the router's side ----------------------------------------------------------------------
class RemotePart:
    """A `ShardPart` in a shard server: the same calls, on the pinned shard file."""

    remote = True  # query.shards.reader.fan_out gives remote calls a wider pool

    def __init__(self, address: str, name: str):
        self.address = address
        self.name = name

    def call(self, name: str, *args):
        return RemotePart.call_each([self], name, [args])[0]

    @staticmethod
    def call_each(parts: Sequence[RemotePart], name: str, args: Sequence[Sequence]) -> list:
        """`name` on each part with its own arguments, in one round trip: one message per
        server, carrying the calls of every shard it serves (query.shards.reader.call_each)."""
        if name not in CALLS:
            raise ValueError(f"unknown shard call {name!r}")
        groups: dict[str, list[int]] = {}
        for i, part in enumerate(parts):
            groups.setdefault(part.address, []).append(i)
        requests = [
            (
                address,
                {
                    "op": "calls",
                    "calls": [
                        {"file": parts[i].name, "call": name, "args": list(args[i])} for i in at
                    ],
                },
            )
            for address, at in groups.items()
        ]
        out: list[Any] = [None] * len(parts)
        for (address, at), answers in zip(groups.items(), exchange_all(requests), strict=True):
            if not isinstance(answers, list) or len(answers) != len(at):
                raise ShardServerError(f"shard server {address}: malformed reply")
            for i, answer in zip(at, answers, strict=True):
                value = _checked(address, answer)
                out[i] = tuple(value) if name == "feedback_postings" else value
        return out


def remote_parts(servers: Sequence[str], manifest: shards.Manifest) -> list[RemotePart]:
    """One `RemotePart` per shard of the manifest, at the server that serves it."""
    owner: dict[int, str] = {}
    hellos = exchange_all([(address, {"op": "ping"}) for address in servers], timeout=10.0)
    for address, hello in zip(servers, hellos, strict=True):  # every server at once
        hello = hello if isinstance(hello, dict) else {}
        if hello.get("protocol") != PROTOCOL:
            raise ShardServerError(
                f"shard server {address} speaks protocol {hello.get('protocol')}, this mdvdb "
                f"{PROTOCOL}: run the same mdvdb release on the router and every server"
            )
        count = hello.get("shard_count")
        if count != manifest.shards:
            raise ShardServerError(
                f"shard server {address} serves an index of {count} "
                f"shards, this one has {manifest.shards}"
            )
        for shard in hello.get("shards") or []:
            owner.setdefault(int(shard), address)
    missing = [e.shard for e in manifest.entries if e.shard not in owner]
    if missing:
        raise ShardServerError(
            f"no shard server in MDVDB_SHARD_SERVERS serves shard(s) {', '.join(map(str, missing))}"
        )
    return [RemotePart(owner[e.shard], e.name) for e in manifest.entries]


# -- the server's side ----------------------------------------------------------------------
class ShardServer:
    """Answers the calls of some shards of one sharded index over TCP, a thread per
    connection. Shard files are mapped on first use, by the name a request gives (the
    router's pinned generation), and the last few are kept."""

    def __init__(self, folder: Path, served: Sequence[int], shard_count: int, keep: int = 0):
        self.folder = folder
        self.served = frozenset(served)
        self.shard_count = shard_count
        self.keep = keep or 2 * len(self.served) + 2
        self.requests = 0
        self.stop = threading.Event()
        self._parts: OrderedDict[str, ShardPart] = OrderedDict()
        self._lock = threading.Lock()
        cores = os.cpu_count() or 1
        # the shards of one round side by side, not in turn (docs/benchmarks.md, "Sharded
        # reads, third round")
        self.workers = (
            ThreadPoolExecutor(min(cores, len(self.served)))
            if cores >= PARALLEL_CORES and len(self.served) > 1
            else None
        )

    def part(self, name: str) -> ShardPart:
        match = SHARD_FILE.fullmatch(name) if isinstance(name, str) else None
        if match is None or int(match.group(1)) not in self.served:
            raise ValueError(f"not a shard file this server serves: {name!r}")
        with self._lock:
            found = self._parts.get(name)
            if found is not None:
                self._parts.move_to_end(name)
                return found
        found = ShardPart.load(self.folder / name)
        with self._lock:
            self._parts[name] = found
            while len(self._parts) > self.keep:
                self._parts.popitem(last=False)
        return found

    def answer(self, raw: bytes) -> bytes:
        try:
            request = decode(raw)
            if not isinstance(request, dict):
                raise ValueError("not a request")
            op = request.get("op", "call")
            if op == "ping":
                value: Any = {
                    "protocol": PROTOCOL,
                    "shards": sorted(self.served),
                    "shard_count": self.shard_count,
                    "requests": self.requests,
                    "folder": str(self.folder),
                }
            elif op == "stop":
                self.stop.set()
                value = {"stopping": True}
            elif op == "call":
                value = self._call(request)
            elif op == "calls":  # one round of a query: a call per shard this server serves
                calls = request.get("calls")
                if not isinstance(calls, list) or not calls:
                    raise ValueError("calls: expected a list of calls")
                value = self._calls(calls)
            else:
                raise ValueError(f"unknown op {op!r}")
            return encode({"value": value})
        except (ValueError, TypeError, KeyError, index_format.IndexFormatError) as exc:
            return encode({"error": str(exc).splitlines()[0] if str(exc) else repr(exc)})

    def _call(self, request: Any) -> Any:
        if not isinstance(request, dict):
            raise ValueError("not a call")
        name = request.get("call")
        args = request.get("args") or []
        if name not in CALLS or not isinstance(args, list):
            raise ValueError(f"unknown shard call {name!r}")
        with self._lock:
            self.requests += 1
        return self.part(request.get("file")).call(name, *args)

    def _calls(self, calls: list) -> list[dict]:
        """Each call's {"value"} or {"error"}, in order: the shards' work runs on threads
        (NumPy drops the GIL in the heavy parts) when there are cores to run them."""

        def one(request: Any) -> dict:
            try:
                return {"value": self._call(request)}
            except (ValueError, TypeError, KeyError, index_format.IndexFormatError) as exc:
                return {"error": str(exc).splitlines()[0] if str(exc) else repr(exc)}

        if len(calls) == 1 or self.workers is None:
            return [one(c) for c in calls]
        return list(self.workers.map(one, calls))

    def serve(self, host: str, port: int, ready=None) -> None:
        """Listen on host:port until `stop` is set (SIGTERM, an `op: stop` request)."""
        listener = socket.create_server((host, port), reuse_port=False)
        listener.settimeout(0.2)
        try:
            if ready is not None:
                ready(listener.getsockname()[1])
            while not self.stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except InterruptedError:
                    continue
                threading.Thread(target=self._one, args=(conn,), daemon=True).start()
        finally:
            listener.close()

    def _one(self, conn: socket.socket) -> None:
        """A connection: message after message until the client closes it (or idles out)."""
        try:
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(IDLE_CONNECTION)
                while not self.stop.is_set():
                    try:
                        raw = read_message(conn)
                    except (ValueError, EOFError) as exc:
                        conn.sendall(encode({"error": str(exc)}))
                        return
                    if raw is None:
                        return
                    conn.sendall(self.answer(raw))
        except OSError:
            pass  # the client hung up or idled out: nobody to answer
