"""An incremental pack writes exactly the index a full pack writes from the same caches.

Each step edits a real folder, runs an ingest (which reuses runs of rows of the previous
index, the schema counts and the postings), then deletes the index and builds it again (the
index is part of the cache, so this re-parses and re-embeds what it held: a build from
scratch); every table must be equal, row for row, and so must the footer's meta.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from kernel import index_format
from kernel.config import load_config
from pipeline import ingest, stages
from pipeline.cluster import topics as cluster
from pipeline.pack import duplicates, lexical
from pipeline.pack import splice as splice_module
from pipeline.pack.splice import runs, splice
from pipeline.state import State
from tests.conftest import run_cli

TOPICS = {
    "git": "commit branch merge rebase remote push pull tag history diff",
    "cooking": "flour water yeast oven bake dough salt knead starter loaf",
    "garden": "soil seed water compost prune bloom harvest mulch sunlight root",
}


def page(topic: str, i: int, rating: object = None, extra: str = "") -> str:
    words = TOPICS[topic].split()
    body = "\n\n".join(
        f"## {words[(i + s) % len(words)].title()} {s}\n\n"
        + " ".join(words[(i * 7 + s * 3 + k) % len(words)] for k in range(24))
        for s in range(2 + i % 3)
    )
    rating_line = f"rating: {rating if rating is not None else 800 + i * 13}\n"
    return (
        f"---\ntitle: {topic.title()} note {i}\ntags: [{topic}, {words[i % len(words)]}]\n"
        f"status: {['draft', 'review', 'published'][i % 3]}\n{rating_line}"
        f"updated: 2026-0{1 + i % 9}-1{i % 9}\naliases: [{topic} {i}]\n{extra}---\n"
        f"# {topic.title()} note {i}\n\n{body} #{words[(i + 1) % len(words)]}\n"
    )


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def tables_and_meta(path: Path) -> tuple[dict[str, pa.Table], dict]:
    index = index_format.read_index(path)
    tables = {name: table.combine_chunks() for name, table in index.tables.items()}
    meta = {k: v for k, v in index.meta.items() if k != "written_at"}
    return tables, meta


def assert_same_as_full(root: Path, touched: int = 0) -> dict[str, pa.Table]:
    """Ingest incrementally, then rebuild without the index; the two indexes must be equal.
    `touched`: files whose mtime alone changed since the last pack (their rows are rebuilt)."""
    config = load_config(root, environ={})
    report = ingest.ingest_folder(config)
    assert report.published
    # Rows were reused: every file but the added and changed ones (renamed: added).
    assert report.reused_files == report.files - report.added - report.changed - touched
    incremental, inc_meta = tables_and_meta(config.index_path)
    # The manifest digest the run updated from the last one's (sum in, sum out) is the one
    # hashing every entry gives.
    with State(config.state_path) as state:
        stored = state.get_value(stages.MANIFEST_DIGEST)
        assert stored == stages.manifest_digest(state.manifest())
    config.index_path.unlink()
    assert ingest.ingest_folder(config).published
    full, full_meta = tables_and_meta(config.index_path)
    assert sorted(incremental) == sorted(full)
    for name in full:
        assert incremental[name].schema.equals(full[name].schema, check_metadata=True), name
        assert incremental[name].equals(full[name]), name
    assert inc_meta == full_meta
    return full


@pytest.fixture(scope="module")
def _corpus_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pack") / "notes"
    for i in range(36):
        topic = list(TOPICS)[i % 3]
        write(root, f"{topic}/note-{i:02d}.md", page(topic, i))
    ingest.ingest_folder(load_config(root, environ={}))
    return root


@pytest.fixture
def corpus(_corpus_once: Path, tmp_path: Path) -> Path:
    """The 36 pages with their index, built once for the module and copied per test (mtimes
    kept: the copy is current, and its next ingest reuses every unchanged row)."""
    return Path(shutil.copytree(_corpus_once, tmp_path / "notes", symlinks=True))


def schema_of(tables: dict[str, pa.Table]) -> dict[str, dict]:
    rows = tables["schema"].to_pylist()
    return {r["field"]: r for r in rows}


class ShortcutSpy:
    """What the incremental pack's shortcuts returned: the cluster assignments carried over
    from the previous index (`cluster._carried`) and the near-duplicate groups updated
    (`duplicates.update_groups`); None is a step aside to the long way."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.carried: list[bool] = []
        self.updated: list[bool] = []
        self.spliced: list[bool] = []
        real_carried, real_update = cluster._carried, duplicates.update_groups
        real_spliced = lexical.spliced_tables

        def spliced_tables(*args, **kwargs):
            out = real_spliced(*args, **kwargs)
            self.spliced.append(out is not None)
            return out

        def carried(*args):
            out = real_carried(*args)
            self.carried.append(out is not None)
            return out

        def update_groups(*args):
            out = real_update(*args)
            self.updated.append(out is not None)
            return out

        monkeypatch.setattr(cluster, "_carried", carried)
        monkeypatch.setattr(duplicates, "update_groups", update_groups)
        monkeypatch.setattr(lexical, "spliced_tables", spliced_tables)


