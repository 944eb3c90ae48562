"""Documented, versioned JSON: every `--json` output is the shape docs/json.md describes and
docs/json-schema/mdvdb.schema.json defines, with `schema_version`; results carry no row ids
that shift when an unrelated file is deleted. `run_cli` (tests/conftest.py) checks every
`--json` output any test produces; the tests here run each command and form on purpose, and
show that the check fails on a renamed or an undocumented field. The MCP tools' results are
checked by every MCP test (`tests.json_shapes.call_tool`).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, build_index, run_cli
from tests.json_shapes import check, cli_shape, schema

BROKEN = "---\ntitle: [unclosed\n---\n# Broken\n\nStill searchable.\n"
OVERLAY = "fields:\n  tags:\n    type: list\n    description: Topics\n"


def _cli_json(*args: str, root: Path) -> dict:
    done = run_cli(*args, "--json", "--root", str(root))  # run_cli checks the shape
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_search_and_status_are_the_documented_shapes(indexed_notes: Path):
    found = _cli_json("search", "extract a tar archive", "-n", "3", root=indexed_notes)
    assert found["schema_version"] == 1 and found["results"]
    status = _cli_json("status", root=indexed_notes)
    assert status["schema_version"] == 1 and status["root"] == str(indexed_notes)
    check(found, "search")
    check(status, "status")


def test_a_renamed_or_undocumented_field_fails_the_check(indexed_notes: Path):
    found = _cli_json("search", "tar", "-n", "1", root=indexed_notes)
    renamed = copy.deepcopy(found)
    renamed["results"][0]["line_start"] = renamed["results"][0].pop("start_line")
    with pytest.raises(AssertionError, match="line_start"):
        check(renamed, "search")
    extra = copy.deepcopy(found)
    extra["results"][0]["chunk_id"] = 8  # a row number: not part of the documented JSON
    with pytest.raises(AssertionError, match="chunk_id"):
        check(extra, "search")
    unversioned = {k: v for k, v in found.items() if k != "schema_version"}
    with pytest.raises(AssertionError, match="schema_version"):
        check(unversioned, "search")
    status = _cli_json("status", root=indexed_notes)
    status["stale_files"] = 0  # a count where the list belongs
    with pytest.raises(AssertionError, match="stale_files"):
        check(status, "status")


@pytest.mark.slow
def test_every_command_and_form_prints_the_documented_json(notes: Path, tmp_path: Path):
    (notes / "broken.md").write_text(BROKEN, encoding="utf-8")
    (notes / ".markdownvdb.schema.yml").write_text(OVERLAY, encoding="utf-8")
    report = _cli_json("ingest", root=notes)
    assert report["errors_total"] == 1 and report["errors"][0]["path"] == "broken.md"
    forms = [
        ("search", "tar"),
        ("search", "tar", "--explain", "-n", "2"),
        ("search", "tar", "--files"),
        ("search", "--tag", "git"),
        ("search", "--tag", "no-such-tag"),
        ("search", "zzzqqqxxy", "--mode", "lexical"),
        ("search", "tar", "--no-collapse", "--per-file", "0"),
        ("get", "tar.md"),
        ("get", "broken.md"),
        ("get", "tar.md:1+3", "--max-tokens", "5"),
        ("get", "*.md", "tar", "--max-tokens", "10"),
        ("links", "tar.md"),
        ("backlinks", "tar"),
        ("orphans",),
        ("status",),
        ("status", "--check"),
        ("status", "--verify"),
        ("schema",),
        ("schema", "tags"),
        ("schema", "--check"),
        ("clusters",),
        ("clusters", "--plot", str(tmp_path / "map.svg")),
        ("serve", "--status"),
        ("ingest", str(notes / "tar.md")),
    ]
    for form in forms:
        done = run_cli(*form, "--json", "--root", str(notes))
        assert done.returncode in (0, 1), (form, done.stderr)  # serve --status: 1, not serving
        assert json.loads(done.stdout or "{}").get("schema_version") == 1, (form, done.stderr)
    grep = run_cli("grep", "tar", "--json", "--root", str(notes))
    lines = [json.loads(line) for line in grep.stdout.splitlines()]
    assert lines and all(line["schema_version"] == 1 for line in lines)
    status = _cli_json("status", root=notes)
    assert status["errors"][0]["path"] == "broken.md" and status["errors_total"] == 1


def test_the_library_report_is_the_cli_shape(notes: Path):
    """`mdvdb.ingest(...).to_json()` is what `mdvdb ingest --json` prints, less the version."""
    import mdvdb

    report = mdvdb.ingest(notes).to_json()
    check({"schema_version": 1, **report}, "ingest")
    found = mdvdb.open_index(notes).search("tar", limit=2).to_json()
    for result in found["results"]:
        check({**result, "tier": "content"}, "search_result")


@pytest.mark.slow
def test_results_keep_their_identity_when_an_unrelated_file_is_deleted(notes: Path):
    """No row numbers in the output: a result is its path and line range, which deleting
    another file leaves as they were."""
    build_index(notes)
    before = _cli_json("search", "extract a tar archive", "--mode", "lexical", root=notes)
    keys = {k for r in before["results"] for k in r}
    assert not {k for k in keys if k.endswith("_id")} - {"cluster_id"}

    def identity(answer: dict) -> list:
        picked = [r for r in answer["results"] if r["path"] == "tar.md"]
        return [(r["path"], r["start_line"], r["end_line"], r["heading_path"]) for r in picked]

    (notes / "guides" / "cooking.md").unlink()
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    after = _cli_json("search", "extract a tar archive", "--mode", "lexical", root=notes)
    assert identity(after) == identity(before) and identity(before)
    get_before = _cli_json("get", "tar.md", root=notes)
    assert get_before["sections"][0]["start_line"] == 6


def test_docs_name_every_shape_and_the_schema_is_valid():
    from jsonschema import Draft202012Validator

    document = schema()
    Draft202012Validator.check_schema(document)
    text = (REPO / "docs" / "json.md").read_text(encoding="utf-8")
    outputs = [n for n in document["$defs"] if cli_shape_name(n)]
    missing = [n for n in outputs if f"`{n}`" not in text]
    assert not missing, f"docs/json.md does not describe {missing}"
    # Every command with --json maps to a shape the schema has.
    for argv in (
        ("search", "--json"),
        ("get", "x", "--json"),
        ("links", "x", "--json"),
        ("backlinks", "x", "--json"),
        ("orphans", "--json"),
        ("status", "--json"),
        ("status", "--check", "--json"),
        ("status", "--verify", "--json"),
        ("schema", "--json"),
        ("schema", "tags", "--json"),
        ("schema", "--check", "--json"),
        ("clusters", "--json"),
        ("grep", "x", "--json"),
        ("ingest", "--json"),
        ("serve", "--status", "--json"),
        ("models", "--json"),
        ("models", "install", "x", "--json"),
        ("models", "verify", "--json"),
    ):
        assert cli_shape(argv) in document["$defs"], argv
    assert shutil.which("mdvdb") or True


def cli_shape_name(name: str) -> bool:
    """A top-level output (a command's or a tool's), not a part of one."""
    return bool(
        re.fullmatch(
            r"(mcp_(search|grep|get_document|links|backlinks|orphans|schema|clusters|status|"
            r"ingest))|search|get|links|backlinks|orphans|"
            r"status(_check|_verify)?|schema(_field|_check)?|clusters|grep_line|ingest|"
            r"serve_status|models(_install|_verify)?",
            name,
        )
    )
