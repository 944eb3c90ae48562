"""The warm path: an optional `mdvdb serve` process that answers CLI calls over a Unix socket.

The CLI forwards `search` and `get` to it, and the server runs the same `mdvdb.cli.run`
(docs/architecture.md, "Repeated calls"). The client half runs on every CLI call, so it
imports little."""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from contextlib import chdir, suppress

from mdvdb.cli.warm_wire import HEADER, WireError, decode, encode, message_length

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from pathlib import Path

SOCKET_NAME = "serve.sock"
# Commands the CLI forwards: read-only queries whose output depends only on argv, cwd, env.
FORWARDED = frozenset({"search", "get"})
# Set to 1 to make the CLI never use a warm process (benchmarks, debugging).
NO_WARM_ENV = "MDVDB_NO_WARM"
CLIENT_TIMEOUT = 60.0
# Bounds on one exchange (the biggest reply: `get` of a large page).
MAX_REQUEST = 1 << 20
MAX_REPLY = 256 << 20
REQUEST_SECONDS = 10.0  # a client must have sent its whole request by then


def root_from_argv(argv: list[str]) -> str | None:
    """The `--root` value, if given, without parsing anything else."""
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--root="):
            return arg.split("=", 1)[1]
    return None


def socket_folder(argv: list[str]) -> str | None:
    """The state folder, resolved as `kernel.config` would but with plain strings; None
    leaves a bad configuration to the real command."""
    from kernel import dotenv

    root = root_from_argv(argv)
    if root is not None and not os.path.isdir(root):
        return None
    root = os.path.realpath(root) if root is not None else dotenv.find_root(os.getcwd())
    state_dir = os.environ.get("MDVDB_STATE_DIR")
    if state_dir is None:
        try:  # never through a link, never a FIFO or unbounded: the real command says why
            text = dotenv.read_file(os.path.join(root, dotenv.CONFIG_FILE))
        except (OSError, UnicodeDecodeError):
            return None
        state_dir = dotenv.parse_dotenv(text).get("MDVDB_STATE_DIR") if text else None
    return os.path.realpath(os.path.join(root, (state_dir or ".markdownvdb.state").strip()))


def _client_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("MDVDB_")}


def forward(argv: list[str]) -> int | None:
    """Run `argv` in a warm process if one serves this project; None means run it here."""
    if not argv or argv[0] not in FORWARDED or os.environ.get(NO_WARM_ENV):
        return None
    if any(a in ("--help", "-h") for a in argv):
        return None
    folder = socket_folder(argv)
    if folder is None:
        return None
    try:
        st = os.stat(os.path.join(folder, SOCKET_NAME))
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return None
    request = {"argv": argv, "cwd": os.getcwd(), "env": _client_env()}
    try:
        reply = _exchange(folder, request)
    except TimeoutError:
        sys.stderr.write(
            f"mdvdb: the warm process ({folder}/{SOCKET_NAME}) did not answer within "
            f"{CLIENT_TIMEOUT:g} s; running the command here\n"
        )
        return None
    except (OSError, ValueError):
        return None  # stale socket or a server that just exited: run the command ourselves
    if reply.get("fallback"):
        return None  # an answer too big for the socket: this process computes it
    stdout, stderr, code = reply.get("stdout"), reply.get("stderr"), reply.get("code")
    if not (isinstance(stdout, str) and isinstance(stderr, str) and isinstance(code, int)):
        return None
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    sys.stdout.flush()
    return code


def _exchange(folder: str, request: dict, timeout: float = CLIENT_TIMEOUT) -> dict:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with chdir(folder):  # a socket path has ~108 bytes: a relative name at any depth
            sock.connect(SOCKET_NAME)
        sock.sendall(encode(request))
        sock.shutdown(socket.SHUT_WR)
        data = _read_message(sock, MAX_REPLY)
    finally:
        sock.close()
    if data is None:
        raise WireError("no reply")
    reply = decode(data, MAX_REPLY)
    if not isinstance(reply, dict) or "code" not in reply:
        raise WireError("malformed reply")
    return reply


def _read_message(sock, cap: int, deadline: float | None = None) -> bytes | None:
    """One whole message from `sock` (None: closed before a byte); WireError past `cap`,
    TimeoutError past `deadline` (time.monotonic)."""
    need = HEADER
    chunks: list[bytes] = []
    got = 0
    while got < need:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not complete in time")
            sock.settimeout(min(left, CLIENT_TIMEOUT))
        data = sock.recv(min(need - got, 1 << 16))
        if not data:
            if got == 0:
                return None
            raise WireError(f"cut short after {got} bytes")
        chunks.append(data)
        got += len(data)
        if need == HEADER and got >= HEADER:
            head = b"".join(chunks)
            need = HEADER + message_length(head[:HEADER], cap)
            chunks = [head]
    return b"".join(chunks)


