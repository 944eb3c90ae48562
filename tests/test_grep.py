"""`mdvdb grep`: the real CLI and the real rg over real files (small fixtures, tldr, leetcode)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.config import load_config
from query.grep import ripgrep as grep
from query.grep.format import ELLIPSIS, MAX_LINE, use_color
from query.grep.sources import Registry, entry_points, select_roots
from tests.conftest import REPO, run_cli, unpack_corpus

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Two configured roots (one missing locally), frontmatter, a long line, a busy file."""
    root = tmp_path / "proj"
    write(root / ".markdownvdb", "MDVDB_SOURCE_DIRS=docs,notes,not-here\n")
    write(
        root / "docs" / "paged.md",
        "---\ntitle: 'Paged: a page'\npage_id: 42\nsecret: needle in frontmatter\n---\n"
        "\n# Heading\n\nA needle in the body.\n",
    )
    write(root / "docs" / "plain.md", "Intro\n\n## Second level first\n\n# Plain Title\nneedle\n")
    write(root / "notes" / "note.md", "# A note\n\nanother needle here\n")
    write(root / "notes" / "busy.md", "# Busy\n" + "needle line\n" * 80)
    write(root / "notes" / "flags.md", "# Flags\n\nuse rm --force with care\n")
    write(root / "notes" / "skip.txt", "needle in a text file\n")
    write(root / "notes" / "doc.qmd", "# Quarto\n\nneedle in quarto\n")
    write(root / "other" / "extra.md", "# Extra\n\nneedle outside the roots\n")
    return root


def grep_cli(root: Path, *args: str, env: dict | None = None):
    return run_cli("grep", "--root", str(root), *args, env=env)


def records(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def run_raw(args: list[str], env: dict, cwd: Path | None = None):
    """Like run_cli, but FORCE_COLOR/NO_COLOR are exactly what the test says."""
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "mdvdb", *args],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- roots and filters --------------------------------------------------------------------------


def test_json_records_with_a_missing_root_skipped_silently(project: Path):
    result = grep_cli(project, "needle", "--json", "--sort", "--limit", "100")
    assert result.stderr == ""
    found = records(result)
    assert {tuple(sorted(r)) for r in found} == {
        ("line", "page_id", "path", "schema_version", "snippet", "source", "title")
    }
    paths = {r["path"] for r in found}
    assert paths == {"docs/paged.md", "docs/plain.md", "notes/note.md", "notes/busy.md"}
    paged = [r for r in found if r["path"] == "docs/paged.md"]
    assert paged == [
        {
            "schema_version": 1,
            "path": "docs/paged.md",
            "source": "dir:docs",
            "line": 9,
            "title": "Paged: a page",
            "snippet": "A needle in the body.",
            "page_id": "42",
        }
    ]
    plain = next(r for r in found if r["path"] == "docs/plain.md")
    assert plain["title"] == "Plain Title"  # the first level-1 heading wins
    assert plain["page_id"] is None
    assert next(r for r in found if r["path"] == "notes/note.md")["source"] == "dir:notes"
    assert not (project / ".markdownvdb.index").exists()  # no index needed, none written


def test_all_roots_missing_is_an_error(tmp_path: Path):
    write(tmp_path / ".markdownvdb", "MDVDB_SOURCE_DIRS=gone,also-gone\n")
    result = grep_cli(tmp_path, "needle")
    assert result.returncode == 1
    assert "no source folder to search" in result.stderr