@pytest.mark.slow
def test_incremental_packs_equal_full_packs(corpus: Path, monkeypatch: pytest.MonkeyPatch):
    root = corpus
    spy = ShortcutSpy(monkeypatch)
    # 1. One body edit in the middle. The postings are updated from the previous index's:
    # the state folder keeps no analysis cache of its own.
    path = root / "cooking/note-13.md"
    path.write_text(path.read_text() + "\nA new line about sourdough kayaks.\n")
    config = load_config(root, environ={})
    ingest.ingest_folder(config)
    assert not (root / ".markdownvdb.state" / "lexical-cache.npz").exists()
    path.write_text(path.read_text() + "\nAnd one more.\n")
    assert_same_as_full(root)

    # 2. Adds (first, middle and last in path order), a removal, a rename.
    write(root, "aaa/first.md", page("git", 100))
    write(root, "garden/note-17b.md", page("garden", 101))
    write(root, "zzz/last.md", page("garden", 102))
    (root / "git/note-03.md").unlink()
    shutil.move(root / "git/note-06.md", root / "git/renamed-06.md")
    tables = assert_same_as_full(root)
    paths = tables["files"].column("path").to_pylist()
    assert paths == sorted(paths) and "git/renamed-06.md" in paths
    assert "git/note-06.md" not in paths and "git/note-03.md" not in paths

    # 3. A field's type changes: one rating becomes text, so `rating` is mixed.
    write(root, "git/note-09.md", page("git", 9, rating='"very high"'))
    tables = assert_same_as_full(root)
    assert schema_of(tables)["rating"]["type"] == "mixed"
    assert tables["files"].schema.field("fm:rating").type == pa.list_(pa.string())

    # 4. ... and back: the only text rating goes, `rating` is a number again.
    write(root, "git/note-09.md", page("git", 9))
    tables = assert_same_as_full(root)
    assert schema_of(tables)["rating"]["type"] == "number"

    # 5. A new field on two files, then it disappears from both.
    write(root, "git/note-12.md", page("git", 12, extra="owner: ana\n"))
    write(root, "garden/note-14.md", page("garden", 14, extra="owner: {name: bo}\n"))
    tables = assert_same_as_full(root)
    assert schema_of(tables)["owner"]["type"] == "mixed"
    write(root, "git/note-12.md", page("git", 12))
    write(root, "garden/note-14.md", page("garden", 14, extra="owner:\n"))
    tables = assert_same_as_full(root)
    owner = schema_of(tables)["owner"]  # only a null value is left: known, no column
    assert owner["files"] == 0 and owner["column"] is None
    assert "fm:owner" not in tables["files"].column_names
    write(root, "garden/note-14.md", page("garden", 14))
    tables = assert_same_as_full(root)
    assert "owner" not in schema_of(tables)

    # 6. A file whose mtime alone changed is republished at once with its new mtime (so
    # that `status --check` settles), its row rebuilt as a full pack would write it.
    os.utime(root / "cooking/note-01.md", ns=(1_700_000_000_000_000_000,) * 2)
    tables = assert_same_as_full(root, touched=1)
    at = tables["files"].column("path").to_pylist().index("cooking/note-01.md")
    assert tables["files"].column("mtime")[at].as_py() == 1_700_000_000.0
    # Each incremental pack took the shortcuts; each rebuild (no previous index) did not.
    assert spy.carried.count(True) >= 8 and spy.updated.count(True) >= 8, spy.__dict__
    assert spy.spliced.count(True) >= 8, spy.__dict__  # the postings: runs of the old rows


