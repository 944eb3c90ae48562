"""The one argument parser (`mdvdb.cli.parser`) as users and agents meet it: the forms each
command takes, the usage errors (one line, exit 2), and `--help` printed by typer from the
same declaration. Argument lists run through `mdvdb.cli.run`, the function the `mdvdb`
process and the warm server both call; a few through the real process."""

from __future__ import annotations

import io
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from mdvdb.cli import COMMANDS, command, run
from mdvdb.cli.parser import UsageError, parse
from tests.conftest import run_cli

OVERLAY = "fields:\n  category:\n    type: string\n    allowed: [tools]\n    required: true\n"


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run(argv)
    return code, out.getvalue(), err.getvalue()


def fields(name: str, argv: list[str]) -> dict:
    return parse(command(name), argv)


def has(found: dict, **expected) -> bool:
    return {key: found[key] for key in expected} == expected


# -- the forms ------------------------------------------------------------------------------


def test_search_reads_the_usual_forms():
    found = fields("search", ["archive", "-n1", "--json"])
    assert has(found, query="archive", limit=1, as_json=True)
    assert fields("search", ["--limit=2", "archive", "--files"])["limit"] == 2
    assert fields("search", ["archive", "-n", "2", "-n", "3"])["limit"] == 3  # the last wins
    assert fields("search", ["archive", "--no-govern", "--govern"])["govern"] is True
    assert fields("search", ["archive", "--min-score", "-1"])["min_score"] == -1.0
    assert fields("search", ["--", "-v flags"])["query"] == "-v flags"
    two = fields("search", ["--filter", "status=draft", "--filter", "tags=a", "--tag=git"])
    assert two["filters"] == ["status=draft", "tags=a"] and two["tag"] == "git"
    plain = fields("search", ["q"])
    assert plain["collapse"] is True and plain["filters"] == [] and plain["root"] is None
    assert has(fields("search", ["q", "--no-collapse", "--root", "r"]), collapse=False, root="r")


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["archive", "-n", "0"], "at least 1"),
        (["archive", "-n", "x"], "whole number"),
        (["archive", "--limit", "2.5"], "whole number"),
        (["archive", "--bogus"], "no such option: --bogus"),
        (["archive", "--json=yes"], "takes no value"),
        (["one", "two"], "unexpected argument: two"),
        (["--tag", "a", "--tag", "b"], "given 2 times"),
        (["archive", "--mode", "fuzzy"], "not one of"),
        (["archive", "--min-score"], "needs a value"),
        (["archive", "--per-file", "-1"], "0 (no cap) or more"),
        (["archive", "--mode"], "needs a value"),
        (["-v flags"], "no such option"),
    ],
)
def test_search_refuses_with_the_reason(argv: list[str], problem: str):
    with pytest.raises(UsageError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        fields("search", argv)


def test_the_other_commands_read_their_forms():
    ingest = fields("ingest", ["--root=r", "a.md", "b.md"])
    assert ingest["paths"] == ["a.md", "b.md"] and ingest["root"] == "r"
    ingest = fields("ingest", ["--root", "r", "-q", "--", "--full"])
    assert ingest["quiet"] is True and ingest["full"] is False and ingest["paths"] == ["--full"]
    assert fields("ingest", ["--executor=ray:auto"])["executor"] == "ray:auto"
    assert fields("get", ["--", "-a.md"])["targets"] == ["-a.md"]
    assert fields("get", ["-"])["targets"] == ["-"]
    assert has(fields("schema", ["category", "--check"]), field="category", check=True)
    assert has(fields("serve", ["--status", "--json"]), show_status=True, as_json=True)
    assert fields("serve", ["--idle-timeout", "0.5"])["idle_timeout"] == 0.5
    assert fields("mcp", ["--http", "8765"])["http"] == 8765
    assert fields("watch", ["--debounce-ms=0"])["debounce_ms"] == 0
    grep = fields("grep", ["-e", "--force", "--json"])
    assert grep["regexp"] == "--force" and grep["pattern"] is None
    assert fields("grep", ["--regexp=--force"])["regexp"] == "--force"
    assert fields("grep", ["--json", "--", "--force"])["pattern"] == "--force"
    assert fields("grep", ["needle", "-n", "2", "-n", "5"])["limit"] == 5
    assert fields("grep", ["x", "--source", "dir:a", "--source", "dir:b"])["source"] == [
        "dir:a",
        "dir:b",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "extra"],
        ["status", "--bogus"],
        ["status", "--json=yes"],
        ["get"],
        ["get", "a.md", "--offset", "-1"],
        ["links"],
        ["backlinks", "a.md", "b.md"],
        ["orphans", "x"],
        ["schema", "a", "b"],
        ["schema", "--check=1"],
        ["clusters", "--plot"],
        ["clusters", "x"],
        ["serve", "--idle-timeout", "0"],
        ["mcp", "--json"],
        ["mcp", "--http", "70000"],
        ["watch", "--debounce-ms", "-1"],
        ["grep", "needle", "-n", "0"],
        ["grep", "needle", "--per-file-limit", "-3"],
        ["grep", "needle", "--type", "txt"],
        ["grep", "needle", "--color", "sometimes"],
        ["grep", "needle", "--source"],
        ["grep", "needle", "-e"],
        ["ingest", "--root"],
    ],
    ids=" ".join,
)
def test_a_usage_error_is_one_line_and_exit_2(argv: list[str]):
    code, out, err = _run(argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"mdvdb {argv[0]}: ") and err.count("\n") == 1
    assert f"mdvdb {argv[0]} --help" in err