def test_source_filters_include_and_exclude(project: Path):
    def paths(*args: str) -> set[str]:
        # A limit above the total: rg searches files in parallel, so which files fill a
        # smaller limit first is not deterministic.
        return {
            r["path"] for r in records(grep_cli(project, "needle", "--json", "-n", "500", *args))
        }

    assert paths("--source", "dir:DOCS") == {"docs/paged.md", "docs/plain.md"}
    everything = paths()
    assert paths("--source", "dir:notes", "--source", "dir:docs") == everything
    assert paths("--source", "dir") == everything
    # --include is searched whatever the filters say; its source is path:<as given>
    other = str(project / "other")
    with_extra = records(
        grep_cli(
            project, "needle", "--json", "-n", "500", "--source", "dir:docs", "--include", other
        )
    )
    assert {r["path"] for r in with_extra} == {"docs/paged.md", "docs/plain.md", "other/extra.md"}
    assert {r["source"] for r in with_extra if r["path"] == "other/extra.md"} == {f"path:{other}"}
    assert paths("--exclude", str(project / "docs")) == {"notes/note.md", "notes/busy.md"}
    assert paths("--exclude", str(project / "notes" / "busy.md")) == {
        "docs/paged.md",
        "docs/plain.md",
        "notes/note.md",
    }


def test_include_resolves_against_the_working_directory(project: Path):
    result = run_cli("grep", "needle", "--json", "-n", "500", "--include", "other", cwd=project)
    assert "other/extra.md" in {r["path"] for r in records(result)}


def test_unregistered_source_type_is_a_usage_error(project: Path):
    result = grep_cli(project, "needle", "--source", "wiki:team")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "unknown source type 'wiki'; registered types: dir" in result.stderr
    unknown_id = grep_cli(project, "needle", "--source", "dir:nope")
    assert unknown_id.returncode == 2
    assert "dir ids: docs, notes, not-here" in unknown_id.stderr


def test_exclude_blacklisted(project: Path):
    env = {"MDVDB_BLACKLISTED_SOURCES": "dir:Notes"}
    kept = records(grep_cli(project, "needle", "--json", "--per-file-limit", "1", env=env))
    assert {r["source"] for r in kept} == {"dir:docs", "dir:notes"}  # off by default
    dropped = records(grep_cli(project, "needle", "--json", "--exclude-blacklisted", env=env))
    assert {r["source"] for r in dropped} == {"dir:docs"}


def test_nested_roots_are_searched_once_and_named_by_the_closest(tmp_path: Path):
    write(tmp_path / ".markdownvdb", "MDVDB_SOURCE_DIRS=.,docs\n")
    write(tmp_path / "top.md", "needle\n")
    write(tmp_path / "docs" / "inner.md", "needle\n")
    found = records(grep_cli(tmp_path, "needle", "--json"))
    assert sorted((r["path"], r["source"]) for r in found) == [
        ("docs/inner.md", "dir:docs"),
        ("top.md", "dir:."),
    ]


def test_file_types_and_ignore_patterns(project: Path):
    def paths(*args: str, env=None) -> set[str]:
        result = grep_cli(project, "needle", "--json", "-n", "500", *args, env=env)
        return {r["path"] for r in records(result)}

    assert paths("--type", "qmd") == {"notes/doc.qmd"}
    assert {"notes/skip.txt", "notes/doc.qmd", "notes/busy.md"} <= paths("--type", "all")
    assert "notes/busy.md" not in paths(env={"MDVDB_IGNORE_PATTERNS": "busy.md"})


# --- streaming, limits, sorting ---------------------------------------------------------------


def test_streaming_terminates_rg_once_the_limit_is_printed(corpora_dir: Path):
    tldr = unpack_corpus(corpora_dir, "tldr")
    config = load_config(tldr, environ={})
    selection = select_roots(config, Registry.load())
    run = grep.start(grep.GrepOptions(pattern="the", limit=5), selection, config.root)
    got = list(run)
    assert len(got) == 5 == run.emitted
    # rg had far more to say (tldr has ~40k lines with "the"): it was stopped, not drained.
    assert run.stopped_early
    assert run.returncode == -signal.SIGTERM
    assert run.process is not None and run.process.poll() == -signal.SIGTERM

    # The CLI prints exactly --limit matches, as rg produced them.
    result = grep_cli(tldr, "the", "--limit", "7")
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"^L\d+: ", result.stdout, re.M)) == 7


