"""Schema overlay, facets, tiers and CLI messages on small hand-written projects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from query import open_index
from query.filters import Filter, FilterError, matching_files, parse_filter
from query.schema import load_schema
from tests.conftest import build_index, run_cli

DOCS = {
    "kb/orm.md": """---
title: Avoiding the N+1 query problem
tags: [n+1, ORM, performance]
category: Databases
status: draft
published: 2024-03-01
rating: 4.5
---
# Avoiding the N+1 query problem

Load related rows in one query with a join or a prefetch instead of one query per row.
""",
    "kb/indexes.md": """---
title: Choosing database indexes
tags: [performance, sql]
category: databases
status: review
published: 2023-11-20
rating: 3
---
# Choosing database indexes

A B-tree index speeds up range scans; a hash index only equality lookups.
""",
    "kb/caching.md": """---
title: Caching strategies
tags: [performance]
category: Architecture
status: published
published: 2022-01-15
rating: five
---
# Caching strategies

## Write-through

Every write goes to the cache and the database. Avoid the N+1 query problem with a cache.
""",
    "kb/notes.md": """# Loose notes

No frontmatter here. The N+1 query problem shows up in ORMs.
""",
}


def _project(root: Path, overlay: str | None = None, extra: int = 0, cli: bool = True) -> Path:
    """The knowledge base, indexed by the real `mdvdb ingest` (`cli`) or in this process
    (`build_index`: for the module's shared fixture, whose tests only read it)."""
    for rel, text in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for i in range(extra):
        (root / f"many/page{i:02d}.md").parent.mkdir(parents=True, exist_ok=True)
        (root / f"many/page{i:02d}.md").write_text(
            # a word of its own per page: pages differing only in numbers are near-duplicates
            f"---\ntags: [bulk]\n---\n# Page {i}\n\nFiller page {i} about query performance "
            f"of {'abcdefghij'[i % 10]}{'klmnopqrst'[i // 10 % 10]}db.\n"
        )
    if overlay is not None:
        (root / ".markdownvdb.schema.yml").write_text(overlay)
    if not cli:
        return build_index(root)
    done = run_cli("ingest", "--root", str(root))
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _project(tmp_path_factory.mktemp("kb"), extra=22, cli=False)


OVERLAY = """\
fields:
  status:
    description: Editorial state of the page
    allowed: [draft, review, published]
    required: true
  rating:
    type: number
    description: Reader rating out of 5
  owner:
    description: Who maintains the page (no file has it yet)
"""


def test_inferred_schema_types_and_mixed(kb: Path) -> None:
    schema = load_schema(open_index(kb).snapshot)
    assert schema.fields["tags"].type == "list"
    assert schema.fields["published"].type == "date"
    assert schema.fields["status"].type == "string"
    # 4.5, 3 and "five": numbers and a string
    assert schema.fields["rating"].type == "mixed"
    assert schema.fields["rating"].type_counts == {"number": 2, "string": 1}
    assert dict(schema.fields["category"].values) == {
        "Databases": 1,
        "databases": 1,
        "Architecture": 1,
    }


def test_facet_matches_literal_value_case_insensitively(kb: Path) -> None:
    done = run_cli("search", "--tag", "N+1", "--root", str(kb))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["- [Avoiding the N+1 query problem](kb/orm.md)"]
    both = run_cli("search", "--tag", "performance", "--category", "DATABASES", "--root", str(kb))
    assert both.stdout.splitlines() == [
        "- [Choosing database indexes](kb/indexes.md)",
        "- [Avoiding the N+1 query problem](kb/orm.md)",
    ]


def test_unknown_facet_value_lists_known_values(kb: Path) -> None:
    done = run_cli("search", "--category", "gardening", "--root", str(kb))
    assert done.returncode == 0
    first, *rest = done.stdout.splitlines()
    assert first == "No matches. Valid values: Architecture, Databases, databases"
    assert rest[0] == "Suggestions:" and "mdvdb schema" in rest[3]
    as_json = run_cli("search", "--tag", "nope", "--json", "--root", str(kb))
    data = json.loads(as_json.stdout)
    assert data["results"] == [] and data["valid_values"] == [
        "ORM",
        "bulk",
        "n+1",
        "performance",
        "sql",
    ]


def test_repeated_facet_and_unknown_flag_are_usage_errors(kb: Path) -> None:
    """One form through the real command; the others through `mdvdb.cli.run` in this
    process (what the command runs)."""
    done = run_cli("search", "--tag", "sql", "--tag", "orm", "--root", str(kb))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("mdvdb search: ") and "given 2 times" in done.stderr
    from tests.test_cli_parser import _run

    code, _, err = _run(["search", "--category", "a", "--category", "b", "--root", str(kb)])
    assert code == 2 and "given 2 times" in err
    for args in (["--colour", "red"], []):
        code, _, err = _run(["search", *args, "--root", str(kb)])
        assert code == 2 and err.startswith("mdvdb search: "), (args, err)


def test_title_matches_come_first_numbered_continuously(kb: Path) -> None:
    done = run_cli("search", "n+1 query problem", "-n", "5", "--root", str(kb))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "## Title Matches"
    assert lines[1].startswith("1. kb/orm.md:")
    content = lines.index("## Content Matches")
    numbers = [int(line.split(".", 1)[0]) for line in lines if line[:1].isdigit()]
    assert numbers == list(range(1, len(numbers) + 1))
    # Title tier: documents whose title (or an alias) holds every word; the rest follow.
    title_paths = {line.split(":", 1)[0].split(" ", 1)[1] for line in lines[1:content]}
    assert "kb/notes.md" not in title_paths
    # No "Showing top 5 of N matches" under a query: N counted every chunk scoring above 0
    assert not any(line.startswith("Showing top") for line in lines)
    data = json.loads(run_cli("search", "n+1 query problem", "--json", "--root", str(kb)).stdout)
    tiers = [r["tier"] for r in data["results"]]
    assert tiers[0] == "title" and "content" in tiers
    assert tiers == sorted(tiers, key=lambda t: t != "title")
    assert len({r["path"] for r in data["results"] if r["tier"] == "title"}) == tiers.count("title")


def test_query_with_facet_searches_only_facet_files(kb: Path) -> None:
    data = json.loads(
        run_cli("search", "query performance", "--tag", "bulk", "--json", "--root", str(kb)).stdout
    )
    assert data["results"]
    assert all(r["path"].startswith("many/") for r in data["results"])
    assert data["shown"] == 10 and data["total"] > 10 and data["truncated"]  # the default -n


def test_zero_results_give_suggestions(kb: Path) -> None:
    done = run_cli("search", "sourdough", "--filter", "published>=2099-01-01", "--root", str(kb))
    assert done.returncode == 0
    assert done.stdout.startswith("No matches.\nNo file passes --filter published>=2099-01-01")
    assert "\nSuggestions:\n" in done.stdout
    assert "mdvdb schema" in done.stdout and "mdvdb ingest" in done.stdout


def test_filter_typing_dates_and_mixed(kb: Path) -> None:
    index = open_index(kb)

    def paths(*filters):
        return {f.path for f in matching_files(index, list(filters))[0]}

    assert paths(parse_filter("published>=2023-06-01")) == {"kb/orm.md", "kb/indexes.md"}
    assert paths(parse_filter("published<2023-01-01T00:00:00Z")) == {"kb/caching.md"}
    assert paths(parse_filter("status=draft,review")) == {"kb/orm.md", "kb/indexes.md"}
    assert paths(Filter("status", "=", ("draft", "review"))) == {"kb/orm.md", "kb/indexes.md"}
    assert paths(parse_filter("rating=five")) == {"kb/caching.md"}  # mixed: compared as text
    assert paths(parse_filter("!category"), parse_filter("!tags")) == {"kb/notes.md"}
    assert paths(parse_filter(r"title=Caching strategies")) == {"kb/caching.md"}
    with pytest.raises(FilterError, match="needs a number or date field"):
        paths(parse_filter("rating>=3"))  # mixed field: ranges are refused, not guessed
    with pytest.raises(FilterError, match="ISO date"):
        paths(parse_filter("published>=last week"))


def test_parse_filter_forms() -> None:
    assert parse_filter("difficulty=Easy") == Filter("difficulty", "=", "Easy")
    assert parse_filter("rating >= 1800") == Filter("rating", ">=", "1800")
    assert parse_filter("status=draft,review") == Filter("status", "=", ("draft", "review"))
    assert parse_filter(r"title=a\,b") == Filter("title", "=", "a,b")
    assert parse_filter("online version?") == Filter("online version", "exists")
    assert parse_filter("!tags") == Filter("tags", "missing")
    assert parse_filter("x!=1") == Filter("x", "!=", "1")
    for bad in ("", "tags=", "?", "!", "<3"):
        with pytest.raises(FilterError):
            parse_filter(bad)


@pytest.mark.slow
def test_overlay_is_merged_checked_and_persisted(tmp_path: Path) -> None:
    root = _project(tmp_path / "kb", overlay=OVERLAY)
    data = json.loads(run_cli("schema", "--json", "--root", str(root)).stdout)
    fields = {f["name"]: f for f in data["fields"]}
    assert list(fields)[:3] == ["status", "rating", "owner"]  # overlay order first
    assert fields["status"]["description"] == "Editorial state of the page"
    assert fields["status"]["allowed"] == ["draft", "review", "published"]
    assert fields["status"]["required"] is True
    assert fields["owner"]["files"] == 0 and fields["owner"]["type"] == "none"
    assert fields["rating"]["type"] == "number"  # declared; inferred mixed
    assert fields["rating"]["inferred_type"] == "mixed"
    # The declared type types the column: "five" is not a number, so ranges now work.
    index = open_index(root)
    found = {f.path for f in matching_files(index, [parse_filter("rating>=3")])[0]}
    assert found == {"kb/orm.md", "kb/indexes.md"}
    # `owner` is known (declared) though no file has it.
    assert matching_files(index, [parse_filter("owner?")])[1] == 0
    assert matching_files(index, [parse_filter("!owner")])[1] == 4

    check = run_cli("schema", "--check", "--root", str(root))
    assert check.returncode == 1
    assert check.stdout.splitlines() == [
        "kb/caching.md: rating: expected number, found string 'five'",
        "kb/notes.md: status: required field is missing",
    ]
    human = run_cli("schema", "--root", str(root))
    assert "Editorial state of the page" in human.stdout
    assert "allowed: draft, review, published" in human.stdout

    # Fix the files: the check passes.
    (root / "kb/caching.md").write_text(DOCS["kb/caching.md"].replace("five", "5"))
    (root / "kb/notes.md").write_text("---\nstatus: draft\n---\n" + DOCS["kb/notes.md"])
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    ok = run_cli("schema", "--check", "--root", str(root))
    assert ok.returncode == 0, ok.stdout
    assert "Every file fits the overlay." in ok.stdout


@pytest.mark.slow
def test_overlay_change_reindexes_schema_and_bad_overlay_is_reported(tmp_path: Path) -> None:
    root = _project(tmp_path / "kb", overlay=OVERLAY)
    (root / ".markdownvdb.schema.yml").write_text(
        OVERLAY.replace("allowed: [draft, review, published]", "allowed: [draft]")
    )
    stale = run_cli("schema", "--check", "--root", str(root))
    assert "changed since the last ingest" in stale.stderr
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    check = run_cli("schema", "--check", "--json", "--root", str(root))
    problems = json.loads(check.stdout)["problems"]
    assert {"path": "kb/indexes.md", "field": "status"} in [
        {"path": p["path"], "field": p["field"]} for p in problems
    ]
    (root / ".markdownvdb.schema.yml").write_text("fields:\n  status: [unclosed\n")
    ingest = run_cli("ingest", "--root", str(root))
    assert ingest.returncode == 0  # documentation, not enforcement: the index is built
    assert ".markdownvdb.schema.yml" in ingest.stderr and "invalid YAML" in ingest.stderr
    broken = run_cli("schema", "--check", "--root", str(root))
    assert broken.returncode == 1
    assert broken.stdout.startswith(".markdownvdb.schema.yml: ")
    listing = run_cli("search", "--tag", "sql", "--root", str(root))
    assert listing.stdout.splitlines() == ["- [Choosing database indexes](kb/indexes.md)"]


def test_schema_field_lists_every_value(kb: Path) -> None:
    done = run_cli("schema", "tags", "--json", "--root", str(kb))
    data = json.loads(done.stdout)
    assert data["values"][0] == ["bulk", 22]
    assert ["n+1", 1] in data["values"]
    unknown = run_cli("schema", "nosuch", "--root", str(kb))
    assert unknown.returncode == 2 and "known: " in unknown.stderr


@pytest.mark.slow
def test_incremental_ingest_updates_columns_and_schema(tmp_path: Path) -> None:
    root = _project(tmp_path / "kb")
    index = open_index(root)
    assert {f.path for f in matching_files(index, [parse_filter("status=draft")])[0]} == {
        "kb/orm.md"
    }
    (root / "kb/indexes.md").write_text(
        DOCS["kb/indexes.md"].replace("status: review", "status: draft\nowner: ana")
    )
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    index = open_index(root)  # rows of unchanged files were reused from the old index
    found = {f.path for f in matching_files(index, [parse_filter("status=draft")])[0]}
    assert found == {"kb/orm.md", "kb/indexes.md"}
    schema = load_schema(index.snapshot)
    assert schema.fields["owner"].files == 1
    assert dict(schema.fields["status"].values) == {"draft": 2, "published": 1}