def test_large_changes_take_the_other_paths_and_stay_equal(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
):
    """Many scattered edits: rows gathered instead of sliced, fresh postings placed by one
    search; then more than a fifth of the chunks fresh: postings rebuilt from the cache."""
    root = corpus
    monkeypatch.setattr(splice_module, "MAX_RUNS", 2)
    monkeypatch.setattr(lexical, "SEARCH_EACH_MAX", 0)
    for i in (1, 8, 20, 31):
        topic = list(TOPICS)[i % 3]
        write(root, f"{topic}/note-{i:02d}.md", page(topic, i) + "\nscattered edit words\n")
    assert_same_as_full(root)
    for i in range(0, 36, 2):
        topic = list(TOPICS)[i % 3]
        write(root, f"{topic}/note-{i:02d}.md", page(topic, i + 50))
    assert_same_as_full(root)


def test_from_an_empty_index_and_back(corpus: Path):
    for path in sorted(corpus.rglob("*.md")):
        path.unlink()
    tables = assert_same_as_full(corpus)
    assert tables["files"].num_rows == 0 and tables["lexical"].num_rows == 0
    write(corpus, "new/one.md", page("git", 1))
    tables = assert_same_as_full(corpus)
    assert tables["files"].column("path").to_pylist() == ["new/one.md"]


def test_overlay_problems_stay_equal(corpus: Path):
    root = corpus
    (root / ".markdownvdb.schema.yml").write_text(
        "fields:\n  status:\n    allowed: [draft, review]\n  owner:\n    required: true\n"
    )
    tables = assert_same_as_full(root)
    before = tables["schema_problems"].num_rows
    assert before > 0
    write(root, "git/note-00.md", page("git", 0, extra="owner: ana\n"))
    (root / "garden/note-02.md").unlink()
    tables = assert_same_as_full(root)
    assert tables["schema_problems"].num_rows < before


def test_runs_and_splice():
    source = [-1, 4, 5, 6, -1, -1, 0, 1, 9]
    assert runs(source) == [(-1, 1), (4, 3), (-1, 2), (0, 2), (9, 1)]
    old = pa.table({"x": list(range(10))})
    fresh = pa.table({"x": [100, 101, 102]})
    out = splice(old, fresh, source)
    assert out.column("x").to_pylist() == [100, 4, 5, 6, 101, 102, 0, 1, 9]
    arr = splice(old.column("x"), pa.array([7, 8, 9]), source)
    assert arr.to_pylist() == [7, 4, 5, 6, 8, 9, 0, 1, 9]


def test_an_index_of_format_1_is_refused_then_rebuilt_by_a_plain_ingest(corpus: Path):
    config = load_config(corpus, environ={})
    before = os.stat(config.index_path)
    raw = bytearray(config.index_path.read_bytes())
    raw[8:12] = (1).to_bytes(4, "little")  # the header's format version
    config.index_path.write_bytes(bytes(raw))
    # As an upgrade meets it: the file the last run published, same size and mtime, which
    # the new code cannot read (the state keeps only what that index held).
    os.utime(config.index_path, ns=(before.st_atime_ns, before.st_mtime_ns))
    out = run_cli("search", "commit", "--root", str(corpus))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "format 1" in out.stderr and "mdvdb ingest --full" in out.stderr
    report = ingest.ingest_folder(config)  # no file changed, but the index is of an old format
    assert report.published and report.reused_files == 0
    assert run_cli("search", "commit", "--root", str(corpus)).returncode == 0


def test_a_footer_pointing_outside_the_file_is_a_clear_error(corpus: Path):
    config = load_config(corpus, environ={})
    raw = config.index_path.read_bytes()
    size = index_format.TRAILER.size
    footer_len = int.from_bytes(raw[-size : -size + 8], "little")
    footer = raw[-size - footer_len : -size]
    bad = footer.replace(b'"rows":', b'"rows":9', 1)  # a row count the buffers cannot hold
    # A footer that matches its checksum (written so), still refused: the buffers say no.
    trailer = index_format.TRAILER.pack(len(bad), index_format._xxh3([bad]), index_format.MAGIC)
    config.index_path.write_bytes(raw[: -size - footer_len] + bad + trailer)
    with pytest.raises(index_format.IndexDamaged, match="index damaged"):
        index_format.read_index(config.index_path)


