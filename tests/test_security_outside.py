"""Nothing in a folder reaches outside it (docs/security.md): writes stay inside the root,
credentials follow the user, settings are validated. The real CLI in temp folders; the
permission and ownership cases run as an unprivileged user through util-linux `setpriv`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, run_cli
from tests.fake_embeddings import FakeEmbeddingServer
from tests.json_shapes import call_tool

KEY = "sk-proj-USERKEY-0a1b2c3d4e5f60718293"
NOBODY, STRANGER = 65534, 65533


def one_line_error(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message, message
    for word in words:
        assert word in message, message
    return message


def write_config(root: Path, *lines: str) -> None:
    (root / ".markdownvdb").write_text("\n".join(lines) + "\n")


# -- writes stay inside ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "variable", "escape"),
    [
        ("MDVDB_INDEX_FILE=../x.index", "MDVDB_INDEX_FILE", "x.index"),
        ("MDVDB_STATE_DIR=../y", "MDVDB_STATE_DIR", "y"),
        ("MDVDB_STATE_DIR=/tmp/mdvdb-escape-y", "MDVDB_STATE_DIR", None),
    ],
)
def test_a_folder_config_cannot_put_the_index_or_state_outside(notes, line, variable, escape):
    write_config(notes, line)
    result = run_cli("ingest", "--root", str(notes))
    one_line_error(result, 2, variable, "outside the project root", str(notes / ".markdownvdb"))
    if escape:
        assert not (notes.parent / escape).exists()
    assert not Path("/tmp/mdvdb-escape-y").exists()
    assert not (notes / ".markdownvdb.index").exists()


def test_the_users_environment_may_put_the_index_and_state_elsewhere(notes, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    env = {
        "MDVDB_INDEX_FILE": str(elsewhere / "notes.index"),
        "MDVDB_STATE_DIR": str(elsewhere / "state"),
    }
    result = run_cli("ingest", "--root", str(notes), env=env)
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "notes.index").is_file()
    assert stat.S_IMODE((elsewhere / "state").stat().st_mode) == 0o700
    assert not (notes / ".markdownvdb.index").exists()


def test_a_state_folder_symlink_leaving_the_root_is_refused(notes, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (notes / ".markdownvdb.state").symlink_to(outside)
    result = run_cli("ingest", "--root", str(notes))
    one_line_error(result, 2, "MDVDB_STATE_DIR", "outside the project root")
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_an_index_symlink_is_replaced_never_written_through(notes, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_bytes(b"precious bytes")
    target.chmod(0o600)
    (notes / ".markdownvdb.index").symlink_to(target)
    result = run_cli("ingest", "--root", str(notes))
    assert result.returncode == 0, result.stderr
    assert target.read_bytes() == b"precious bytes"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    index = notes / ".markdownvdb.index"
    assert not index.is_symlink() and index.is_file()
    found = run_cli("search", "extract a tar archive", "--json", "--root", str(notes))
    assert json.loads(found.stdout)["results"][0]["path"] == "tar.md"


# One scan of the state folder refuses any symlink in it (`kernel.private.state_folder`), so
# one name runs in the inner loop: SQLite's -wal, which SQLite itself would open through the
# link; the other two, the same path, are `slow` (CI runs them).
@pytest.mark.parametrize(
    "name",
    [
        "cache.sqlite3-wal",
        pytest.param("writer.json", marks=pytest.mark.slow),
        pytest.param("doit.sqlite3", marks=pytest.mark.slow),
    ],
)
def test_a_symlink_inside_the_state_folder_is_refused(notes, tmp_path, name):
    """A cloned repository can ship `.markdownvdb.state/<file> -> ~/.bashrc`."""
    target = tmp_path / "bashrc"
    target.write_text("export PATH=/usr/bin\n")
    state = notes / ".markdownvdb.state"
    state.mkdir()
    (state / name).symlink_to(target)
    result = run_cli("ingest", "--root", str(notes))
    one_line_error(result, 1, str(state / name), "symlink")
    assert target.read_text() == "export PATH=/usr/bin\n"


# -- as an unprivileged user ----------------------------------------------------------------


def _setpriv(uid: int) -> list[str]:
    """Run as `uid` (no capabilities): needs root to switch and util-linux setpriv."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        pytest.skip("switching user needs a root test run")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot switch user")
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def run_as(uid: int, *args: str, cwd: Path, env: dict | None = None, umask: int = 0o022):
    full_env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    full_env.update({"HOME": str(cwd), "XDG_CONFIG_HOME": str(cwd / ".config"), **(env or {})})
    old = os.umask(umask)
    try:
        return subprocess.run(
            [*_setpriv(uid), sys.executable, "-m", "mdvdb", *args],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        os.umask(old)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder other users can enter (pytest's tmp_path is root's own, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="mdvdb-sec-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _chown_tree(path: Path, uid: int) -> None:
    for dirpath, _dirs, files in os.walk(path):
        os.chown(dirpath, uid, uid)
        for name in files:
            os.chown(os.path.join(dirpath, name), uid, uid)


@pytest.mark.slow
def test_everything_written_is_private_under_umask_022(shared_tmp):
    """As an unprivileged user with umask 022: the index 0600, the state folder 0700 and
    every file in it 0600, and another user cannot read the index."""
    root = shared_tmp / "notes"
    shutil.copytree(FIXTURES / "notes", root)
    _chown_tree(root, NOBODY)
    # The test session's per-user cache is root's (0700): this user cannot read it, and
    # ingest still works (the model's weights are read directly).
    result = run_as(NOBODY, "ingest", "--root", str(root), cwd=root)
    assert result.returncode == 0, result.stderr
    index, state = root / ".markdownvdb.index", root / ".markdownvdb.state"
    assert stat.S_IMODE(index.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for path in state.iterdir():
        assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0, path
    peek = subprocess.run(
        [*_setpriv(STRANGER), "cat", str(index)], capture_output=True, text=True, timeout=30
    )
    assert peek.returncode != 0 and "Permission denied" in peek.stderr


@pytest.mark.slow
def test_another_users_config_is_not_read_until_trusted(shared_tmp):
    """Discovery walks up to the nearest `.markdownvdb`; one owned by another user stops it
    with one line naming the file and how to trust it (git's safe.directory)."""
    parent = shared_tmp / "shared"
    (parent / "mine").mkdir(parents=True)
    write_config(parent, "MDVDB_INDEX_FILE=stolen.index")
    _chown_tree(parent, STRANGER)
    os.chown(parent / "mine", NOBODY, NOBODY)
    parent.chmod(0o755)
    here = parent / "mine"

    result = run_as(NOBODY, "status", "--json", cwd=here)
    message = one_line_error(result, 2, str(parent / ".markdownvdb"), "another user")
    assert f"MDVDB_TRUSTED_FOLDERS={parent}" in message

    trust = {"MDVDB_TRUSTED_FOLDERS": str(parent)}
    trusted = run_as(NOBODY, "status", "--json", cwd=here, env=trust)
    assert trusted.returncode in (0, 4), trusted.stderr  # 4: no index yet
    assert "another user" not in trusted.stderr

    # The same trust from the user's own config file (owned by that user).
    user_config = here / ".config" / "mdvdb" / "config"
    user_config.parent.mkdir(parents=True)
    user_config.write_text(f"MDVDB_TRUSTED_FOLDERS={parent}\n")
    _chown_tree(here / ".config", NOBODY)
    from_file = run_as(NOBODY, "status", "--json", cwd=here)
    assert "another user" not in from_file.stderr, from_file.stderr

    # A root-owned config is trusted (root can replace mdvdb itself).
    os.chown(parent / ".markdownvdb", 0, 0)
    shutil.rmtree(here / ".config")
    root_owned = run_as(NOBODY, "status", "--json", cwd=here)
    assert "another user" not in root_owned.stderr, root_owned.stderr


def test_root_does_not_read_a_users_config(notes):
    """The other direction, without setpriv: root in a folder whose `.markdownvdb` belongs to
    an unprivileged user."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        pytest.skip("needs a root test run to chown")
    write_config(notes, "MDVDB_EMBEDDING_PROVIDER=local")
    os.chown(notes / ".markdownvdb", NOBODY, NOBODY)
    result = run_cli("status", "--root", str(notes), env={"SUDO_UID": ""})
    one_line_error(result, 2, "another user", "MDVDB_TRUSTED_FOLDERS")


# -- credentials follow the user ------------------------------------------------------------


def _remote_env(**extra: str) -> dict[str, str]:
    return {
        "MDVDB_EMBEDDING_TIMEOUT": "5",
        "MDVDB_EMBEDDING_MAX_RETRIES": "0",
        "MDVDB_EMBEDDING_DIMENSIONS": "64",
        **extra,
    }


@pytest.mark.slow
def test_a_folder_url_gets_no_key_from_the_environment(notes):
    with FakeEmbeddingServer(dims=64, api_key=KEY) as server:
        write_config(notes, "MDVDB_EMBEDDING_PROVIDER=openai", f"OPENAI_BASE_URL={server.url}")
        env = _remote_env(OPENAI_API_KEY=KEY)
        result = run_cli("ingest", "--root", str(notes), env=env)
        one_line_error(result, 2, "OPENAI_BASE_URL", "MDVDB_TRUSTED_FOLDERS", str(notes))
        assert KEY not in result.stderr + result.stdout
        assert server.log == []  # not one request: no key, no notes

        # The folder cannot trust itself.
        write_config(
            notes,
            "MDVDB_EMBEDDING_PROVIDER=openai",
            f"OPENAI_BASE_URL={server.url}",
            "MDVDB_TRUSTED_FOLDERS=*",
        )
        again = run_cli("ingest", "--root", str(notes), env=env)
        one_line_error(again, 2, "OPENAI_BASE_URL")
        assert server.log == []

        # The user trusts it explicitly: the key goes there.
        trusted = run_cli(
            "ingest", "--root", str(notes), env={**env, "MDVDB_TRUSTED_FOLDERS": str(notes)}
        )
        assert trusted.returncode == 0, trusted.stderr
        assert server.log and all(r.authorization == f"Bearer {KEY}" for r in server.log)


def test_a_url_from_the_environment_gets_the_key(notes):
    with FakeEmbeddingServer(dims=64, api_key=KEY) as server:
        write_config(notes, "MDVDB_EMBEDDING_PROVIDER=openai")
        env = _remote_env(OPENAI_API_KEY=KEY, OPENAI_BASE_URL=server.url)
        result = run_cli("ingest", "--root", str(notes), env=env)
        assert result.returncode == 0, result.stderr
        assert server.log and all(r.authorization == f"Bearer {KEY}" for r in server.log)


@pytest.mark.slow
def test_a_custom_endpoint_from_the_folder_gets_only_the_folders_key(notes):
    with FakeEmbeddingServer(dims=64) as server:
        lines = ("MDVDB_EMBEDDING_PROVIDER=custom", f"MDVDB_EMBEDDING_ENDPOINT={server.url}")
        write_config(notes, *lines)
        env = _remote_env(MDVDB_EMBEDDING_API_KEY=KEY)
        refused = run_cli("ingest", "--root", str(notes), env=env)
        one_line_error(refused, 2, "MDVDB_EMBEDDING_ENDPOINT", "MDVDB_EMBEDDING_API_KEY")
        assert server.log == []

        # The folder's own key (not the user's) may go to the folder's own URL.
        write_config(notes, *lines, "MDVDB_EMBEDDING_API_KEY=folder-key")
        result = run_cli("ingest", "--root", str(notes), env=_remote_env())
        assert result.returncode == 0, result.stderr
        assert server.log and all(r.authorization == "Bearer folder-key" for r in server.log)
        assert not any(KEY in (r.authorization or "") for r in server.log)


# -- settings validated ---------------------------------------------------------------------


NOT_NUMBERS = [
    ("MDVDB_SEARCH_MIN_SCORE", "nan"),
    ("MDVDB_SERVE_IDLE_TIMEOUT", "inf"),
    ("MDVDB_SERVE_IDLE_TIMEOUT", "nan"),
    ("MDVDB_SERVE_IDLE_TIMEOUT", "-1"),
    ("MDVDB_EMBEDDING_TIMEOUT", "nan"),
    ("MDVDB_EMBEDDING_RETRY_DELAY", "inf"),
    ("MDVDB_GOVERN_WEIGHTS", "high=nan"),
]


def test_every_non_finite_or_negative_number_is_refused_by_the_config(tmp_path):
    """Every case below, where all commands read their settings (the inner loop's cover for
    the end-to-end cases that are `slow`)."""
    from kernel.config import ConfigError, load_config

    for variable, value in NOT_NUMBERS:
        with pytest.raises(ConfigError, match=variable):
            load_config(tmp_path, environ={variable: value})


# Three `mdvdb` processes per case (0.7 CPU-s): one case runs in the inner loop, the others
# in CI; the test above checks every value in-process.
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        case
        if case == ("MDVDB_SERVE_IDLE_TIMEOUT", "-1")
        else pytest.param(*case, marks=pytest.mark.slow)
        for case in NOT_NUMBERS
    ],
)
def test_non_finite_and_negative_numbers_are_one_line_usage_errors(notes, variable, value):
    for args in (("search", "tar"), ("status",), ("serve", "--idle-timeout", "1")):
        result = run_cli(*args, "--root", str(notes), env={variable: value, "MDVDB_NO_WARM": "1"})
        one_line_error(result, 2, variable)


# Every command refuses it (from the environment); from the folder's file, the writer does
# (the same check of the loaded settings, `kernel.config`, which names the origin).
@pytest.mark.parametrize(
    ("origin", "commands"),
    [("environment", [("ingest",), ("status",), ("search", "tar")]), ("file", [("ingest",)])],
    ids=["environment", "file"],
)
def test_a_state_dir_that_is_a_file_is_a_usage_error(notes, origin, commands):
    from kernel.config import ConfigError, load_config

    (notes / "state-file").write_text("not a folder\n")
    env = {}
    if origin == "environment":
        env["MDVDB_STATE_DIR"] = str(notes / "state-file")
    else:
        write_config(notes, "MDVDB_STATE_DIR=state-file")
    for args in commands:
        result = run_cli(*args, "--root", str(notes), env=env)
        one_line_error(result, 2, "MDVDB_STATE_DIR", "not a folder")
        assert f"(from {'the environment' if env else notes / '.markdownvdb'})" in result.stderr
    with pytest.raises(ConfigError, match="MDVDB_STATE_DIR .*not a folder"):
        load_config(notes, environ={**os.environ, **env})
    assert (notes / "state-file").read_text() == "not a folder\n"


@pytest.mark.slow
def test_source_dirs_matching_nothing_never_replace_a_non_empty_index(notes):
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    index = notes / ".markdownvdb.index"
    before = index.read_bytes()
    for env in ({"MDVDB_SOURCE_DIRS": "dcos"}, {"MDVDB_SOURCE_DIRS": "guides/nothing-here,typo"}):
        result = run_cli("ingest", "--root", str(notes), env=env)
        one_line_error(result, 1, "MDVDB_SOURCE_DIRS", "matches no Markdown file")
        assert index.read_bytes() == before
    # Also with the caches gone (the index alone says it has files).
    shutil.rmtree(notes / ".markdownvdb.state")
    result = run_cli("ingest", "--full", "--root", str(notes), env={"MDVDB_SOURCE_DIRS": "dcos"})
    one_line_error(result, 1, "dcos")
    assert index.read_bytes() == before


# -- MCP over HTTP needs a bearer token; tool arguments are capped --------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_http(root: Path, *extra: str) -> tuple[subprocess.Popen, int, str]:
    """`mdvdb mcp --http PORT`; returns once it listens, with the first line it printed."""
    import socket
    import time

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "mcp", "--http", str(port), "--root", str(root), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    banner = server.stderr.readline()
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, banner + server.stderr.read()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port, banner
        except OSError:
            assert time.monotonic() < deadline, "mdvdb mcp --http never listened"
            time.sleep(0.2)


async def _mcp_http(port: int, token: str | None, steps):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers) as client,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (r, w),
        ClientSession(r, w) as session,
    ):
        await session.initialize()
        return await steps(session)


def _leaf_names(error: BaseException) -> set[str]:
    inner = getattr(error, "exceptions", None)
    if not inner:
        return {type(error).__name__}
    return set().union(*(_leaf_names(e) for e in inner))


@pytest.mark.slow
def test_mcp_http_needs_the_bearer_token(notes):
    import asyncio

    import httpx

    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    server, port, banner = _start_http(notes)
    try:
        token_path = notes / ".markdownvdb.state" / "mcp-http.token"
        token = token_path.read_text().strip()
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600 and len(token) >= 32
        assert f"Bearer {token}" in banner and str(token_path) in banner  # printed once

        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        for headers in ({}, {"Authorization": "Bearer wrong-token-0000000000"}):
            raw = httpx.post(url, json=hello, headers=headers, timeout=10)
            assert raw.status_code == 401
            assert raw.headers["www-authenticate"].startswith("Bearer")

        async def search(session):
            return await call_tool(session, "search", {"query": "extract a tar archive"})

        for wrong in (None, "not-the-token-123456"):  # the SDK client is refused, not timed out
            with pytest.raises(BaseExceptionGroup) as refused:
                asyncio.run(asyncio.wait_for(_mcp_http(port, wrong, search), 30))
            assert "MCPError" in _leaf_names(refused.value)

        found = asyncio.run(_mcp_http(port, token, search))
        assert not found.is_error
        assert found.structured_content["results"][0]["path"] == "tar.md"

        async def oversized(session):
            return [
                await call_tool(session, "search", {"query": "q" * 100_000}),
                await call_tool(session, "search", {"query": "tar", "limit": 2**63}),
                await call_tool(session, "grep", {"pattern": "p" * 20_000}),
                await call_tool(session, "grep", {"pattern": "tar", "limit": 2**63}),
                await call_tool(session, "grep", {"pattern": "tar", "per_file_limit": 10**9}),
                await call_tool(session, "clusters", {"limit": 2**40}),
            ]

        answers = asyncio.run(_mcp_http(port, token, oversized))
        texts = [a.content[0].text for a in answers]
        assert all(a.is_error for a in answers), texts
        assert "query is 100000 characters; the cap is 2000" in texts[0]
        assert "limit must be between 1 and 1000" in texts[1]
        assert "pattern is 20000 characters; the cap is 1000" in texts[2]
        assert "per_file_limit must be between 1 and 1000" in texts[4]
    finally:
        server.terminate()
        server.wait(timeout=30)

    # A restart keeps the token, so a client's configuration stays valid.
    server, port, banner = _start_http(notes)
    try:
        assert f"Bearer {token}" in banner
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_mcp_http_token_file(notes, tmp_path):
    import asyncio

    token_file = tmp_path / "token"
    token_file.write_text("my-own-token-0123456789abcdef\n")
    token_file.chmod(0o644)
    loose = run_cli("mcp", "--http", str(_free_port()), "--token-file", str(token_file))
    one_line_error(loose, 2, "--token-file", "chmod 600")
    token_file.chmod(0o600)
    server, port, banner = _start_http(notes, "--token-file", str(token_file))
    try:
        assert str(token_file) in banner

        async def status(session):
            return await call_tool(session, "status", {})

        answer = asyncio.run(_mcp_http(port, "my-own-token-0123456789abcdef", status))
        assert not answer.is_error
        assert not (notes / ".markdownvdb.state" / "mcp-http.token").exists()
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_mcp_stdio_refuses_a_5_mb_query_and_a_2_mb_pattern(notes):
    """The issue's own sizes, over stdio (no HTTP body limit in front of the tools)."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(notes)]
    )

    async def run():
        async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            return [
                await call_tool(session, "search", {"query": "q" * 5_000_000}),
                await call_tool(session, "grep", {"pattern": "p" * 2_000_000}),
                await call_tool(session, "search", {"query": "tar", "limit": 2**63}),
                await call_tool(session, "search", {"query": "tar", "filters": ["a=b"] * 51}),
            ]

    answers = asyncio.run(run())
    texts = [a.content[0].text for a in answers]
    assert all(a.is_error for a in answers), texts
    assert "the cap is 2000" in texts[0] and "the cap is 1000" in texts[1]
    assert "between 1 and 1000" in texts[2] and "51 filters" in texts[3]


# -- control characters escaped in human output ---------------------------------------------

TITLE_ATTACK = "\x1b]0;pwned\x07"  # sets the terminal's title
CLEAR = "\x1b[2J"
BIDI = "\u202e"


@pytest.mark.slow
def test_control_characters_from_the_folder_are_escaped_in_human_output(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    name = f"evil{CLEAR}name.md"
    (root / name).write_text(
        f"---\ntitle: Evil {TITLE_ATTACK} title\nowner: x{CLEAR}y\n---\n"
        f"# Heading {CLEAR} zebra\n\nThe zebra crossing {TITLE_ATTACK} text {BIDI}gnp.exe\n"
        "tab\tand CRLF line\r\n"
    )
    (root / "plain.md").write_text("# Plain\n\nnothing about animals here\n")
    done = run_cli("ingest", "--root", str(root))
    assert done.returncode == 0, done.stderr
    outputs = {
        "search": run_cli("search", "zebra crossing", "--root", str(root)),
        "search --files": run_cli("search", "zebra crossing", "--files", "--root", str(root)),
        "grep": run_cli("grep", "zebra", "--color", "never", "--root", str(root)),
        "grep --color": run_cli("grep", "zebra", "--color", "always", "--root", str(root)),
        "get": run_cli("get", name, "--root", str(root)),
    }
    for what, result in outputs.items():
        assert result.returncode == 0, (what, result.stderr)
        out = result.stdout
        assert "zebra" in out or what == "search --files", (what, out)
        if what == "grep --color":  # only mdvdb's own colour codes: ESC [ digits ; m
            import re

            out = re.sub(r"\x1b\[[0-9;]*m", "", out)
        assert "\x1b" not in out and "\x07" not in out and BIDI not in out, (what, out)
        assert "\\x1b" in out, (what, out)  # visible, not dropped
    assert "\\x1b[2J" in outputs["search --files"].stdout  # the name, escaped
    assert "\\u202e" in outputs["get"].stdout
    assert "tab\tand CRLF line\n" in outputs["get"].stdout  # ordinary text untouched
    # JSON keeps the exact text (its encoder escapes control characters itself).
    as_json = run_cli("search", "zebra crossing", "--json", "--root", str(root))
    assert json.loads(as_json.stdout)["results"][0]["path"] == name


def test_a_trusted_folder_config_may_put_the_state_elsewhere(notes, tmp_path):
    elsewhere = tmp_path / "state-elsewhere"
    write_config(notes, f"MDVDB_STATE_DIR={elsewhere}")
    env = {"MDVDB_TRUSTED_FOLDERS": f"/nonexistent{os.pathsep}{notes}"}
    result = run_cli("ingest", "--root", str(notes), env=env)
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "cache.sqlite3").is_file()


def test_printable_keeps_ordinary_text_and_line_ends():
    """The helper behind every print point: CRLF and tabs survive in contents, names stay on
    one line, 8-bit CSI and bidi isolates are escaped."""
    from kernel.terminal import printable

    assert printable("a\tb\r\nc\n") == "a\tb\r\nc\n"
    assert printable("over\rwrite") == "over\\x0dwrite"
    assert printable("name\nwith\tbreaks", one_line=True) == "name\\x0awith\\x09breaks"
    assert printable("\x9b2J \u2067x\u2069 é 日本") == "\\x9b2J \\u2067x\\u2069 é 日本"


@pytest.mark.slow
def test_a_non_finite_min_score_flag_is_a_usage_error(notes):
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    for value in ("nan", "inf", "-inf"):
        for args in (("--min-score", value), (f"--min-score={value}", "--json")):
            result = run_cli("search", "tar", *args, "--root", str(notes))
            one_line_error(result, 2, "--min-score: expected a finite number")
