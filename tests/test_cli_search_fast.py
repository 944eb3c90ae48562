"""`mdvdb search` parses its own arguments on the hot path; typer must never notice.

Every argument list is run both ways in this process, through the hand parser
(`mdvdb.cli.search.fast_main`) and through the typer command, and the two must print the same bytes
and exit with the same code. Lists the hand parser is not sure of must go to typer.
"""

from __future__ import annotations

import importlib
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import typer.main
from typer.testing import CliRunner

from kernel.config import load_config
from mdvdb.cli import COMMAND_MODULES
from mdvdb.cli import search as fast
from mdvdb.cli.app import app
from query import open_index
from query.rank.titles import _lowered, query_words, title_files
from tests.conftest import build_index, run_cli

PAGES = {
    "tools/tar.md": "---\ntitle: Tar archives\ntags: [archive, cli]\nstatus: draft\n---\n"
    "# Tar archives\n\nExtract a tar archive with `tar xf file.tar`.\n\n"
    "## Create\n\nCreate one with `tar cf out.tar folder/`.\n",
    "tools/zip.md": "---\ntitle: Zip files\ntags: [archive]\nstatus: published\n---\n"
    "# Zip files\n\nUnpack a zip file with `unzip file.zip`.\n",
    "vcs/git.md": "---\ntitle: Undo a commit\ntags: [git]\nstatus: published\nrating: 4\n---\n"
    "# Undo a commit\n\nUse `git reset HEAD~1` to undo the last commit and keep the changes.\n",
    "vcs/-dash.md": "# -v flags\n\nA page whose title starts with a dash: -v is verbose.\n",
    "cook/soup.md": "# Soup\n\nBoil the stock, add the vegetables, simmer for an hour.\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fast")
    for rel, text in PAGES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return build_index(root)


