"""The warm path: an optional `mdvdb serve` process that answers CLI calls over a Unix socket.

A cold `mdvdb search` pays for the interpreter, typer (which builds pydantic adapters), NumPy,
Arrow, the tokenizer and the embedding table before it can score anything. Agents call search
hundreds of times a session, so `mdvdb serve` keeps all of that loaded and the CLI forwards its
arguments to it when its socket is there. The forwarded call runs the very same typer command
in the warm process, so output and exit codes are identical; when the socket is missing, stale
or refuses, the CLI simply runs the command itself.

The socket lives in the state folder, is created 0600 and is only used when owned by the
calling user. The server exits by itself after an idle timeout. One request per connection:
a marshalled `{"argv", "cwd", "env"}` in (the client then shuts its write side), a
marshalled `{"stdout", "stderr", "code"}` out. marshal, not JSON: both ends are this
package, it decodes plain data only, and it is built in.

The client half runs on every CLI call before typer, so it imports only built-in modules
(`_socket`, `marshal`, `os`, `stat`, `sys`) and `mdvdb.dotenv`: `socket`, `json`, `pathlib`
and `dataclasses` alone would cost ~20 ms of a ~25 ms warm call.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys

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


class _in_folder:  # noqa: N801 - used as a context manager, like contextlib's
    """Unix socket paths are limited to ~108 bytes; binding and connecting by a relative name
    from inside the state folder works at any depth."""

    def __init__(self, folder: Path | str):
        self.folder = folder

    def __enter__(self) -> None:
        self.before = os.getcwd()
        os.chdir(self.folder)

    def __exit__(self, *exc: object) -> None:
        os.chdir(self.before)


def root_from_argv(argv: list[str]) -> str | None:
    """The `--root` value, if given, without parsing anything else."""
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--root="):
            return arg.split("=", 1)[1]
    return None


def socket_folder(argv: list[str]) -> str | None:
    """The state folder, resolved as `mdvdb.config` would (--root, else the nearest folder
    with `.markdownvdb`; MDVDB_STATE_DIR from the environment, else that file, else the
    default) but with plain strings. A bad configuration is left to the real command."""
    from mdvdb import dotenv

    root = root_from_argv(argv)
    if root is not None and not os.path.isdir(root):
        return None
    root = os.path.realpath(root) if root is not None else dotenv.find_root(os.getcwd())
    state_dir = os.environ.get("MDVDB_STATE_DIR")
    if state_dir is None:
        try:
            with open(os.path.join(root, dotenv.CONFIG_FILE), encoding="utf-8-sig") as fh:
                state_dir = dotenv.parse_dotenv(fh.read()).get("MDVDB_STATE_DIR")
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError):
            return None
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
    except (OSError, ValueError):
        return None  # stale socket or a server that just exited: run the command ourselves
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    sys.stdout.flush()
    return int(reply["code"])


def _exchange(folder: str, request: dict) -> dict:
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(CLIENT_TIMEOUT)
    try:
        with _in_folder(folder):
            sock.connect(SOCKET_NAME)
        sock.sendall(marshal.dumps(request))
        sock.shutdown(_socket.SHUT_WR)
        chunks = []
        while True:
            data = sock.recv(1 << 16)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    try:
        reply = marshal.loads(b"".join(chunks))
    except (EOFError, TypeError) as exc:
        raise ValueError("malformed reply") from exc
    if not isinstance(reply, dict) or "code" not in reply:
        raise ValueError("malformed reply")
    return reply


# -- server -------------------------------------------------------------------------------
class ServeError(RuntimeError):
    """The warm process cannot start (already running, no state folder...)."""


def is_serving(folder: Path) -> bool:
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        with _in_folder(folder):
            probe.connect(SOCKET_NAME)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def serve(folder: Path, idle_timeout: float, on_ready=None) -> None:
    """Answer forwarded CLI calls until nothing arrives for `idle_timeout` seconds."""
    from mdvdb import private

    private.state_folder(folder)
    if (folder / SOCKET_NAME).exists():
        if is_serving(folder):
            raise ServeError(f"a warm process already serves {folder / SOCKET_NAME}")
        (folder / SOCKET_NAME).unlink()
    import socket

    runner = _Runner()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)  # the socket is born 0600: no window where others could connect
    try:
        with _in_folder(folder):
            listener.bind(SOCKET_NAME)
    finally:
        os.umask(old_mask)
    inode = os.stat(folder / SOCKET_NAME).st_ino
    try:
        listener.listen(16)
        listener.settimeout(idle_timeout)
        if on_ready:
            on_ready()
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return
            with conn:
                _handle(conn, runner)
    finally:
        listener.close()
        try:
            if os.stat(folder / SOCKET_NAME).st_ino == inode:
                (folder / SOCKET_NAME).unlink()
        except OSError:
            pass


def _handle(conn: socket.socket, runner: _Runner) -> None:
    conn.settimeout(CLIENT_TIMEOUT)
    chunks = []
    while True:  # the client shuts its write side after the request
        data = conn.recv(1 << 16)
        if not data:
            break
        chunks.append(data)
    try:
        request = marshal.loads(b"".join(chunks))
        argv = [str(a) for a in request["argv"]]
        if not argv or argv[0] not in FORWARDED:
            raise ValueError("not a forwarded command")
        reply = runner.run(argv, str(request["cwd"]), dict(request.get("env") or {}))
    except (ValueError, KeyError, TypeError, EOFError) as exc:
        reply = {"stdout": "", "stderr": f"mdvdb: bad warm request: {exc}\n", "code": 1}
    conn.sendall(marshal.dumps(reply))


class _Runner:
    """Runs one CLI command in this process with the caller's cwd, MDVDB_* environment and
    captured output, the way `python -m mdvdb` would have."""

    def __init__(self) -> None:
        import importlib

        import typer.main

        from mdvdb.cli import COMMAND_MODULES
        from mdvdb.cli.app import app

        for name in COMMAND_MODULES:
            importlib.import_module(name)
        self.command = typer.main.get_command(app)

    def run(self, argv: list[str], cwd: str, env: dict[str, str]) -> dict:
        import io
        import traceback
        from contextlib import redirect_stderr, redirect_stdout

        from mdvdb.cli import run_fast

        out, err = io.StringIO(), io.StringIO()
        saved_env = {k: v for k, v in os.environ.items() if k.startswith("MDVDB_")}
        before = os.getcwd()
        code = 0
        try:
            os.chdir(cwd)
            _swap_env(env)
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    code = run_fast(argv)
                    if code is None:
                        code = 0
                        self.command.main(args=argv, prog_name="mdvdb", standalone_mode=True)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except Exception:
                    traceback.print_exc()
                    code = 1
        except OSError as exc:
            err.write(f"mdvdb: {exc}\n")
            code = 1
        finally:
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