def test_a_run_that_ends_by_itself_is_not_marked_stopped(project: Path):
    config = load_config(project, environ={})
    selection = select_roots(config, Registry.load())
    run = grep.start(grep.GrepOptions(pattern="needle", limit=1000), selection, config.root)
    assert len(list(run)) == 1 + 1 + 1 + 50
    assert not run.stopped_early
    assert run.returncode == 0


def test_per_file_limit(project: Path, corpora_dir: Path):
    busy = records(grep_cli(project, "needle line", "--json", "--per-file-limit", "3"))
    assert [r["line"] for r in busy] == [2, 3, 4]
    default = records(grep_cli(project, "needle line", "--json", "-n", "1000"))
    assert len(default) == 50  # the default per-file cap

    leetcode = unpack_corpus(corpora_dir, "leetcode") / "lcof"
    found = records(grep_cli(leetcode, "return", "--json", "--per-file-limit", "2", "-n", "100000"))
    per_file: dict[str, int] = {}
    for r in found:
        per_file[r["path"]] = per_file.get(r["path"], 0) + 1
    assert max(per_file.values()) == 2 and len(per_file) > 20


def test_sort_groups_by_file_in_path_order(corpora_dir: Path):
    tldr = unpack_corpus(corpora_dir, "tldr")
    sorted_ = records(grep_cli(tldr, "chroot", "--json", "--sort", "-n", "1000"))
    keys = [(r["path"], r["line"]) for r in sorted_]
    assert keys == sorted(keys) and len(keys) > 50
    streamed = records(grep_cli(tldr, "chroot", "--json", "-n", "1000"))
    assert sorted((r["path"], r["line"]) for r in streamed) == keys

    human = grep_cli(tldr, "chroot", "--sort", "-n", "1000").stdout
    headers = re.findall(r"^\[dir:\.\] (\S+)", human, re.M)
    assert headers == sorted(set(headers))  # one group per file, in path order
    assert len(headers) == len({r["path"] for r in sorted_})
    # With --sort the limit keeps the first N in path order.
    first = records(grep_cli(tldr, "chroot", "--json", "--sort", "-n", "3"))
    assert [(r["path"], r["line"]) for r in first] == keys[:3]


# --- frontmatter -------------------------------------------------------------------------------


def test_frontmatter_matches_are_dropped_unless_asked(project: Path):
    body_only = records(grep_cli(project, "needle", "--json", "--source", "dir:docs"))
    assert [(r["path"], r["line"]) for r in body_only if r["path"] == "docs/paged.md"] == [
        ("docs/paged.md", 9)
    ]
    with_fm = records(
        grep_cli(project, "needle", "--json", "--source", "dir:docs", "--include-frontmatter")
    )
    assert [r["line"] for r in with_fm if r["path"] == "docs/paged.md"] == [4, 9]


def test_frontmatter_exclusion_on_leetcode(corpora_dir: Path):
    lcof = unpack_corpus(corpora_dir, "leetcode") / "lcof"
    # Every lcof page's frontmatter has `comments: true`; the bodies rarely say it.
    kept = records(grep_cli(lcof, "comments: true", "--json", "-n", "100000"))
    allowed = records(
        grep_cli(lcof, "comments: true", "--json", "-n", "100000", "--include-frontmatter")
    )
    assert len(allowed) > 50
    for r in allowed:
        head = grep.read_head(str(lcof / r["path"]))
        assert r["line"] < head.frontmatter_end or r in kept
    assert all(r["line"] > grep.read_head(str(lcof / r["path"])).frontmatter_end for r in kept)
    assert len(kept) < len(allowed)


