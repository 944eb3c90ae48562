"""The library does what the CLI does: each call, used as a library user would, on a real
ingested folder, against the JSON of the real `mdvdb` command on the same folder."""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
from pathlib import Path

import pytest

import mdvdb
from mdvdb import ConfigError, GrepError, QueryError, SourceError
from query import Index
from query.schema import load_schema
from tests.conftest import FIXTURES, run_cli

TIMINGS = (
    "seconds",
    "stage_seconds",
    "cpu_seconds",
    "stage_cpu_seconds",
    "chunks_per_second",
    "cpu_per_wall",
)


def _plain(data: object) -> object:
    """As it reads once printed as JSON (tuples become lists)."""
    return json.loads(json.dumps(data))


def _place(match: dict) -> tuple:
    return match["path"], match["line"]


def _cli_json(*args: str, root: Path) -> dict:
    out = run_cli(*args, "--json", "--root", str(root))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_two_ingests_at_once_in_one_process(tmp_path: Path):
    """Each ingest's stages get their run as an argument (no module global holds it): two
    projects ingested concurrently from one event loop each get their own files, report and
    problems."""
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(FIXTURES / "notes", first)
    second.mkdir()
    (second / "only-here.md").write_text("# Only here\n\nkayak paddles and spray decks\n")
    (second / "broken.md").write_text("---\ntitle: [unclosed\n---\n# Broken\n\ntext\n")

    async def both():
        return await asyncio.gather(mdvdb.aingest(first), mdvdb.aingest(second))

    one, two = asyncio.run(both())
    assert (one.files, two.files) == (4, 2)
    assert one.published and two.published
    assert not one.errors and [path for path, _ in two.errors] == ["broken.md"]
    hits = mdvdb.open_index(second).search("kayak paddles", limit=5).results
    paths = {hit.path for hit in hits}
    assert paths <= {"only-here.md", "broken.md"} and "only-here.md" in paths


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    shutil.copytree(FIXTURES / "notes", root)
    report = mdvdb.ingest(root)
    assert report.published and report.files == 4
    return root


def test_ingest_reports_what_the_cli_reports(tmp_path: Path):
    by_library, by_cli = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIXTURES / "notes", by_library)
    shutil.copytree(FIXTURES / "notes", by_cli)
    report = asyncio.run(mdvdb.aingest(by_library))
    printed = _cli_json("ingest", root=by_cli)
    mine = {"schema_version": 1, **report.to_json()}  # the CLI adds the version
    mine["root"] = printed["root"] = "the root"  # two folders
    for key in TIMINGS:
        mine.pop(key), printed.pop(key)
    # The footer records the time of writing: the two files may differ by a byte or two.
    assert abs(mine.pop("index_bytes") - printed.pop("index_bytes")) < 64
    assert mine == printed
    assert mine["files"] == 4 and mine["published"]
    # A named path, as `mdvdb ingest PATH`: only that file is re-checked.
    (by_library / "tar.md").write_text("# tar\n\nNew text.\n", encoding="utf-8")
    again = mdvdb.ingest(by_library, [str(by_library / "tar.md")])
    assert (again.changed, again.unchanged) == (1, 0)


@pytest.mark.slow
def test_schema_clusters_and_grep_match_the_cli_json(project: Path):
    index = mdvdb.open_index(project)
    schema = _cli_json("schema", root=project)
    for printed_only in ("schema_version", "files", "problems_total"):  # what the CLI adds
        schema.pop(printed_only)
    assert _plain(index.schema().to_json()) == schema
    assert {"tags", "category", "title"} <= set(index.schema().fields)
    assert load_schema(index) is index.schema()  # an Index is accepted, as a snapshot is

    clusters = _cli_json("clusters", root=project)
    assert {"schema_version": 1, **_plain(index.clusters().to_json())} == clusters

    for args, options in (
        (("tar",), {}),
        (("the", "-n", "3", "--sort"), {"limit": 3, "sort": True}),
        (("git", "--sort", "--include-frontmatter"), {"sort": True, "include_frontmatter": True}),
        (("Bake", "--source", "dir:."), {"sources": ["dir:."]}),
        ((r"t[a-z]r", "--regex"), {"regex": True}),
    ):
        out = run_cli("grep", *args, "--json", "--root", str(project))
        assert out.returncode == 0, out.stderr
        printed = [json.loads(line) for line in out.stdout.splitlines()]
        assert {line.pop("schema_version") for line in printed} == {1}
        assert printed, args
        mine = _plain([m.to_json() for m in index.grep(args[0], **options)])
        if not options.get("sort"):  # streamed: files come in the order rg's threads find them
            mine, printed = sorted(mine, key=_place), sorted(printed, key=_place)
        assert mine == printed, args