LOCK_NAME = "serve.lock"  # held (flock) by the serving process for its whole life
LOG_NAME = "serve.log"  # a background server's stdout and stderr (the watcher's lines)
PING_TIMEOUT = 2.0
# How often the accept loop looks at its stop event and its idle clock.
POLL_SECONDS = 0.2
# Connections served at once (each on its own thread); more are closed at once.
MAX_CONNECTIONS = 64


class ServeError(RuntimeError):
    """The warm process cannot start (another one serves this project...)."""


def ask(folder: Path | str, request: dict, timeout: float = PING_TIMEOUT) -> dict | None:
    """One exchange with the warm process of `folder`; None when nothing answers."""
    try:
        return _exchange(str(folder), request, timeout)
    except (OSError, ValueError):
        return None


def ping(folder: Path | str, timeout: float = PING_TIMEOUT) -> dict | None:
    """What the running warm process says about itself (pid, root, uptime...), or None
    (a readiness probe must speak the protocol: a bare connect proves nothing)."""
    reply = ask(folder, {"op": "ping"}, timeout)
    return reply if reply and isinstance(reply.get("pid"), int) else None


def lock_holder(folder: Path) -> int | None:
    """The pid of the process holding the serve lock (maybe still starting), or None when
    the lock is free; a free lock means any socket file left here is stale."""
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDWR)
    except OSError:
        return None
    try:
        raw = _locked_by(fd)
    finally:
        os.close(fd)  # releases the lock if it was taken here
    return None if raw is None else int(raw) if raw.isdigit() else -1


