"""A small OpenAI- and Ollama-compatible embeddings server on 127.0.0.1, for tests and benches.

It returns deterministic vectors (hashed bag of words, so a query about "tar" finds the tar
notes), counts what it served per text hash, and can be told to fail in every way a real
endpoint does: a status with Retry-After, a hang past the client's timeout, a dropped
connection, a wrong dimension, a refused key, or "the network went down after N requests".
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

WORD = re.compile(r"\w+")


def vector_for(text: str, dims: int) -> np.ndarray:
    """The server's embedding of a text: a signed hashed bag of words (not normalized)."""
    out = np.zeros(dims, dtype=np.float32)
    for word in WORD.findall(text.lower()):
        h = hashlib.sha256(word.encode()).digest()
        out[int.from_bytes(h[:4], "little") % dims] += 1.0 if h[4] & 1 else -1.0
    if not out.any():
        out[0] = 1.0
    return out


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Action:
    """What to do with one request instead of answering it."""

    kind: str  # "status" | "hang" | "drop"
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Logged:
    path: str
    outcome: str  # "ok", "drop", "hang" or an HTTP status
    texts: list[str]
    at: float
    authorization: str | None


class FakeEmbeddingServer:
    def __init__(
        self,
        dims: int = 64,
        latency: float = 0.0,
        api_key: str | None = None,
        models: tuple[str, ...] | None = None,
    ):
        self.dims = dims
        self.answer_dims: int | None = None  # set to return the wrong size
        self.latency = latency
        self.api_key = api_key
        self.models = models
        self.script: deque[Action] = deque()
        self.down_after: int | None = None  # successful answers before the "network" fails
        self.down_action = Action("drop")
        self.log: list[Logged] = []
        self.served: Counter[str] = Counter()  # text hash -> times answered successfully
        self.in_flight = 0
        self._cache: dict[tuple[str, int, bool], str] = {}
        self.max_in_flight = 0  # most requests handled at once
        self.poison: str | None = None  # texts holding this word get a NaN vector
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        # `shutdown` waits for the serving loop to look at its flag, which it does every
        # poll interval: at the default 0.5 s every test that used a server idled half a
        # second at its end (~9 s of one worker's wall in the inner loop).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> FakeEmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- what tests look at -----------------------------------------------------------------
    def requests(self, outcome: str | None = None) -> list[Logged]:
        with self._lock:
            return [r for r in self.log if outcome is None or r.outcome == outcome]

    def successes(self) -> int:
        return len(self.requests("ok"))

    def fail_next(self, *actions: Action) -> None:
        self.script.extend(actions)

    # -- request handling -------------------------------------------------------------------
    def _next_action(self) -> Action | None:
        with self._lock:
            if self.script:
                return self.script.popleft()
            ok = sum(1 for r in self.log if r.outcome == "ok")
            if self.down_after is not None and ok >= self.down_after:
                return self.down_action
        return None

    def _record(self, path: str, outcome: str, texts: list[str], auth: str | None) -> None:
        with self._lock:
            self.log.append(Logged(path, outcome, texts, time.monotonic(), auth))
            if outcome == "ok":
                self.served.update(text_hash(t) for t in texts)

    def _encoded(self, text: str, b64: bool) -> str:
        """A vector as JSON (a float list, or a base64 string), cached so that the server's
        own encoding does not slow a bench of the client down once warmed up."""
        dims = self.answer_dims or self.dims
        if self.poison and self.poison in text:
            nan = np.full(dims, np.nan, dtype=np.float32)
            if b64:
                return json.dumps(base64.b64encode(nan.astype("<f4").tobytes()).decode())
            return "[" + ",".join(["NaN"] * dims) + "]"
        key = (text, dims, b64)
        found = self._cache.get(key)
        if found is None:
            vector = vector_for(text, dims)
            if b64:
                found = json.dumps(base64.b64encode(vector.astype("<f4").tobytes()).decode())
            else:
                found = json.dumps([float(x) for x in vector])
            self._cache[key] = found
        return found