def test_async_forms_answer_like_the_sync_ones(project: Path):
    index = mdvdb.open_index(project)

    async def everything():
        return await asyncio.gather(
            index.asearch("extract a tar archive", limit=3),
            index.aget_document("tar.md"),
            index.astatus(),
            index.aschema(),
            index.aclusters(),
            # sorted: unsorted, ripgrep's threads decide which files' matches come first
            index.agrep("tar", limit=4, sort=True),
        )

    found, doc, status, schema, clusters, grep = asyncio.run(everything())
    assert found.results == index.search("extract a tar archive", limit=3).results
    assert found.results[0].path == "tar.md"
    assert doc == index.get_document("tar.md")
    assert status.files == index.status().files == 4
    assert schema.to_json() == index.schema().to_json()
    assert clusters.to_json() == index.clusters().to_json()
    again = index.grep("tar", limit=4, sort=True)
    assert [m.to_json() for m in grep] == [m.to_json() for m in again]


def test_every_call_has_a_typed_signature_and_an_async_twin():
    calls = {name: getattr(Index, name) for name in ("search", "schema", "clusters", "grep")}
    calls.update(get_document=Index.get_document, status=Index.status)
    for name, call in calls.items():
        twin = getattr(Index, "aget_document" if name == "get_document" else f"a{name}")
        assert inspect.iscoroutinefunction(twin), name
        params = inspect.signature(call).parameters
        assert list(params) == list(inspect.signature(twin).parameters), name
        for param in params.values():
            assert param.kind is not inspect.Parameter.VAR_KEYWORD, (name, param)
            assert param.name == "self" or param.annotation is not inspect.Parameter.empty
    for call, twin in ((mdvdb.ingest, mdvdb.aingest),):
        names = inspect.signature(call).parameters.keys()
        assert names == inspect.signature(twin).parameters.keys()
        assert all(
            p.kind is not inspect.Parameter.VAR_KEYWORD
            for p in inspect.signature(call).parameters.values()
        )


def test_the_front_door_names_every_error_it_documents():
    """`mdvdb.ConfigError`... as the README lists them: the classes the layers raise."""
    errors = [name for name in mdvdb.__all__ if name.endswith(("Error", "Busy"))]
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert len(errors) == 8
    for name in errors:
        error = getattr(mdvdb, name)
        assert issubclass(error, Exception) and error.__name__ == name
        assert f"`mdvdb.{name}`" in readme, name
    with pytest.raises(AttributeError):
        mdvdb.NoSuchError  # noqa: B018


def test_the_library_raises_what_the_cli_reports(project: Path, tmp_path: Path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="not a folder"):
        mdvdb.ingest(missing)
    assert not missing.exists()  # nothing was created on the way
    with pytest.raises(ConfigError, match="not a folder"):
        mdvdb.open_index(missing)
    assert run_cli("ingest", "--root", str(missing)).returncode == 2

    index = mdvdb.open_index(project)
    with pytest.raises(SourceError) as wrong_source:
        index.grep("tar", sources=["dir:nope"])
    out = run_cli("grep", "tar", "--source", "dir:nope", "--root", str(project))
    assert out.returncode == 2 and str(wrong_source.value) in out.stderr

    with pytest.raises(GrepError) as bad_regex:
        index.grep("(", regex=True)
    out = run_cli("grep", "(", "--regex", "--root", str(project))
    assert out.returncode == 1 and "regex" in str(bad_regex.value).lower()

    (project / ".markdownvdb").write_text("MDVDB_CLUSTERING_ENABLED=false\n", encoding="utf-8")
    mdvdb.ingest(project)
    with pytest.raises(QueryError) as no_clusters:
        mdvdb.open_index(project).clusters()
    out = run_cli("clusters", "--root", str(project))
    assert out.returncode == 1 and out.stderr == f"mdvdb: {no_clusters.value}\n"