def _locked_by(fd: int) -> str | None:
    """None when this process took the flock on `fd`, else what its holder wrote (its pid)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return None


def remove_stale_socket(folder: Path) -> bool:
    """Delete a socket file nobody serves (its server was killed); True if one was removed."""
    sock = folder / SOCKET_NAME
    if not sock.is_socket() or lock_holder(folder) is not None:
        return False
    try:
        sock.unlink()
    except OSError:
        return False
    return True


def _claim(folder: Path) -> int:
    """Take the serve lock (an flock the kernel drops when this process dies, so a killed
    server never blocks the next) and write our pid in it; ServeError if another holds it."""
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    raw = _locked_by(fd)
    if raw is not None:
        os.close(fd)
        who = f"pid {raw}" if raw.isdigit() else "another process"
        raise ServeError(f"already served by {who} ({folder / SOCKET_NAME})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class WarmServer:
    """The accept loop: a thread per connection (a client that stalls costs only its own);
    the commands run one at a time (each changes the process's cwd and environment)."""

    def __init__(self, folder: Path, idle_timeout: float, info: dict | None = None):
        import threading

        self.folder = folder
        self.idle_timeout = idle_timeout
        self.stop = threading.Event()
        self.info = dict(info or {})
        self._busy = threading.Lock()
        self._count = threading.Lock()
        self._active = 0
        self._last = 0.0
        self._requests = 0
        self._started = 0.0
        self._runner: _Runner | None = None

    def run(self, preload=None, started=None) -> None:
        """Serve until stopped or idle. `preload()` runs before the socket exists (so the
        first call is warm and a readiness ping means ready); `started()` runs once
        calls are accepted and may return a `stop()` to call on the way out (the watcher)."""
        import socket
        import threading

        from kernel import private

        private.state_folder(self.folder)  # 0700, and no symlink to write through
        lock_fd = _claim(self.folder)
        listener = None
        stop_extra = None
        inode = None
        try:
            self._runner = _Runner()
            if preload:
                preload()
            sock_path = self.folder / SOCKET_NAME
            if sock_path.is_socket() or sock_path.exists():
                sock_path.unlink()  # we hold the lock: whatever is there is stale
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old_mask = os.umask(0o177)  # born 0600: no window where others could connect
            try:
                with chdir(self.folder):  # (a relative name: see `_exchange`)
                    listener.bind(SOCKET_NAME)
            finally:
                os.umask(old_mask)
            inode = os.stat(sock_path).st_ino
            listener.listen(64)
            listener.settimeout(POLL_SECONDS)
            self._started = time.time()
            self._last = time.monotonic()
            if started:
                stop_extra = started()
            while not self.stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    with self._count:
                        idle = time.monotonic() - self._last
                        if self._active == 0 and idle >= self.idle_timeout:
                            return
                    continue
                except InterruptedError:
                    continue
                except OSError as exc:  # out of file descriptors (EMFILE...): wait for some
                    if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        raise
                    self.stop.wait(POLL_SECONDS)
                    continue
                with self._count:
                    full = self._active >= MAX_CONNECTIONS
                    if not full:
                        self._active += 1
                        self._last = time.monotonic()
                if full:  # a runaway client: the one it opened last is closed, not queued
                    conn.close()
                    continue
                threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()
        finally:
            if listener is not None:
                listener.close()
            with suppress(OSError):
                if inode is not None and os.stat(self.folder / SOCKET_NAME).st_ino == inode:
                    (self.folder / SOCKET_NAME).unlink()
            if stop_extra:
                stop_extra()
            if self._runner is not None:
                self._runner.close()
            os.close(lock_fd)  # releases the lock, last: the next server may start now

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(CLIENT_TIMEOUT)
                try:
                    raw = _read_message(conn, MAX_REQUEST, time.monotonic() + REQUEST_SECONDS)
                except (WireError, TimeoutError) as exc:
                    conn.sendall(encode(_refusal(f"bad warm request: {exc}")))
                    _drain(conn)
                    return
                if raw is None:
                    return  # connected and closed: a probe, nobody to answer
                reply = self._answer(raw)
                try:
                    message = encode(reply)
                except WireError as exc:
                    message = encode(_refusal(f"unsendable reply: {exc}"))
                if len(message) > MAX_REPLY:
                    message = encode({"fallback": "reply too large", "code": 1})
                conn.sendall(message)
        except OSError:
            pass  # the client hung up or stalled: there is nobody to answer
        finally:
            with self._count:
                self._active -= 1
                self._last = time.monotonic()

    def _answer(self, raw: bytes) -> dict:
        try:
            request = decode(raw, MAX_REQUEST)
            if not isinstance(request, dict):
                raise WireError("not a request")
            op = request.get("op", "run")
            if op == "ping":
                return {
                    **self.info,
                    "pid": os.getpid(),
                    "socket": str(self.folder / SOCKET_NAME),
                    "uptime": round(time.time() - self._started, 3),
                    "requests": self._requests,
                    "idle_timeout": self.idle_timeout,
                    "code": 0,
                }
            if op == "stop":
                self.stop.set()
                return {"pid": os.getpid(), "stopping": True, "code": 0}
            if op != "run":
                raise WireError(f"unknown op {op!r}")
            argv, cwd, env = request.get("argv"), request.get("cwd"), request.get("env") or {}
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise WireError("argv is not a list of strings")
            if not isinstance(cwd, str) or not isinstance(env, dict):
                raise WireError("cwd or env of the wrong type")
            if not all(isinstance(v, str) for v in env.values()):
                raise WireError("env values that are not strings")
            if not argv or argv[0] not in FORWARDED:
                raise WireError("not a forwarded command")
            with self._busy:
                self._requests += 1
                assert self._runner is not None
                return self._runner.run(argv, cwd, env)
        except WireError as exc:
            return _refusal(f"bad warm request: {exc}")


def _drain(conn: socket.socket, limit: int = MAX_REQUEST) -> None:
    """After answering a request not read to the end: read what the client still sends (up
    to `limit` bytes, a second), so that closing does not reset the connection and lose the
    answer."""
    import socket

    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(1.0)
    while limit > 0 and (data := conn.recv(1 << 16)):
        limit -= len(data)


def _refusal(problem: str) -> dict:
    return {"stdout": "", "stderr": f"mdvdb: {problem}\n", "code": 1}


class _PerThread:
    """The warm process's sys.stdout (or sys.stderr): a request's thread writes to its own
    buffer, every other thread (the watcher's) to the stream this one replaced."""

    def __init__(self, stream) -> None:
        import threading

        self.stream = stream
        self._local = threading.local()

    def target(self):
        return getattr(self._local, "buffer", None) or self.stream

    def capture(self, buffer) -> None:
        self._local.buffer = buffer

    def __getattr__(self, name: str):  # write, flush, isatty...
        return getattr(self.target(), name)


class _Runner:
    """Runs one CLI command here with the caller's cwd, MDVDB_* environment, captured output."""

    def __init__(self) -> None:  # for the server's life: `close`
        self.out, self.err = _PerThread(sys.stdout), _PerThread(sys.stderr)
        sys.stdout, sys.stderr = self.out, self.err

    def close(self) -> None:
        sys.stdout, sys.stderr = self.out.stream, self.err.stream

    def run(self, argv: list[str], cwd: str, env: dict[str, str]) -> dict:
        import io
        import traceback

        from mdvdb.cli import run

        out, err = io.StringIO(), io.StringIO()
        saved_env = _client_env()
        before = os.getcwd()
        code = 0
        self.out.capture(out)
        self.err.capture(err)
        try:
            os.chdir(cwd)
            _swap_env(env)
            try:
                code = run(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:
                traceback.print_exc(file=err)
                code = 1
        except OSError as exc:
            err.write(f"mdvdb: {exc}\n")
            code = 1
        finally:
            self.out.capture(None)
            self.err.capture(None)
            _swap_env(saved_env)
            os.chdir(before)
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "code": code}


def _swap_env(env: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith("MDVDB_")]:
        if key not in env:
            del os.environ[key]
    for key, value in env.items():
        if key.startswith("MDVDB_"):
            os.environ[key] = value