def test_copying_from_the_previous_index_falls_back_to_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Slices of the previous index are copied file-to-file; where the file system refuses
    (EXDEV, ENOSYS...) after some bytes, the rest goes through memory and the file is the same."""
    import errno

    import numpy as np

    table = pa.table(
        {
            "n": pa.array(np.arange(100_000, dtype=np.int64)),
            "s": pa.array([f"row {i}" for i in range(100_000)]),
        }
    )
    index_format.write_index(tmp_path / "a.index", {"t": table}, {})
    previous = index_format.read_index(tmp_path / "a.index")
    old = previous.tables["t"]
    spliced = pa.concat_tables([old.slice(50_000), table.slice(0, 10), old.slice(0, 50_000)])
    index_format.write_index(tmp_path / "copied.index", {"t": spliced}, {}, source=previous)
    real = os.copy_file_range
    calls = []

    def refuses_after_one(src, dst, count, offset_src=None, offset_dst=None):
        calls.append(count)
        if len(calls) > 1:
            raise OSError(errno.EXDEV, "cross-device")
        return real(src, dst, min(count, 4096), offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", refuses_after_one)
    index_format.write_index(tmp_path / "fallback.index", {"t": spliced}, {}, source=previous)
    assert len(calls) == 2  # one partial copy, one refusal, then plain writes only
    want = spliced.combine_chunks()
    for name in ("copied.index", "fallback.index"):
        assert index_format.read_index(tmp_path / name).tables["t"].equals(want), name


def _chunk_groups(tables: dict[str, pa.Table], prefix: str) -> dict[str, set[int]]:
    """The near-duplicate groups of the chunks of files under `prefix`, by path."""
    paths = tables["files"].column("path").to_pylist()
    file_ids = tables["chunks"].column("file_id").to_numpy()
    groups = tables["near_duplicates"].column("group").to_numpy()
    found: dict[str, set[int]] = {}
    for chunk, file_id in enumerate(file_ids.tolist()):
        if paths[file_id].startswith(prefix):
            found.setdefault(paths[file_id], set()).add(int(groups[chunk]))
    return found


def test_near_duplicate_groups_stay_equal(corpus: Path, monkeypatch: pytest.MonkeyPatch):
    """Copies of a page in version folders: added, joined by another, the group's first
    member removed, one copy edited away. Signatures are reused row for row and the groups
    updated around what changed (`duplicates.update_groups`); every step equals a full
    rebuild."""
    root = corpus
    spy = ShortcutSpy(monkeypatch)
    text = page("git", 5).replace("git", "gitops")
    for v in (1, 2, 3):
        write(root, f"versions/v{v}/page.md", text)
    groups = _chunk_groups(assert_same_as_full(root), "versions/")
    assert len(groups) == 3 and all(g == groups["versions/v1/page.md"] for g in groups.values())
    assert min(groups["versions/v1/page.md"]) >= 0  # every section has copies
    write(root, "versions/v4/page.md", text)
    (root / "versions/v1/page.md").unlink()
    write(root, "versions/v2/page.md", page("cooking", 77).replace("cooking", "baking"))
    groups = _chunk_groups(assert_same_as_full(root), "versions/")
    assert groups["versions/v3/page.md"] == groups["versions/v4/page.md"]
    assert min(groups["versions/v3/page.md"]) >= 0
    assert not groups["versions/v2/page.md"] & groups["versions/v3/page.md"]
    assert spy.updated.count(True) == 2, spy.updated


def test_an_index_without_near_duplicates_is_refused_then_rebuilt_by_a_plain_ingest(
    corpus: Path,
):
    config = load_config(corpus, environ={})
    old = index_format.read_index(config.index_path)
    tables = {name: t for name, t in old.tables.items() if name != "near_duplicates"}
    meta = {k: v for k, v in old.meta.items() if k != "near_duplicates"}
    index_format.write_index(config.index_path, tables, meta, source=old)
    del old
    out = run_cli("search", "commit", "--root", str(corpus))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "near-duplicate" in out.stderr and "mdvdb ingest" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    report = ingest.ingest_folder(config)  # rows reused, signatures computed for every chunk
    assert report.published and report.reused_files == report.files
    assert run_cli("search", "commit", "--root", str(corpus)).returncode == 0
    rebuilt, _ = tables_and_meta(config.index_path)
    config.index_path.unlink()
    assert ingest.ingest_folder(config).published
    full, _ = tables_and_meta(config.index_path)
    assert rebuilt["near_duplicates"].equals(full["near_duplicates"])


def _lexical_tables(files: pa.Table, chunks: pa.Table) -> dict[str, pa.Table]:
    postings = lexical.build_postings(lexical.analysed_store(files, chunks))
    return {
        "lexical": lexical.postings_table(postings),
        "lexical_forward": lexical.forward_table(postings),
        lexical.TF_TABLE: pa.table({"tf": pa.array(postings.tf, pa.float32())}),
        lexical.LENGTHS_TABLE: pa.table({"length": pa.array(postings.lengths, pa.float32())}),
    }


@pytest.mark.parametrize("seed", range(6))
def test_updated_forward_view_equals_a_fresh_transpose(seed: int):
    """The forward view an incremental pack derives from the previous one (no sort of every
    posting) is the transpose of the updated postings, whatever chunks left, came or were
    kept (including new terms, terms that vanish, empty chunks, edits at both ends)."""
    import random

    import numpy as np

    rng = random.Random(seed)
    words = " ".join(TOPICS.values()).split() + [f"rare{k}" for k in range(40)]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))

    old_texts = [text() for _ in range(rng.randint(30, 80))]
    # The new chunks: each old chunk kept (same row content) or dropped, fresh ones inserted.
    source, new_texts = [], []
    for row, old_text in enumerate(old_texts):
        while rng.random() < 0.15:
            source.append(-1)
            new_texts.append(text())
        if rng.random() < 0.8:
            source.append(row)
            new_texts.append(old_text)
    for _ in range(rng.randint(0, 3)):
        source.append(-1)
        new_texts.append(text())

    def tables(texts: list[str]) -> tuple[pa.Table, pa.Table]:
        files = pa.table(
            {
                "title": pa.array(["Note"], pa.string()),
                "aliases": pa.array([[]], pa.list_(pa.string())),
            }
        )
        chunks = pa.table(
            {
                "file_id": pa.array(np.zeros(len(texts), np.int32)),
                "heading": pa.array([""] * len(texts), pa.string()),
                "heading_path": pa.array([[] for _ in texts], pa.list_(pa.string())),
                "text": pa.array(texts, pa.string()),
                "sha256": pa.array([str(i) for i in range(len(texts))], pa.string()),
            }
        )
        return files, chunks

    old = _lexical_tables(*tables(old_texts))
    files, chunks = tables(new_texts)
    source_array = np.array(source, dtype=np.int64)
    updated = lexical.update_postings(old, files, chunks, source_array)
    expected = lexical.transpose(updated.chunk_ids, len(source))
    assert updated.forward.equals(expected)
    # and the postings themselves are those of a build from scratch
    rebuilt = lexical.build_postings(lexical.analysed_store(files, chunks))
    assert np.array_equal(updated.chunk_ids, rebuilt.chunk_ids)
    assert updated.forward.equals(rebuilt.forward)
    # the tables an edit writes as runs of the previous rows: the same values
    spliced = lexical.spliced_tables(old, files, chunks, source_array)
    assert spliced is not None
    reference = {
        "lexical": lexical.postings_table(updated),
        "lexical_forward": lexical.forward_table(updated),
        lexical.TF_TABLE: pa.table({"tf": pa.array(updated.tf, pa.float32())}),
        lexical.LENGTHS_TABLE: pa.table({"length": pa.array(updated.lengths, pa.float32())}),
    }
    for name, table in reference.items():
        assert spliced[name].schema.equals(table.schema), name
        assert spliced[name].combine_chunks().equals(table), name
    # without the previous forward view, the same result by a transpose
    del old["lexical_forward"]
    assert lexical.spliced_tables(old, files, chunks, source_array) is None
    again = lexical.update_postings(old, files, chunks, source_array)
    assert again.forward.equals(expected)


def test_the_manifest_digest_is_updated_from_the_stored_one():
    """An edit updates the stored digest by the entries that left and came: the same value
    as hashing every entry, in any order; a digest of the older kind is not updated."""
    from pipeline.state import ManifestEntry
    from pipeline.walk.discover import manifest_digest, updated_digest

    before = [ManifestEntry(f"d/{i}.md", i, i, f"{i:064x}") for i in range(50)]
    edited = ManifestEntry("d/7.md", 8, 9, "f" * 64)
    added = ManifestEntry("a/new.md", 1, 1, "e" * 64)
    after = [e for e in before if e.path not in ("d/7.md", "d/9.md")] + [edited, added]
    stored = manifest_digest(before)
    assert stored == manifest_digest(list(reversed(before)))
    updated = updated_digest(stored, [before[7], before[9]], [edited, added])
    assert updated == manifest_digest(after) != stored
    assert updated_digest("0" * 64, [before[7]], [edited]) is None


def test_the_published_index_says_exactly_which_files_it_holds(corpus: Path):
    """A run that cannot trust discover's change list asks the index which of every file's
    shas it already holds (those are not parsed again): exactly the held ones, for the
    index's own chunking and build only; a sha it does not hold is asked again."""
    from pipeline.state import Published

    config = load_config(corpus, environ={})
    index = index_format.read_index(config.index_path)
    held = index.tables["files"].column("sha256").to_pylist()
    build_key = index.meta["build_key"]
    chunk_key = build_key.rpartition("|")[2]
    published = Published(config.index_path, True)
    asked = [*held, "0" * 64, held[3], "f" * 64]
    assert published.files_with(chunk_key, asked) == set(held)
    assert published.files_built_with(build_key, asked) == set(held)
    assert published.files_with(chunk_key, ["0" * 64]) == set()
    # A few shas (the other way round: the column is searched for them).
    assert published.files_with(chunk_key, [held[3], "0" * 64, held[3]]) == {held[3]}
    assert published.files_built_with(build_key, [held[0]]) == {held[0]}
    assert published.files_with(chunk_key, []) == set()
    assert published.files_with(chunk_key + "x", held) == set()
    assert published.files_built_with(build_key + "x", held) == set()
    assert Published(config.index_path, False).files_with(chunk_key, held) == set()


