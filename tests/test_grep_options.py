"""`mdvdb grep` parses its arguments with the hand parser; its typer command (the `--help`) is
built from the same declaration (`query.grep.options`), and the two must agree.

Every argument list is run both ways in this process, through the hand parser
(`mdvdb.cli.grep.fast_main`) and through the typer command, and the two must print the same
bytes and exit with the same code. Usage errors are one line from the hand parser, exit 2.
"""

from __future__ import annotations

import importlib
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import typer.main

from mdvdb.cli import COMMAND_MODULES
from mdvdb.cli import grep as fast
from mdvdb.cli.app import app
from query.grep.options import GREP_OPTIONS
from tests.conftest import run_cli, typer_invoke


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grep-options")
    (root / ".markdownvdb").write_text("MDVDB_SOURCE_DIRS=docs,notes\n")
    for rel, text in {
        "docs/a.md": "# Alpha\n\nneedle one\nuse rm --force with care\n",
        "docs/b.qmd": "# Quarto\n\nneedle in quarto\n",
        "notes/c.md": "---\ntitle: C\nkey: needle up top\n---\n# C\n\nNeedle two\nneedle three\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _typer(argv: list[str]) -> tuple[int, str, str]:
    return typer_invoke(["grep", *argv])


def _fast(argv: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = fast.fast_main(argv)
    return code, out.getvalue(), err.getvalue()


ANSWERED = [
    ["needle"],
    ["needle", "--json", "--sort"],
    ["needle", "-n", "1"],
    ["needle", "-n1", "--json"],
    ["needle", "--limit=2", "--sort"],
    ["needle", "-n", "2", "-n", "5", "--sort"],  # the last value wins, as typer's
    ["needle", "--per-file-limit", "1", "--json", "--sort"],
    ["needle", "--type", "qmd", "--json"],
    ["needle", "--type=all", "--sort"],
    ["needle", "--source", "dir:docs", "--json"],
    ["needle", "--source", "dir:docs", "--source", "dir:notes", "--sort"],
    ["needle", "--exclude", "notes", "--json"],
    ["needle", "--include-frontmatter", "--json", "--sort"],
    ["needle", "--exclude-blacklisted", "--sort"],
    ["-e", "--force", "--json"],
    ["--regexp=--force"],
    ["--json", "--", "--force"],
    ["need.e", "--regex", "--sort", "--color", "never"],
    ["needle", "--color=always", "--sort"],
    ["zzz-nothing-here"],
    ["needle", "--trace", "--json"],
    ["needle", "-e", "again"],  # twice: one line, exit 2, from run_grep
    [],  # no pattern: one line, exit 2, from run_grep
]

REFUSED = [
    ["needle", "-n", "0"],
    ["needle", "--limit", "x"],
    ["needle", "--per-file-limit", "-3"],
    ["needle", "--bogus"],
    ["needle", "--json=yes"],
    ["one", "two"],
    ["needle", "--type", "txt"],
    ["needle", "--color", "sometimes"],
    ["needle", "--source"],
    ["needle", "-e"],
]


@pytest.mark.parametrize("argv", ANSWERED, ids=lambda a: " ".join(a) or "(none)")
def test_hand_parser_prints_what_typer_prints(project: Path, argv: list[str]) -> None:
    # --sort: rg's threads stream matches of several files in any order
    argv = ["--root", str(project), "--sort", *argv]
    code, out, err = _fast(argv)
    assert code is not None, "the hand parser should answer this one"
    assert (code, out, err) == _typer(argv)
    assert out or err


@pytest.mark.parametrize("argv", REFUSED, ids=" ".join)
def test_usage_errors_are_one_line_exit_2_on_both_paths(project: Path, argv: list[str]) -> None:
    argv = ["--root", str(project), *argv]
    code, out, err = _fast(argv)
    assert (code, out) == (2, "")
    assert err.startswith("mdvdb grep: ") and err.count("\n") == 1 and "--help" in err
    assert _typer(argv)[0] == 2


def test_hand_parser_knows_every_option_of_the_typer_command() -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(app)
    command = typer.main.get_command(app).commands["grep"]  # type: ignore[attr-defined]
    declared = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    declared -= {"pattern", "-h", "--help"}
    parser = fast.PARSER
    assert set(parser.flags) | set(parser.valued) | set(parser.repeated) == declared
    params = {param.name: param for param in command.params}
    for option in GREP_OPTIONS:  # the same defaults and bounds on both
        param = params[option.dest]
        default = param.default.value if hasattr(param.default, "value") else param.default
        expected = None if option.spec.repeat else option.default
        assert default == expected, option.name
        if option.spec.minimum is not None:
            assert param.min == option.spec.minimum


def test_help_is_typers_from_the_declaration(project: Path) -> None:
    for flag in ("--help", "-h"):
        assert _fast([flag])[0] is None  # the hand parser leaves --help to typer
        done = run_cli("grep", flag)
        assert done.returncode == 0, done.stderr
        assert "mdvdb grep [OPTIONS] [pattern]" in done.stdout
        for option in GREP_OPTIONS:
            for spelling in option.spec.flags:
                assert spelling in done.stdout
            assert option.spec.help.split()[0] in done.stdout
    # A pattern that looks like --help after `--` is searched for.
    assert _fast(["--root", str(project), "--", "--help"])[0] == 0
