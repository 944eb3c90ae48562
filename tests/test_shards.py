"""A sharded index (`MDVDB_SHARDS=N`) answers exactly as the one-file index of the same files,
an edit rewrites only the shard it touches, and a reader holds one generation while the next
is published (docs/scale-out.md)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kernel import shards
from tests.conftest import build_index, run_cli, unpack_corpus

SHARDED = {"MDVDB_SHARDS": "4"}
TOPICS = [
    ("tar", "archive", "Extract a tar archive with gzip compression and list its files"),
    ("git", "vcs", "Commit staged changes and push the branch to the remote"),
    ("curl", "network", "Download a file over HTTP and follow redirects"),
    ("ssh", "network", "Open a secure shell on a remote host with a key"),
    ("find", "files", "Find files by name and run a command on each match"),
    ("grep", "text", "Search text for a pattern and print matching lines"),
    ("sed", "text", "Replace a pattern in a stream of text lines"),
    ("docker", "containers", "Run a container image and publish a port"),
]


def _project(root: Path) -> Path:
    """~50 pages over two version folders: copies of a page in v1/ and v2/ are near
    duplicates (and land in different shards), with frontmatter of several types."""
    for version in ("v1", "v2"):
        for i, (name, category, text) in enumerate(TOPICS):
            for part in range(3):
                page = root / version / category / f"{name}-{part}.md"
                page.parent.mkdir(parents=True, exist_ok=True)
                rating = f"rating: {i * 3 + part}\n"
                if part == 1:  # an int in most shards' files, a string in one: "mixed"
                    rating += "level: high\n" if (version, i) == ("v2", 3) else f"level: {i}\n"
                page.write_text(
                    f"---\ntitle: {name} part {part}\ncategory: {category}\n"
                    f"tags: [{name}, {category}]\n{rating}---\n# {name} {part}\n\n"
                    f"{text}.\n\n## Examples of {name}\n\n- {text} (example {part}).\n"
                    f"- Another {name} example for {category} work.\n",
                    encoding="utf-8",
                )
    return root


def _ingest(root: Path, env: dict | None = None) -> None:
    done = run_cli("ingest", "--root", str(root), env=env)
    assert done.returncode == 0, done.stderr


def _search(root: Path, query: str, *args: str, env: dict | None = None) -> dict:
    """The whole JSON answer: paths, lines, scores, excerpts, chunk and file ids (a sharded
    index numbers its rows as the one-file index does), duplicates, tiers, totals."""
    done = run_cli("search", query, "--root", str(root), "--json", "-n", "10", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _json(root: Path, *args: str, env: dict | None = None):
    done = run_cli(*args, "--root", str(root), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same project indexed twice: one file, and four shards."""
    base = tmp_path_factory.mktemp("shards")
    one = _project(base / "one")
    four = base / "four"
    shutil.copytree(one, four)  # copy2: the same mtimes
    build_index(one)
    build_index(four, SHARDED)
    return one, four


QUERIES = ["tar archive gzip", "secure shell key", "pattern text lines"]


@pytest.mark.parametrize("mode", ["lexical", "hybrid", "semantic"])
@pytest.mark.slow
def test_sharded_search_ranks_as_one_file(twins, mode: str) -> None:
    one, four = twins
    assert (four / ".markdownvdb.index.shards" / "manifest.json").is_file()
    assert not (four / ".markdownvdb.index").exists()
    for query in QUERIES:
        expected = _search(one, query, "--mode", mode)
        assert expected["results"], query
        assert _search(four, query, "--mode", mode, env=SHARDED) == expected, query


@pytest.mark.slow
def test_sharded_filters_facets_get_schema_status(twins) -> None:
    one, four = twins
    for args in (
        ("--filter", "category=network"),
        ("--filter", "rating>=6"),
        ("--tag", "git"),
        ("--files",),
        ("--per-file", "1"),
    ):
        expected = _search(one, "example work", *args)
        assert _search(four, "example work", *args, env=SHARDED) == expected, args
    assert _json(four, "schema", env=SHARDED) == _json(one, "schema")
    refused = run_cli("search", "x", "--filter", "level>=2", "--root", str(four), env=SHARDED)
    assert refused.returncode == 2 and "'level' is mixed" in refused.stderr
    page = "v2/vcs/git-1.md"
    assert _json(four, "get", page, env=SHARDED) == _json(one, "get", page)
    status = _json(four, "status", env=SHARDED)
    assert (status["files"], status["chunks"]) == (48, _json(one, "status")["chunks"])
    verify = run_cli("status", "--verify", "--root", str(four), env=SHARDED)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "verify:   ok" in verify.stdout
    # An index built sharded is still found without the setting (and the reverse).
    assert _search(four, "tar archive gzip") == _search(one, "tar archive gzip")