def test_a_few_shas_are_found_by_their_bytes_as_arrow_finds_them():
    """An edit's few shas are looked for in the index's sha columns by comparing fixed-width
    bytes (`state.few_fixed_width_rows`): the rows Arrow's `is_in` finds, first row of
    repeats included, over a sliced column too; anything it cannot answer exactly (many
    keys, mixed widths, a NUL, nulls, strings of other lengths) is left to Arrow (None)."""
    import numpy as np
    import pyarrow.compute as pc

    from pipeline.state import few_fixed_width_rows

    rng = np.random.default_rng(5)
    shas = [f"{int(x):064x}" for x in rng.integers(0, 2**63, size=200)]
    column = pa.array(shas + shas[:3], pa.string())
    for values in (column, column.slice(17), column.slice(0, 0)):
        asked = [shas[20], shas[1], "0" * 64, shas[150], shas[199]]
        hits = pc.is_in(values, value_set=pa.array(asked)).to_numpy(zero_copy_only=False)
        want: dict[str, int] = {}
        for row in np.flatnonzero(hits).tolist():
            want.setdefault(values[row].as_py(), row)
        assert few_fixed_width_rows(values, asked) == want
    assert few_fixed_width_rows(column, shas[:17]) is None  # many
    assert few_fixed_width_rows(column, [shas[0], "abc"]) is None  # two widths
    assert few_fixed_width_rows(column, ["0" * 63 + "\0"]) is None  # a NUL
    assert few_fixed_width_rows(pa.array([shas[0], None]), [shas[0]]) is None
    assert few_fixed_width_rows(pa.array([shas[0], "short"]), [shas[0]]) is None