def _handler(server: FakeEmbeddingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            """`/stats`: what was served, for a bench that runs the server in a process."""
            with server._lock:
                stats = {
                    "requests": len(server.log),
                    "ok": sum(1 for r in server.log if r.outcome == "ok"),
                    "texts": sum(server.served.values()),
                    "distinct_texts": len(server.served),
                }
            self._send(200, stats)

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON"}})
                return
            texts = body.get("input", [])
            texts = [texts] if isinstance(texts, str) else list(texts)
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                self._answer(body, texts)
            finally:
                with server._lock:
                    server.in_flight -= 1

        def _answer(self, body: dict, texts: list[str]) -> None:
            auth = self.headers.get("Authorization") or self.headers.get("api-key")
            path = self.path.split("?", 1)[0]
            action = server._next_action()
            if action is not None:
                server._record(
                    path,
                    action.kind if action.kind != "status" else str(action.status),
                    texts,
                    auth,
                )
                self._act(action)
                return
            if server.latency:
                time.sleep(server.latency)
            if path.endswith("/v1/embeddings"):
                self._openai(body, texts, auth, path)
            elif path == "/api/embed":
                self._ollama(body, texts, auth, path)
            else:
                server._record(path, "404", texts, auth)
                self._send(404, {"error": "404 page not found"})

        def _openai(self, body: dict, texts: list[str], auth: str | None, path: str) -> None:
            if server.api_key is not None:
                given = (auth or "").removeprefix("Bearer ")
                if given != server.api_key:
                    server._record(path, "401", texts, auth)
                    # Like OpenAI, name the key that was refused (a client must mask it).
                    message = f"Incorrect API key provided: {given}."
                    self._send(401, {"error": {"message": message, "type": "invalid_request"}})
                    return
            if server.models is not None and body.get("model") not in server.models:
                server._record(path, "404", texts, auth)
                self._send(404, {"error": {"message": f"model {body.get('model')} not found"}})
                return
            b64 = body.get("encoding_format") == "base64"
            items = ",".join(
                f'{{"object":"embedding","index":{i},"embedding":{server._encoded(t, b64)}}}'
                for i, t in enumerate(texts)
            )
            model = json.dumps(body.get("model"))
            server._record(path, "ok", texts, auth)
            self._send_raw(200, f'{{"object":"list","data":[{items}],"model":{model}}}'.encode())

        def _ollama(self, body: dict, texts: list[str], auth: str | None, path: str) -> None:
            if server.models is not None and body.get("model") not in server.models:
                server._record(path, "404", texts, auth)
                message = f'model "{body.get("model")}" not found, try pulling it first'
                self._send(404, {"error": message})
                return
            vectors = ",".join(server._encoded(t, False) for t in texts)
            model = json.dumps(body.get("model"))
            server._record(path, "ok", texts, auth)
            self._send_raw(200, f'{{"model":{model},"embeddings":[{vectors}]}}'.encode())

        def _act(self, action: Action) -> None:
            if action.kind == "hang":
                server._closing.wait(action.seconds)
                self.close_connection = True
                return
            if action.kind == "drop":
                self.close_connection = True
                return
            self._send(action.status, {"error": {"message": f"fake {action.status}"}}, action)

        def _send(self, status: int, payload: dict, action: Action | None = None) -> None:
            self._send_raw(status, json.dumps(payload).encode(), action)

        def _send_raw(self, status: int, data: bytes, action: Action | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (action.headers if action else {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True

    return Handler


def main() -> None:
    """Serve in this process until stdin closes: `python tests/fake_embeddings.py --latency
    0.05` prints the URL on its first line (the benches run it apart from the client so the
    two do not share a GIL)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", type=int, default=768)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    with FakeEmbeddingServer(dims=args.dims, latency=args.latency) as server:
        print(server.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