@pytest.mark.slow
def test_verify_names_a_damaged_shard(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    _ingest(root, SHARDED)
    manifest = shards.read_manifest(root / ".markdownvdb.index.shards")
    victim = root / ".markdownvdb.index.shards" / manifest.entries[2].name
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF  # a byte of the first column's buffers
    victim.write_bytes(bytes(data))
    verify = run_cli("status", "--verify", "--root", str(root), env=SHARDED)
    assert verify.returncode == 1
    assert manifest.entries[2].name in verify.stderr


@pytest.mark.slow
def test_an_edit_rewrites_only_its_shard(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    folder = root / ".markdownvdb.index.shards"
    _ingest(root, SHARDED)
    before = shards.read_manifest(folder)
    stats = {e.name: os.stat(folder / e.name).st_mtime_ns for e in before.entries}
    _ingest(root, SHARDED)  # nothing changed: no shard written
    same = shards.read_manifest(folder)
    assert [e.name for e in same.entries] == [e.name for e in before.entries]
    edited = "v1/text/sed-2.md"
    page = root / edited
    page.write_text(page.read_text() + "\nOne more line about sed.\n", encoding="utf-8")
    _ingest(root, SHARDED)
    after = shards.read_manifest(folder)
    touched = shards.shard_of(edited, 4)
    for old, new in zip(before.entries, after.entries, strict=True):
        if old.shard == touched:
            assert new.name != old.name and new.generation == after.generation
        else:
            assert new.name == old.name, "an untouched shard was rewritten"
            assert os.stat(folder / new.name).st_mtime_ns == stats[old.name]
    assert "One more line about sed" in json.dumps(_json(root, "get", edited, env=SHARDED))
    # Files no manifest of the last two generations names are gone.
    names = {p.name for p in folder.iterdir() if p.name.endswith(".index")}
    assert names <= after.names() | same.names()


@pytest.mark.slow
def test_a_reader_holds_its_generation_while_the_next_is_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mdvdb import open_index

    root = _project(tmp_path / "p")
    _ingest(root, SHARDED)
    monkeypatch.setenv("MDVDB_SHARDS", "4")
    index = open_index(root)
    page = root / "v1" / "text" / "sed-2.md"
    with index.pinned():
        first = index.search("zebra", mode="lexical").results
        assert first == []
        for word in ("zebra", "zebra giraffe"):  # two publishes: the pinned files are removed
            page.write_text(page.read_text() + f"\n{word} crossing.\n", encoding="utf-8")
            _ingest(root, SHARDED)
        gone = {e.name for e in index.snapshot.manifest.entries} - {
            p.name for p in (root / ".markdownvdb.index.shards").iterdir()
        }
        assert gone, "the pinned generation's shard was removed from the folder"
        assert index.search("zebra", mode="lexical").results == []  # still the old set
        assert index.get_document("v1/text/sed-2.md") is not None
    hits = index.search("zebra", mode="lexical").results
    assert [hit.path for hit in hits] == ["v1/text/sed-2.md"]


TLDR_QUERIES = [
    "extract a tar archive",
    "list files sorted by size",
    "git commit amend",
    "compress an image",
    "show network interfaces",
    "kill a process by name",
    "convert video format",
    "disk usage of a directory",
]


@pytest.mark.slow
def test_tldr_subset_sharded_ranks_as_one_file(
    corpora_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """1,600 tldr pages spread over every platform folder (near copies across folders),
    indexed as one file and as four shards, searched in process and with the staged rounds
    of a router over shard groups: the same top 10 (path and lines, and scores)."""
    pages = unpack_corpus(corpora_dir, "tldr") / "pages"
    files = sorted(pages.rglob("*.md"))
    step = len(files) / 1600
    picked = [files[int(i * step)] for i in range(1600)]
    one, four = tmp_path / "one", tmp_path / "four"
    for target in (one, four):
        for source in picked:
            dest = target / source.relative_to(pages)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    _ingest(one)
    _ingest(four, SHARDED)
    for mode in ("lexical", "hybrid"):
        for query in TLDR_QUERIES:
            expected = _search(one, query, "--mode", mode)
            assert expected["results"], query
            assert _search(four, query, "--mode", mode, env=SHARDED) == expected, (mode, query)
    # and in the staged rounds of a router over shard groups (query.rank.shard_search),
    # whose merges must break the ties of near copies as the one file does
    from kernel.config import load_config
    from query import open_index
    from query.rank import shard_search

    monkeypatch.setattr(shard_search, "IN_PROCESS", True)
    staged = open_index(config=load_config(four, {**os.environ, **SHARDED}))
    reference = open_index(config=load_config(one, dict(os.environ)))
    for mode in ("lexical", "hybrid"):
        for query in TLDR_QUERIES:
            want = [
                (r.path, r.start_line, r.score) for r in reference.search(query, mode=mode).results
            ]
            got = [(r.path, r.start_line, r.score) for r in staged.search(query, mode=mode).results]
            assert got == want, (mode, query)


def test_a_cluster_chosen_by_the_folder_is_refused(tmp_path: Path) -> None:
    """A folder's `.markdownvdb` may not send the user's queries to a Ray cluster it names."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.md").write_text("# a\n\ntext\n", encoding="utf-8")
    (root / ".markdownvdb").write_text("MDVDB_RAY_SERVE=203.0.113.9:6379\n", encoding="utf-8")
    done = run_cli("search", "text", "--root", str(root), env=SHARDED)
    assert done.returncode == 1, done.stdout
    assert done.stderr.count("\n") == 1 and "refusing to send queries" in done.stderr


@pytest.mark.slow
def test_verify_checks_the_stored_row_order(tmp_path: Path) -> None:
    """The global file stores the one-file order (a reader numbers rows by it without
    sorting paths); `status --verify` recomputes it from the shards and names a wrong one."""
    import numpy as np
    import pyarrow as pa

    from kernel import index_format

    root = _project(tmp_path / "p")
    _ingest(root, SHARDED)
    folder = root / ".markdownvdb.index.shards"
    manifest = shards.read_manifest(folder)
    extra = index_format.read_index(folder / manifest.global_file)
    assert {"shard_files", "shard_chunks", "chunk_files"} <= set(extra.tables)
    tables = {name: table.combine_chunks() for name, table in extra.tables.items()}
    ids = tables["chunk_files"].column("file_id").to_numpy().copy()
    ids[[0, -1]] = ids[[-1, 0]]  # still a valid-looking column, but not the shards' files
    ids = np.sort(ids)
    ids[0] += 1
    tables["chunk_files"] = pa.table({"file_id": pa.array(ids, pa.int32())})
    index_format.write_index(folder / manifest.global_file, tables, extra.meta)
    verify = run_cli("status", "--verify", "--root", str(root), env=SHARDED)
    assert verify.returncode == 1
    assert "stored chunk files" in verify.stderr + verify.stdout


def test_shards_of_an_older_format_are_rebuilt_by_a_plain_ingest(notes: Path) -> None:
    """After an upgrade that changes the index format, `mdvdb ingest` rebuilds every shard
    (their records were cut from caches of the older format), as it rebuilds a one-file
    index: before, it kept them, and a search then failed on the old format."""
    assert run_cli("ingest", cwd=notes, env=SHARDED).returncode == 0
    manifest = shards.read_manifest(notes / ".markdownvdb.index.shards")
    for name in [manifest.global_file, *(e.name for e in manifest.entries)]:
        path = notes / ".markdownvdb.index.shards" / name
        data = bytearray(path.read_bytes())
        data[8:12] = (4).to_bytes(4, "little")  # the format this release replaced
        path.write_bytes(bytes(data))
    old = run_cli("search", "tar", cwd=notes, env=SHARDED)
    assert old.returncode == 1 and "has index format 4" in old.stderr
    assert "Traceback" not in old.stderr
    done = run_cli("ingest", cwd=notes, env=SHARDED)
    assert done.returncode == 0, done.stderr
    found = run_cli("search", "--json", "extract tar", cwd=notes, env=SHARDED)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "tar.md"