def test_read_head_variants(tmp_path: Path):
    crlf = tmp_path / "crlf.md"
    crlf.write_bytes(b"\xef\xbb\xbf---\r\ntitle: CRLF page\r\n---\r\nbody\r\n")
    assert grep.read_head(str(crlf)) == grep.FileHead(3, "CRLF page", None)
    toml = write(tmp_path / "t.md", '+++\ntitle = "Toml page"\npage_id = 7\n+++\nbody\n')
    assert grep.read_head(str(toml)) == grep.FileHead(4, "Toml page", "7")
    folded = write(tmp_path / "f.md", "---\ntitle: >\n  Folded\n  title\n---\n# H\n")
    assert grep.read_head(str(folded)).title == "Folded title"
    open_fm = write(tmp_path / "open.md", "---\nnot: closed\n# Real heading\n")
    assert grep.read_head(str(open_fm)) == grep.FileHead(0, "Real heading", None)
    fenced = write(tmp_path / "code.md", "```\n# not a heading\n```\nSetext\n======\n")
    assert grep.read_head(str(fenced)).title == "Setext"
    assert grep.read_head(str(write(tmp_path / "bare-name.md", "text\n"))).title == "bare-name"


# --- display ------------------------------------------------------------------------------------


def test_human_output_layout(project: Path):
    result = grep_cli(project, "needle", "--source", "dir:docs", "--sort")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "[dir:docs] docs/paged.md (page 42)\n"
        "Title: Paged: a page\n"
        "\n"
        "L9: A needle in the body.\n"
        "\n"
        "[dir:docs] docs/plain.md\n"
        "Title: Plain Title\n"
        "\n"
        "L6: needle\n"
    )
    none = grep_cli(project, "zzz-nothing-here")
    assert (none.returncode, none.stdout) == (0, "No matches.\n")


def test_long_lines_are_cut_around_the_match(tmp_path: Path):
    write(tmp_path / "middle.md", "a" * 1000 + "NEEDLE" + "b" * 1000 + "\n")
    write(tmp_path / "start.md", "xx NEEDLE " + "c" * 990 + "\n")
    write(tmp_path / "end.md", "d" * 990 + " NEEDLE\n")
    out = grep_cli(tmp_path, "NEEDLE", "--sort", "--color", "always").stdout
    lines = {
        m[0]: m[1]
        for m in re.findall(r"\x1b\[35m(\w+)\.md\x1b\[0m\n.*?\n\n.*?L1:\x1b\[0m (.*)", out)
    }
    middle = lines["middle"]
    assert middle.startswith(ELLIPSIS) and middle.endswith(ELLIPSIS)
    plain = ANSI.sub("", middle)[1:-1]
    assert len(plain) == MAX_LINE
    left, right = plain.split("NEEDLE")
    assert abs(len(left) - len(right)) <= 1  # centred
    assert "\x1b[1;31mNEEDLE\x1b[0m" in middle  # the highlight wraps the original text
    assert not lines["start"].startswith(ELLIPSIS) and lines["start"].endswith(ELLIPSIS)
    assert lines["end"].startswith(ELLIPSIS) and not lines["end"].endswith(ELLIPSIS)
    assert ANSI.sub("", lines["end"]).endswith(" NEEDLE")
    # JSON keeps the whole line.
    full = records(grep_cli(tmp_path, "NEEDLE", "--json", "--sort"))
    assert [len(r["snippet"]) for r in full] == [997, 2006, 1000]


def test_cut_keeps_multibyte_offsets_right(tmp_path: Path):
    write(tmp_path / "u.md", "é" * 600 + "ünïcode" + "ß" * 600 + "\n")
    out = grep_cli(tmp_path, "ünïcode", "--color", "always").stdout
    assert "\x1b[1;31münïcode\x1b[0m" in out
    shown = ANSI.sub("", out.splitlines()[-1]).split(": ", 1)[1]
    assert len(shown) == MAX_LINE + 2


def test_bytes_that_are_not_utf8(tmp_path: Path):
    (tmp_path / "latin.md").write_bytes(b"caf\xe9 needle here\n")
    os.mkdir(tmp_path / "sub")
    with open(os.path.join(os.fsencode(tmp_path / "sub"), b"bad\xff.md"), "wb") as fh:
        fh.write(b"# Bad name\nneedle\n")
    found = records(grep_cli(tmp_path, "needle", "--json", "--sort"))
    assert [(r["path"], r["line"], r["snippet"], r["title"]) for r in found] == [
        ("latin.md", 1, "caf\ufffd needle here", "latin"),
        ("sub/bad\ufffd.md", 2, "needle", "Bad name"),
    ]
    coloured = grep_cli(tmp_path, "needle", "--sort", "--color", "always").stdout
    assert "caf\ufffd \x1b[1;31mneedle\x1b[0m here" in coloured