def _typer(argv: list[str]) -> tuple[int, str, str]:
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(app)
    result = CliRunner().invoke(app, ["search", *argv])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _fast(argv: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = fast.fast_main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


ANSWERED = [
    ["undo the last commit"],
    ["undo the last commit", "--json"],
    ["archive", "-n", "1"],
    ["archive", "-n1", "--json"],
    ["archive", "--limit=2", "--files"],
    ["archive", "--files", "--json"],
    ["tar archive", "--mode", "lexical", "--explain"],
    ["tar archive", "--mode=semantic", "--json", "--explain"],
    ["archive", "--min-score", "0.2"],
    ["archive", "--min-score", "-1"],
    ["archive", "--max-tokens", "8"],
    ["archive", "--no-govern"],
    ["archive", "--json", "--json"],
    ["--tag", "archive"],
    ["--tag=git", "--json"],
    ["archive", "--filter", "status=published"],
    ["--filter", "status=draft", "--filter", "tags=archive", "--json"],
    ["--category", "nothing"],
    ["archive", "--tag", "nope"],
    ["archive", "--filter", "rating>="],  # a bad filter: one line, exit 2, from run_search
    ["archive", "--cluster", "0", "--json"],
    ["--", "-v flags"],
    ["zzzqqq nothing like it"],
    ["archive", "--no-collapse", "--per-file", "0", "--json"],
    ["archive", "--per-file=1", "--govern", "--category", "nothing"],
]

DECLINED = [
    [],
    ["--help"],
    ["-h"],
    ["archive", "-n", "0"],
    ["archive", "-n", "x"],
    ["archive", "--limit", "2.5"],
    ["archive", "--bogus"],
    ["archive", "--json=yes"],
    ["one", "two"],
    ["--tag", "a", "--tag", "b"],
    ["archive", "--mode", "fuzzy"],
    ["archive", "--min-score"],
    ["archive", "--filter"],
    ["archive", "-n", "2", "-n", "3"],
    ["-v flags"],
    ["--json"],
    ["archive", "--no-govern", "--govern"],
    ["archive", "--per-file", "-1"],
    ["archive", "--no-collapse=yes"],
    ["archive", "--mode"],
]


@pytest.mark.parametrize("argv", ANSWERED, ids=" ".join)
def test_fast_path_prints_what_typer_prints(project: Path, argv: list[str]) -> None:
    argv = ["--root", str(project), *argv]  # first: `--` makes all that follows the query
    code, out, err = _fast(argv)
    assert code is not None, "the hand parser should answer this one"
    assert (code, out, err) == _typer(argv)
    assert out or err


@pytest.mark.parametrize("argv", DECLINED, ids=lambda a: " ".join(a) or "(none)")
def test_fast_path_leaves_what_it_is_unsure_of_to_typer(project: Path, argv: list[str]) -> None:
    argv = ["--root", str(project), *argv]
    assert fast.parse(argv) is None
    code, _, _ = _fast(argv)
    assert code is None


def test_hand_parser_knows_every_option_of_the_typer_command() -> None:
    _typer(["--help"])  # registers every command module on the app
    command = typer.main.get_command(app).commands["search"]  # type: ignore[attr-defined]
    declared = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    declared.discard("query")
    known = set(fast.PARSER.flags) | set(fast.PARSER.valued) | set(fast.PARSER.repeated)
    assert known == declared


def test_usage_errors_still_come_from_typer_through_the_real_command(project: Path) -> None:
    done = run_cli("search", "archive", "-n", "0", "--root", str(project))
    assert done.returncode == 2
    assert (
        "Usage: " in done.stderr
        and "search [OPTIONS]" in done.stderr
        and "'-n' / '--limit'" in done.stderr
    )
    done = run_cli("search", "archive", "-n", "1", "--json", "--root", str(project))
    assert done.returncode == 0 and '"tier"' in done.stdout


def test_vectors_are_a_view_over_the_mapped_file(project: Path) -> None:
    """A copy would cost ~60 ms per cold query on tldr and double the memory."""
    snap = open_index(config=load_config(project)).snapshot
    mapped = snap.table("chunks").column("vector").chunk(0).values.buffers()[1]
    assert snap.vectors.ctypes.data == mapped.address
    assert not snap.vectors.flags.writeable


TITLES = {
    "a.md": "# Straße and Sous-titre élégant\n\ntext\n",
    "b.md": "# [Linked title](https://example.com/x) here\n\ntext\n",
    "c.md": "---\ntitle: ΟΔΟΣ notes\n---\n# Body\n\ntext\n",
    "d1.md": "---\ntitle: Ta\n---\ntext\n",
    "d2.md": "---\ntitle: Rget\n---\n# Pra\n\ntext\n\n## Ctice\n\nmore text\n",
    "e.md": "no heading at all, just text about the target practice\n",
    "f.md": "# 日本語のタイトル\n\ntext\n",
    "h.md": "# Target practice\n\ntext\n",
}
# Lowering "İ" gives two characters: the buffer reader then falls back to row by row.
LONGER_WHEN_LOWERED = {**TITLES, "g.md": "# İstanbul\n\ntext\n"}
QUERIES = ["straße", "istanbul", "i̇stanbul", "linked title", "example", "οδος", "target",
           "rget", "ta", "practice", "日本語", "タイトル", "élégant sous", "titre", "text", "x",
           "ext", "tar"]  # fmt: skip


@pytest.mark.parametrize("pages", [TITLES, LONGER_WHEN_LOWERED], ids=["buffers", "rows"])
def test_title_tier_matches_where_words_begin(tmp_path: Path, pages: dict) -> None:
    """Words are looked up in one lowered string; check it against the obvious per-row loop
    (a word matches where a title word begins, anywhere in CJK), on links, Greek, CJK,
    titles that grow when lowered, and neighbouring rows that spell a word together across
    their boundary ("ta" + "rget", "pra" + "ctice")."""
    import re

    for rel, text in pages.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    snap = open_index(config=load_config(build_index(tmp_path))).snapshot

    def plain(texts: list[str | None]) -> list[str]:
        link = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
        return [link.sub(r"\1", t).lower() if t else "" for t in texts]

    def has(text: str, word: str) -> bool:
        if "\u3040" <= word[0] <= "\u9fff":  # CJK: anywhere
            return word in text
        return re.search(r"(?<![^\W_])" + re.escape(word), text) is not None

    titles = plain(snap.table("files").column("title").to_pylist())
    headings = plain(snap.table("chunks").column("heading").to_pylist())
    file_ids = snap.chunk_file_ids
    for query in QUERIES:
        words = query_words(query)
        expected = np.zeros(len(titles), dtype=bool)
        for i, title in enumerate(titles):
            expected[i] |= bool(words) and all(has(title, w) for w in words)
        for c, heading in enumerate(headings):
            expected[file_ids[c]] |= bool(words) and all(has(heading, w) for w in words)
        assert title_files(snap, words).tolist() == expected.tolist(), query
    assert _lowered(snap)[0].text  # built once, kept in the snapshot's cache
    assert title_files(snap, ["arget"]).sum() == 0  # inside a word: no match
    assert title_files(snap, ["tar"]).sum() == 1  # begins "Target practice" (h.md)
    assert title_files(snap, ["elegant"]).sum() == 0  # not accent-folded
    assert title_files(snap, ["タイトル"]).sum() == 1  # inside a CJK run