def test_the_real_process_words_usage_errors_the_same(tmp_path: Path):
    done = run_cli("search", "x", "--bogus-flag", "--root", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "mdvdb search: no such option: --bogus-flag (see `mdvdb search --help`)\n"
    for argv in (["bogus"], ["--bogus"]):
        code, out, err = _run(argv)
        assert code == 2 and err.startswith("mdvdb: no such ") and err.count("\n") == 1


# -- --help: typer's, from the declaration --------------------------------------------------


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_lists_every_declared_option(name: str):
    chosen = command(name)
    code, out, err = _run([name, chosen.help_flags[-1]])
    assert code == 0, err
    assert out.startswith(f"Usage: mdvdb {name} [OPTIONS]")
    assert chosen.help.split(".")[0] in " ".join(out.split())
    for option in chosen.every_option:
        for spelling in option.spec.flags:
            assert spelling in out, (name, spelling)
        assert option.spec.help.split()[0] in out, (name, option.name)


def test_help_wins_over_other_arguments_but_not_after_dashes(tmp_path: Path):
    assert _run(["search", "q", "--bogus", "--help"])[1].startswith("Usage: mdvdb search")
    assert _run(["grep", "-h"])[1].startswith("Usage: mdvdb grep")
    assert _run(["search", "-h"])[0] == 2  # only grep spells it -h
    code, _, _ = _run(["grep", "--root", str(tmp_path), "--", "--help"])  # a pattern
    assert code == 0


def test_mdvdb_alone_and_help_list_every_command():
    whole = run_cli("--help")
    assert whole.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in whole.stdout
    bare = run_cli()  # typer's answer: the help, on stderr, exit 2
    assert bare.returncode == 2 and bare.stderr == whole.stdout


# -- every form answers through the same run ------------------------------------------------


@pytest.fixture(scope="module")
def project(_indexed_notes_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The indexed notes, plus a page the index does not have yet (status lists it) and a
    schema overlay the pages break (schema --check lists them)."""
    root = tmp_path_factory.mktemp("parser") / "notes"
    shutil.copytree(_indexed_notes_once, root, symlinks=True)
    (root / "new.md").write_text("# New\n\nNot indexed yet.\n")
    (root / ".markdownvdb.schema.yml").write_text(OVERLAY)
    return root


ANSWERED = [
    (["status"], 0),  # new.md is not indexed yet: listed as stale
    (["status", "--json"], 0),
    (["status", "--check"], 3),  # stale: only the exit code
    (["status", "--verify", "--json"], 0),
    (["get", "tar.md"], 0),
    (["get", "tar.md", "--json"], 0),
    (["get", "--", "guides/cooking.md"], 0),
    (["get", "nope.md"], 1),  # not in the index
    (["schema"], 0),
    (["schema", "category", "--json"], 0),
    (["schema", "nope"], 2),  # no such field
    (["schema", "--check"], 0),  # the overlay is not merged before the next ingest
    (["clusters", "--json"], 0),
    (["clusters", "--plot", "PROJECT/map.svg"], 0),
    (["clusters", "--plot=PROJECT/map.html", "--json"], 0),
    (["clusters", "--plot", "PROJECT/map.png"], 2),  # not a map format
    (["serve", "--status"], 1),  # none runs
    (["serve", "--status", "--stop"], 2),
    (["search", "tar archive", "-n1", "--json"], 0),
    (["search", "tar", "--mode=lexical", "--explain"], 0),
    (["search", "--tag", "nothing"], 0),
    (["search", "tar", "--filter", "rating>="], 2),  # a bad filter
    (["search"], 2),  # no query and no filter
    (["grep", "tar", "--json"], 0),
    (["grep", "tar", "--type=all", "--sort", "--color", "never"], 0),
    (["grep", "ta.", "--regex", "--include-frontmatter", "--json"], 0),
    (["grep", "tar", "--exclude", "guides", "--per-file-limit", "1", "--trace"], 0),
    (["grep", "zzz-nothing-here"], 0),
    (["grep", "tar", "-e", "again"], 2),  # two patterns
    (["grep"], 2),  # no pattern
]


@pytest.mark.parametrize(("argv", "expected"), ANSWERED, ids=[" ".join(a) for a, _ in ANSWERED])
def test_every_form_answers_with_its_exit_code(project: Path, argv: list[str], expected: int):
    argv = [a.replace("PROJECT", str(project)) for a in argv]
    code, out, err = _run([argv[0], "--root", str(project), *argv[1:]])
    assert code == expected, (out, err)
    assert out or err or argv[1:] == ["--check"]
    if code == 2:
        assert err.splitlines()[-1].startswith("mdvdb") and "Traceback" not in err
