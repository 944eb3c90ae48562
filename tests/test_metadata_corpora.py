"""Filters, schema inference and facets on real frontmatter (leetcode, powershell-docs).

Every expectation comes from an independent scan written here: read each file, cut the
frontmatter at its `---` lines and load it with PyYAML, nothing from mdvdb's parser.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
import yaml

from kernel.config import SEARCH_MODES
from query import open_index
from query.filters import Filter, FilterError, matching_files, parse_filter
from query.schema import load_schema
from tests.conftest import run_cli, unpack_corpus

pytestmark = pytest.mark.corpus

# Subsets keep ingest to seconds: contest problems (rating, source) and early ones (no
# rating), as many problem folders (each a Chinese and an English page) as given.
LEETCODE_PARTS = {"solution/3000-3099": 40, "solution/0000-0099": 15}
POWERSHELL_PARTS = ["reference/7.5/Microsoft.PowerShell.Core"]
POWERSHELL_EXTRA = (
    [
        f"reference/{v}/Microsoft.PowerShell.Core/ForEach-Object.md"
        for v in ("5.1", "7.4", "7.6", "7.7")
    ]
    + [
        f"reference/{v}/Microsoft.PowerShell.Utility/Write-Host.md"
        for v in ("5.1", "7.4", "7.5", "7.6", "7.7")
    ]
    + [
        "reference/7.5/CimCmdlets/CimCmdlets.md",
        "reference/7.5/PSDiagnostics/PSDiagnostics.md",
        "reference/7.5/Microsoft.PowerShell.Host/Microsoft.PowerShell.Host.md",
    ]
)


def scan(root: Path) -> dict[str, dict]:
    """path -> frontmatter for every .md file; {} when absent or invalid (the 5 bad files)."""
    out = {}
    for path in sorted(root.rglob("*.md")):
        text = path.read_bytes().decode("utf-8-sig", errors="replace")
        text = text.replace("\r\n", "\n")
        meta: dict = {}
        if text.startswith("---\n"):
            end = text.find("\n---", 3)
            if end != -1:
                try:
                    loaded = yaml.safe_load(text[4:end])
                except yaml.YAMLError:
                    loaded = None
                meta = loaded if isinstance(loaded, dict) else {}
        out[path.relative_to(root).as_posix()] = meta
    return out


def _copy(source: Path, target: Path, parts: dict[str, int | None]) -> None:
    for part, limit in parts.items():
        src = source / part
        if src.is_file():
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / part)
            continue
        children = sorted(src.iterdir())[:limit]
        for child in children:
            dest = target / part / child.name
            if child.is_dir():
                shutil.copytree(child, dest)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(child, dest)


def _ingest(root: Path, env: dict | None = None) -> None:
    done = run_cli("ingest", "--root", str(root), env=env)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def leetcode(corpora_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = unpack_corpus(corpora_dir, "leetcode")
    root = tmp_path_factory.mktemp("leetcode")
    _copy(source, root, LEETCODE_PARTS)
    # `--category` reads difficulty here: leetcode has no category field.
    (root / ".markdownvdb").write_text("MDVDB_CATEGORY_FIELD=difficulty\n")
    _ingest(root)
    return root


@pytest.fixture(scope="module")
def powershell(corpora_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = unpack_corpus(corpora_dir, "powershell-docs")
    root = tmp_path_factory.mktemp("powershell")
    _copy(source, root, dict.fromkeys(POWERSHELL_PARTS + POWERSHELL_EXTRA))
    _ingest(root)
    return root


def _listed(root: Path, *filters: Filter) -> set[str]:
    found, total = matching_files(open_index(root), list(filters))
    assert total == len(found)
    return {f.path for f in found}


def _expect(files: dict[str, dict], keep) -> set[str]:
    return {path for path, meta in files.items() if keep(meta)}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- leetcode -----------------------------------------------------------------------------


def test_leetcode_inferred_types_and_counts(leetcode: Path) -> None:
    files = scan(leetcode)
    schema = load_schema(open_index(leetcode).snapshot)
    types = {name: info.type for name, info in schema.fields.items()}
    assert types["difficulty"] == "string"
    assert types["tags"] == "list"
    assert types["rating"] == "number"
    assert types["comments"] == "boolean"
    assert types["source"] == "string"
    for name, info in schema.fields.items():
        assert info.files == sum(1 for m in files.values() if m.get(name) is not None), name
    difficulty = dict(schema.fields["difficulty"].values)
    for value, count in difficulty.items():
        assert count == sum(1 for m in files.values() if m.get("difficulty") == value)
    tags = dict(schema.fields["tags"].values)
    assert tags["Array"] == sum(1 for m in files.values() if "Array" in (m.get("tags") or []))
    assert schema.fields["tags"].distinct == len(
        {t for m in files.values() for t in m.get("tags") or []}
    )
    # Many distinct values (a URL per file): counted, not listed.
    assert schema.fields["edit_url"].values is None
    assert schema.fields["edit_url"].distinct == schema.fields["edit_url"].files


@pytest.mark.parametrize(
    ("spelled", "keep"),
    [
        ("difficulty=Easy", lambda m: m.get("difficulty") == "Easy"),
        ("difficulty=Easy,Hard", lambda m: m.get("difficulty") in ("Easy", "Hard")),
        ("difficulty!=Easy", lambda m: m.get("difficulty") not in (None, "Easy")),
        ("rating>=1800", lambda m: _number(m.get("rating")) and m["rating"] >= 1800),
        ("rating<1500", lambda m: _number(m.get("rating")) and m["rating"] < 1500),
        ("rating<=1249", lambda m: _number(m.get("rating")) and m["rating"] <= 1249),
        ("rating>2000", lambda m: _number(m.get("rating")) and m["rating"] > 2000),
        ("rating=1249", lambda m: _number(m.get("rating")) and m["rating"] == 1249),
        ("tags=Array", lambda m: "Array" in (m.get("tags") or [])),
        ("tags=Array,Math", lambda m: {"Array", "Math"} & set(m.get("tags") or [])),
        ("tags=Hash Table", lambda m: "Hash Table" in (m.get("tags") or [])),
        ("tags!=Array", lambda m: m.get("tags") is not None and "Array" not in m["tags"]),
        ("comments=true", lambda m: m.get("comments") is True),
        ("comments=false", lambda m: m.get("comments") is False),
        ("rating?", lambda m: m.get("rating") is not None),
        ("!rating", lambda m: m.get("rating") is None),
        ("!tags", lambda m: m.get("tags") is None),
    ],
)
def test_leetcode_filter_matches_direct_scan(leetcode: Path, spelled: str, keep) -> None:
    """The CLI spelling, parsed as `--filter` parses it, against the scan (in-process: the
    CLI round trip is covered below)."""
    expected = _expect(scan(leetcode), keep)
    assert _listed(leetcode, parse_filter(spelled)) == expected


def test_leetcode_filters_from_the_cli(leetcode: Path) -> None:
    files = scan(leetcode)
    expected = _expect(
        files,
        lambda m: _number(m.get("rating")) and m["rating"] >= 1800 and "Array" in m["tags"],
    )
    done = run_cli(
        "search",
        "--filter",
        "rating>=1800",
        "--filter",
        "tags=Array",
        "--json",
        "-n",
        "100000",
        "--root",
        str(leetcode),
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {r["path"] for r in data["results"]} == expected
    assert data["total"] == len(expected)
    assert {r["tier"] for r in data["results"]} == {"filter"}


def test_leetcode_filters_combine_with_and(leetcode: Path) -> None:
    files = scan(leetcode)
    expected = _expect(
        files,
        lambda m: (
            "Array" in (m.get("tags") or [])
            and "Sorting" in (m.get("tags") or [])
            and _number(m.get("rating"))
            and m["rating"] >= 1600
            and m.get("difficulty") in ("Medium", "Hard")
        ),
    )
    assert expected, "the subset should hold such problems"
    got = _listed(
        leetcode,
        Filter("tags", "=", "Array"),
        Filter("tags", "=", "Sorting"),
        Filter("rating", ">=", 1600),
        Filter("difficulty", "=", ["Medium", "Hard"]),
    )
    assert got == expected


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_leetcode_filter_restricts_every_search_mode(leetcode: Path, mode: str) -> None:
    files = scan(leetcode)
    allowed = _expect(files, lambda m: _number(m.get("rating")) and m["rating"] >= 2000)
    index = open_index(leetcode)
    response = index.search(
        "binary search on the answer", limit=50, mode=mode, filters=[Filter("rating", ">=", 2000)]
    )
    assert response.results
    assert {r.path for r in response.results} <= allowed
    unfiltered = index.search("binary search on the answer", limit=50, mode=mode)
    assert {r.path for r in unfiltered.results} - allowed, "the filter must change something"


def test_leetcode_facets_are_case_insensitive_and_anded(leetcode: Path) -> None:
    files = scan(leetcode)
    expected = _expect(
        files,
        lambda m: (
            any(t.lower() == "hash table" for t in m.get("tags") or [])
            and str(m.get("difficulty", "")).lower() == "easy"
        ),
    )
    done = run_cli(
        "search", "--tag", "HASH table", "--category", "EASY", "-n", "1000", "--root", str(leetcode)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(expected)
    for line in lines:
        assert line.startswith("- [") and line.endswith(")")
    paths = {line.rsplit("](", 1)[1].strip(")").strip("<>") for line in lines}
    assert paths == expected


def test_leetcode_facet_listing_is_capped_with_a_note(leetcode: Path) -> None:
    files = scan(leetcode)
    total = len(_expect(files, lambda m: "Array" in (m.get("tags") or [])))
    assert total > 20
    done = run_cli("search", "--tag", "array", "--root", str(leetcode))
    lines = done.stdout.splitlines()
    assert len(lines) == 11  # the default limit, 10, and the note
    assert lines[-1] == (
        f"Showing top 10 of {total} matches. Narrow the query for more specific results."
    )


def test_leetcode_unknown_facet_value_lists_valid_values(leetcode: Path) -> None:
    done = run_cli("search", "--tag", "Quantum Sorting", "--root", str(leetcode))
    assert done.returncode == 0
    assert done.stdout.startswith("No matches. Valid values: ")
    first_line = done.stdout.splitlines()[0]  # then the suggestions every empty answer has
    listed = first_line.split(": ", 1)[1].strip().split(", ")
    tags = {t for m in scan(leetcode).values() for t in m.get("tags") or []}
    assert listed == sorted(listed) and tags <= set(listed)
    # the others are inline #tags of the pages' text (issue 35), as written there
    texts = "\n".join(p.read_text(errors="replace") for p in leetcode.rglob("*.md"))
    assert all(f"#{tag}" in texts for tag in set(listed) - tags)


def test_leetcode_query_with_facet_searches_inside_it(leetcode: Path) -> None:
    files = scan(leetcode)
    easy = _expect(files, lambda m: str(m.get("difficulty", "")).lower() == "easy")
    done = run_cli("search", "two sum", "--category", "easy", "--json", "--root", str(leetcode))
    data = json.loads(done.stdout)
    assert data["results"]
    assert {r["path"] for r in data["results"]} <= easy
    assert data["results"][0]["tier"] == "title"
    assert "Two Sum" in data["results"][0]["title"]


def test_leetcode_bad_filters_are_usage_errors(leetcode: Path) -> None:
    index = open_index(leetcode)
    for spelled, needle in [
        ("stars>=3", "known: "),
        ("rating>=lots", "not a number"),
        ("difficulty>=Easy", "needs a number or date field"),
        ("comments=maybe", "true or false"),
        ("=Easy", "no field name"),
        ("difficulty", "cannot read filter"),
        ("rating>=1,2", "takes one value"),
    ]:
        with pytest.raises(FilterError, match=needle):
            matching_files(index, [parse_filter(spelled)])
    done = run_cli("search", "--filter", "stars>=3", "--root", str(leetcode))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    for name in ("difficulty", "tags", "rating", "comments"):
        assert name in done.stderr


# -- powershell-docs ----------------------------------------------------------------------


def test_powershell_schema_keeps_keys_with_spaces_and_types(powershell: Path) -> None:
    files = scan(powershell)
    schema = load_schema(open_index(powershell).snapshot)
    for name in ("online version", "Module Name", "external help file", "ms.date", "title"):
        assert name in schema.fields, name
        assert schema.fields[name].files == sum(
            1 for m in files.values() if m.get(name) is not None
        )
    assert schema.fields["online version"].type == "string"
    assert schema.fields["aliases"].type == "list"
    # YAML dates (PlatyPS schema version: 2024-05-01) arrive as ISO strings: a date field.
    assert schema.fields["PlatyPS schema version"].type == "date"
    # "Help Version" holds strings and floats: reported as mixed, with both counts.
    help_version = schema.fields["Help Version"]
    kinds = {type(m["Help Version"]) for m in files.values() if "Help Version" in m}
    assert help_version.type == ("mixed" if len(kinds) > 1 else "string")


def test_powershell_invalid_yaml_files_are_indexed_without_metadata(powershell: Path) -> None:
    bad = [p for p in scan(powershell) if p.endswith("ForEach-Object.md")]
    assert len(bad) == 5
    index = open_index(powershell)
    for path in bad:
        doc = index.get_document(path)
        assert doc.metadata == {}
        assert doc.parse_error and "invalid YAML" in doc.parse_error
    assert set(bad) <= _listed(powershell, Filter("ms.date", "missing"))


@pytest.mark.parametrize(
    ("flt", "keep"),
    [
        (Filter("online version", "exists"), lambda m: m.get("online version") is not None),
        (Filter("online version", "missing"), lambda m: m.get("online version") is None),
        (
            Filter("Module Name", "=", "Microsoft.PowerShell.Core"),
            lambda m: m.get("Module Name") == "Microsoft.PowerShell.Core",
        ),
        (Filter("aliases", "=", "foreach"), lambda m: "foreach" in (m.get("aliases") or [])),
        (
            Filter("PlatyPS schema version", ">=", "2024-05-01"),
            lambda m: (
                isinstance(m.get("PlatyPS schema version"), dt.date)
                and m["PlatyPS schema version"] >= dt.date(2024, 5, 1)
            ),
        ),
        (
            Filter("PlatyPS schema version", "<", "2024-05-01"),
            lambda m: (
                isinstance(m.get("PlatyPS schema version"), dt.date)
                and m["PlatyPS schema version"] < dt.date(2024, 5, 1)
            ),
        ),
    ],
)
def test_powershell_filter_matches_direct_scan(powershell: Path, flt: Filter, keep) -> None:
    assert _listed(powershell, flt) == _expect(scan(powershell), keep)


def test_powershell_filter_on_key_with_space_from_cli(powershell: Path) -> None:
    expected = _expect(scan(powershell), lambda m: m.get("online version") is not None)
    done = run_cli(
        "search", "--filter", "online version?", "--json", "-n", "5000", "--root", str(powershell)
    )
    assert done.returncode == 0, done.stderr
    assert {r["path"] for r in json.loads(done.stdout)["results"]} == expected
