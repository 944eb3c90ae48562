"""What `mdvdb mcp` adds to the SDK's transports so that no client can knock it over: over HTTP
a header timeout and a connection cap (`guarded_protocol`), over stdio a JSON-RPC error for
every malformed line (`AnsweringStream`); docs/security.md, "Servers that cannot be knocked
over"."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from contextlib import suppress
from typing import Any

__all__ = [
    "HEADER_SECONDS",
    "AnsweringStream",
    "connection_cap",
    "guarded_protocol",
    "serve_http",
]

HEADER_SECONDS = 10.0
MAX_CONNECTIONS = 512
# Connections the kernel queues before an accept, and so the most asyncio accepts in one go
# (uvicorn's default, 2,048, would spend the descriptors before any could be refused).
BACKLOG = 64


def connection_cap() -> int:
    """Connections open at once: at most `MAX_CONNECTIONS`, and half of what the open-file
    limit leaves after two bursts of accepts (`BACKLOG`) and 64 for the rest of the server."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(4, min(MAX_CONNECTIONS, (soft - 2 * BACKLOG - 64) // 2))


def more_open_files(wanted: int = 4096) -> None:
    """Raise the soft open-file limit towards the hard one (as Go's runtime does at start):
    a default of 1,024 is what the cap would otherwise divide."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def serve_http(app: Any, port: int) -> None:
    """uvicorn on 127.0.0.1:`port` with `guarded_protocol`, until SIGTERM or Ctrl-C."""
    import uvicorn

    more_open_files()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            http=guarded_protocol(),
            backlog=BACKLOG,
        )
    )

    def on_loop_error(loop: Any, context: dict) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and "accept" in str(context.get("message", "")):
            # out of descriptors after all: asyncio retries the accept in a second; one
            # line, and no logging handler that would import (and so open) a module now
            sys.stderr.write(f"mdvdb mcp: cannot accept a connection now ({exc.strerror})\n")
            return
        loop.default_exception_handler(context)

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(on_loop_error)
        await server.serve()

    asyncio.run(run())


def _plain_response(status: int, reason: str, text: str) -> bytes:
    body = text.encode("ascii") + b"\n"
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode("ascii") + body


def guarded_protocol(header_seconds: float = HEADER_SECONDS, cap: int | None = None) -> type:
    """uvicorn's `H11Protocol` with the bounds above, for `uvicorn.Config(http=...)`."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    limit = connection_cap() if cap is None else cap

    class GuardedH11(H11Protocol):
        head_since: float | None = None  # when the wait for a request head began
        head_timer: Any = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limit and not self._evict_one():
                self._refuse(503, "Service Unavailable", "too many connections; try again")
                return
            self._await_head()

        def _evict_one(self) -> bool:
            waiting = [c for c in self.connections if c is not self and c.head_since is not None]
            if not waiting:
                return False
            min(waiting, key=lambda c: c.head_since)._refuse(
                408, "Request Timeout", "closed for a newer connection: send the request"
            )
            return True

        def _await_head(self) -> None:
            self._stop_waiting()
            self.head_since = time.monotonic()
            self.head_timer = self.loop.call_later(header_seconds, self._head_late)

        def _stop_waiting(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.head_since = None

        def _head_late(self) -> None:
            self.head_timer = None
            self._refuse(
                408, "Request Timeout", f"no complete request head within {header_seconds:g} s"
            )

        def _refuse(self, status: int, reason: str, text: str) -> None:
            self._stop_waiting()
            if not self.transport.is_closing():
                self.transport.write(_plain_response(status, reason, text))
                self.transport.close()

        def handle_events(self) -> None:
            try:
                super().handle_events()
            except ValueError:  # a target uvicorn cannot decode (UnicodeDecodeError)
                self._refuse(400, "Bad Request", "Invalid HTTP request received.")
                return
            if self.head_since is not None and self.conn.their_state is not h11.IDLE:
                self._stop_waiting()  # the head is in: the request is the app's now

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()  # a kept-alive connection's next head has a deadline too

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

    return GuardedH11


class AnsweringStream:
    """The stdio transport's read stream, each malformed line answered (see the module doc)."""

    def __init__(self, inner: Any, write: Any):
        self.inner = inner
        self.write = write

    async def receive(self, take: Any = None) -> Any:
        while True:
            item = await (take or self.inner.receive)()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    def __aiter__(self) -> AnsweringStream:
        return self

    async def __anext__(self) -> Any:
        return await self.receive(self.inner.__anext__)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AnsweringStream:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self.inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:  # last_context and the like
        return getattr(self.inner, name)

    async def _answer(self, problem: Exception) -> None:
        from mcp.shared.message import SessionMessage

        await self.write.send(SessionMessage(malformed_reply(problem)))


def malformed_reply(problem: Exception) -> Any:
    """The JSON-RPC error for a line the SDK could not read as a message."""
    import mcp_types as types

    errors = problem.errors() if callable(getattr(problem, "errors", None)) else []
    first = errors[0] if errors else {}
    value = first.get("input")
    parse = first.get("type") == "json_invalid"
    if parse and isinstance(value, str):
        try:  # Python's json reads lone surrogates, which the SDK refuses: the id may be there
            value = json.loads(value)
        except (ValueError, RecursionError):
            value = None
    given = value.get("id") if isinstance(value, dict) else None
    ident = given if isinstance(given, str | int) and not isinstance(given, bool) else None
    detail = str(first.get("msg") or problem).splitlines()[0][:200]
    code, what = (
        (types.PARSE_ERROR, "Parse error in the") if parse else (types.INVALID_REQUEST, "Invalid")
    )
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=ident,
        error=types.ErrorData(code=code, message=f"{what} request: {detail}"),
    )