def test_colour_rules(project: Path):
    args = ["grep", "--root", str(project), "needle", "--source", "dir:docs", "-n", "1"]

    def coloured(extra: list[str], env: dict) -> bool:
        result = run_raw(args + extra, env)
        assert result.returncode == 0, result.stderr
        return "\x1b[" in result.stdout

    assert not coloured([], {})  # auto, stdout is a pipe
    always = run_raw(args + ["--color", "always"], {})
    assert always.returncode == 0 and "\x1b[" in always.stdout, always.stderr
    assert coloured([], {"FORCE_COLOR": "1"})  # the command reads its environment
    # The order of the rules (`use_color`, which the command calls), in this process.
    pipe = io.StringIO()
    assert not use_color("never", pipe, {"FORCE_COLOR": "1"})
    assert not use_color("auto", pipe, {"FORCE_COLOR": "0"})
    assert not use_color("auto", pipe, {"FORCE_COLOR": "false"})
    assert not use_color("auto", pipe, {"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert use_color("always", pipe, {"NO_COLOR": "1"})  # the explicit flag wins
    as_json = run_raw(args + ["--json", "--color", "always"], {"FORCE_COLOR": "1"})
    assert "\x1b" not in as_json.stdout and json.loads(as_json.stdout)

    out = always.stdout
    assert "\x1b[35mdocs/" in out  # path magenta
    assert "\x1b[32mL" in out  # line number green
    assert "\x1b[2mTitle:\x1b[0m" in out  # label dim
    assert "\x1b[1;31mneedle\x1b[0m" in out  # match bold red


def test_colour_auto_on_a_terminal(project: Path):
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # child: stdout is the pty
        env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
        env["TERM"] = "xterm"
        os.execve(
            sys.executable,
            [sys.executable, "-m", "mdvdb", "grep", "--root", str(project), "needle", "-n", "1"],
            env,
        )
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    assert b"\x1b[1;31mneedle" in b"".join(chunks)


# --- security, trace, errors ---------------------------------------------------------------------


def test_dash_leading_pattern_is_searched_for(project: Path):
    for args in (["--", "--force"], ["-e", "--force"]):
        found = records(grep_cli(project, "--json", *args))
        assert [(r["path"], r["snippet"]) for r in found] == [
            ("notes/flags.md", "use rm --force with care")
        ]
    # An rg flag as the pattern is text, never an option (--files would list every file).
    assert grep_cli(project, "--json", "--", "--files").stdout == ""


def test_trace_prints_a_reproducible_rg_command(project: Path):
    result = grep_cli(project, "--trace", "--json", "--", "--force")
    trace = [line for line in result.stderr.splitlines() if line.startswith("[mdvdb grep] ")]
    assert len(trace) == 1
    # `cd ROOT && rg ...`: rg runs in the project root, given the source folders relative to it
    cd, where, conjunction, *argv = shlex.split(trace[0][len("[mdvdb grep] ") :])
    assert (cd, conjunction) == ("cd", "&&") and Path(where) == project
    assert argv[argv.index("-e") + 1] == "--force" and "--" in argv
    assert argv[argv.index("--") + 1 :] == ["docs", "notes"]
    again = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=where)
    matches = [json.loads(x) for x in again.stdout.splitlines() if '"type":"match"' in x]
    assert [m["data"]["path"]["text"] for m in matches] == ["notes/flags.md"]


def test_bad_regex_is_an_error_with_rgs_reason(project: Path):
    result = grep_cli(project, "--regex", "needle(")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1  # one line (rg spends four on it)
    assert "bad regex 'needle(': unclosed group" in result.stderr


def test_missing_rg_gives_an_install_hint(tmp_path: Path, project: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.symlink_to(os.path.realpath(sys._base_executable))
    result = subprocess.run(
        [str(python), "-m", "mdvdb", "grep", "--root", str(project), "needle"],
        env={"PATH": str(bin_dir), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("mdvdb: ripgrep (rg) not found: install it")
    assert "pip install ripgrep==14.1.0" in result.stderr


def test_find_rg_prefers_the_interpreters_folder(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        rg = tmp_path / folder / "rg"
        rg.write_text("#!/bin/sh\n")
        rg.chmod(0o755)
    assert grep.find_rg(str(tmp_path / "a"), str(tmp_path / "b")) == str(tmp_path / "a" / "rg")
    assert grep.find_rg(str(tmp_path / "none"), str(tmp_path / "b")) == str(tmp_path / "b" / "rg")
    with pytest.raises(grep.GrepError, match="pip install ripgrep"):
        grep.find_rg(str(tmp_path / "none"), str(tmp_path / "none"))


# --- the registry ---------------------------------------------------------------------------------


def test_entry_points_match_importlib_metadata():
    from importlib.metadata import entry_points as metadata_entry_points

    expected = {(ep.name, ep.value) for ep in metadata_entry_points(group="mdvdb.sources")}
    assert ("dir", "query.grep.sources:dir_roots") in expected
    assert set(entry_points("mdvdb.sources")) == expected


def test_a_wrapper_package_adds_a_source_type(tmp_path: Path, project: Path):
    site = tmp_path / "site"
    write(
        site / "mdvdb_wiki" / "__init__.py",
        "def roots(config):\n"
        "    return [('Team', config.env('WIKI_DIR')), ('gone', '/nonexistent/wiki')]\n",
    )
    write(
        site / "mdvdb_wiki-1.0.dist-info" / "entry_points.txt",
        "[mdvdb.sources]\nwiki = mdvdb_wiki:roots\n",
    )
    write(site / "mdvdb_wiki-1.0.dist-info" / "METADATA", "Name: mdvdb-wiki\nVersion: 1.0\n")
    wiki = tmp_path / "wiki"
    write(wiki / "page.md", "# Wiki\n\nneedle from the wiki\n")
    env = {"PYTHONPATH": str(site), "WIKI_DIR": str(wiki)}

    found = records(grep_cli(project, "needle", "--json", "--source", "wiki:team", env=env))
    assert [(r["path"], r["source"]) for r in found] == [(str(wiki / "page.md"), "wiki:Team")]
    everything = records(grep_cli(project, "needle", "--json", "-n", "100", env=env))
    assert {r["source"] for r in everything} == {"dir:docs", "dir:notes", "wiki:Team"}
    listed = grep_cli(project, "needle", "--source", "nope", env=env)
    assert "registered types: dir, wiki" in listed.stderr


def test_works_without_any_package_metadata(project: Path):
    """`python -S`: no site-packages, no entry points; the built-in `dir` type still works."""
    assert Registry.load(search_path=[]).names == ["dir"]
    result = subprocess.run(
        [sys.executable, "-S", "-m", "mdvdb", "grep", "--root", str(project), "needle", "--json"]
        + ["-n", "200"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert {json.loads(x)["source"] for x in result.stdout.splitlines()} >= {"dir:docs"}


# --- the CLI surface ----------------------------------------------------------------------------


def test_grep_imports_nothing_heavy(project: Path):
    result = run_cli("-X", "importtime", "-m", "mdvdb", "grep", "--root", str(project), "needle")
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mdvdb", "grep", "--root", str(project), "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert "query.grep.ripgrep" in imported
    for heavy in ("numpy", "pyarrow", "typer", "yaml", "importlib.metadata", "query.index"):
        assert heavy not in imported


def test_grep_is_listed_and_usage_errors_exit_2(project: Path):
    assert "grep" in run_cli("--help").stdout
    assert grep_cli(project).returncode == 2
    bad = grep_cli(project, "x", "--limit", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert grep_cli(project, "x", "--source", "dir:").returncode == 2
