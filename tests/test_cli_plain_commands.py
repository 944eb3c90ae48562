"""`mdvdb status`, `get`, `schema`, `clusters` and `serve --status/--stop` read their own arguments
(`mdvdb.cli.plain_args`); typer must never notice.

Every argument list is run both ways in this process, through the command's `fast_main` and
through its typer command, and the two must print the same bytes and exit with the same code.
Lists the plain parser is not sure of (`--help`, unknown or repeated options, a missing or
extra argument) must go to typer. The real command is also run once to check that it answers
without importing typer or pydantic.
"""

from __future__ import annotations

import importlib
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from mdvdb.cli import FAST_COMMANDS, ONE_SHOT
from mdvdb.cli.plain_args import parse
from tests.conftest import run_cli, typer_invoke

OVERLAY = "fields:\n  category:\n    type: string\n    allowed: [tools]\n    required: true\n"


@pytest.fixture(scope="module")
def project(_indexed_notes_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The indexed notes, plus a page the index does not have yet (status lists it) and a
    schema overlay the pages break (schema --check lists them)."""
    import shutil

    root = tmp_path_factory.mktemp("plain") / "notes"
    shutil.copytree(_indexed_notes_once, root, symlinks=True)
    (root / "new.md").write_text("# New\n\nNot indexed yet.\n")
    (root / ".markdownvdb.schema.yml").write_text(OVERLAY)
    return root


def _typer(argv: list[str]) -> tuple[int, str, str]:
    return typer_invoke(argv)


def _fast(argv: list[str], one_shot: bool = False) -> tuple[int | None, str, str]:
    """`one_shot`: as `mdvdb.cli.main` calls a `ONE_SHOT` command (the index mapped without
    pyarrow)."""
    fast = importlib.import_module(FAST_COMMANDS[argv[0]])
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = fast.fast_main(argv[1:], one_shot=True) if one_shot else fast.fast_main(argv[1:])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


ANSWERED = [
    ["status"],
    ["status", "--json"],
    ["status", "--check"],
    ["status", "--check", "--json"],
    ["status", "--verify"],
    ["status", "--verify", "--json"],
    ["get", "tar.md"],
    ["get", "tar.md", "--json"],
    ["get", "--", "guides/cooking.md"],
    ["get", "nope.md"],  # not in the index: one line, exit 1
    ["schema"],
    ["schema", "--json"],
    ["schema", "category"],
    ["schema", "category", "--json"],
    ["schema", "nope"],  # unknown field: exit 2
    ["schema", "--check"],
    ["schema", "--check", "--json"],
    ["clusters"],
    ["clusters", "--json"],
    ["clusters", "--plot", "PROJECT/map.svg"],
    ["clusters", "--plot=PROJECT/map.html", "--json"],
    ["clusters", "--plot", "PROJECT/map.png"],  # not a map format: exit 2
    ["serve", "--status"],  # none runs: exit 1
    ["serve", "--status", "--json"],
    ["serve", "--stop"],
]

DECLINED = [
    ["status", "--help"],
    ["status", "--check", "--check"],
    ["status", "extra"],
    ["status", "--bogus"],
    ["status", "--json=yes"],
    ["get"],
    ["get", "a.md", "b.md"],
    ["get", "--help"],
    ["schema", "a", "b"],
    ["schema", "-h"],
    ["schema", "--check=1"],
    ["serve"],  # starting a server is typer's
    ["serve", "--status", "--stop"],
    ["serve", "--status", "--idle-timeout", "5"],
    ["serve", "--background"],
    ["clusters", "--plot"],
    ["clusters", "x"],
    ["clusters", "--help"],
    ["mcp", "--http", "8765"],
    ["mcp", "--json"],
    ["mcp", "--help"],
]


@pytest.mark.parametrize("argv", ANSWERED, ids=" ".join)
def test_plain_path_prints_what_typer_prints(project: Path, argv: list[str]) -> None:
    argv = [
        argv[0],
        "--root",
        str(project),
        *(a.replace("PROJECT", str(project)) for a in argv[1:]),
    ]
    code, out, err = _fast(argv)
    assert code is not None, "the plain parser should answer this one"
    assert (code, out, err) == _typer(argv)
    if argv[0] in ONE_SHOT:
        assert _fast(argv, one_shot=True) == (code, out, err)
    assert out or err or argv[1:] == ["--root", str(project), "--check"]


@pytest.mark.parametrize("argv", DECLINED, ids=" ".join)
def test_plain_path_leaves_what_it_is_unsure_of_to_typer(project: Path, argv: list[str]) -> None:
    argv = [argv[0], "--root", str(project), *argv[1:]]
    code, _, _ = _fast(argv)
    assert code is None


def test_parse_reads_the_usual_forms() -> None:
    flags = {"--check": "check"}
    assert parse(["--check", "--root=x", "--json"], flags) == {
        "check": True,
        "root": "x",
        "as_json": True,
    }
    assert parse(["a.md", "--root", "x"], {}, positional="path") == {"path": "a.md", "root": "x"}
    assert parse(["--", "-a.md"], {}, positional="path") == {"path": "-a.md"}
    assert parse(["-"], {}, positional="path") == {"path": "-"}
    assert parse(["--root"], {}) is None  # a missing value
    assert parse(["--root", "a", "--root", "b"], {}) is None
    assert parse(["--", "a", "b"], {}, positional="path") is None


def test_status_answers_without_typer(project: Path) -> None:
    """The real `mdvdb status` and `mdvdb get`: `-X importtime` lists what they loaded."""
    for argv in (["status"], ["get", "tar.md"], ["schema"], ["clusters"]):
        done = run_cli(*argv, "--root", str(project), env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert done.returncode == 0, done.stderr
        loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
        assert "kernel.config" in loaded  # the log is there
        assert not {m for m in loaded if m.split(".")[0] in ("typer", "click", "pydantic")}
        if argv[0] in ("status", "get"):  # the schema's and clusters' tables: with pyarrow
            assert not {m for m in loaded if m.startswith("pyarrow")}, argv


@pytest.mark.slow  # without typer: also in tests/test_agents_mcp.py's one session
def test_mcp_over_stdio_starts_without_typer(project: Path) -> None:
    """`mdvdb mcp --root DIR` (how clients start it) serves stdio without importing typer; at
    the end of its input it exits 0."""
    done = run_cli("mcp", "--root", str(project), input="", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "mdvdb.mcp_server" in loaded
    assert not {m for m in loaded if m.split(".")[0] == "typer"}  # (the SDK imports click)
