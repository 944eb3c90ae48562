"""The IVF first pass (kernel/ivf.py, pipeline/pack/ivf.py, query/score/vector.py IvfSide): lists
built at pack, forced on here by MDVDB_IVF_MIN_CHUNKS on a small generated corpus; recall against
the exact scan, old indexes, damaged lists, incremental packs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench.generate import generate
from kernel import index_format, ivf
from kernel.config import load_config
from query import open_index
from query.rank.search import mode_scores
from query.score import vector
from tests.conftest import build_index, run_cli

FORCE = {"MDVDB_IVF_MIN_CHUNKS": "100"}
QUERIES = [
    "compress a tar archive",
    "git rebase onto a remote branch",
    "bake bread with a sourdough starter",
    "database transaction and index",
    "firewall port latency",
    "python package import test",
    "garden compost and mulch",
    "invoice tax audit",
    "unpack a zip bundle",
    "merge history diff",
]


@pytest.fixture(scope="module")
def _built(tmp_path_factory) -> Path:
    """Built in this process (`build_index`: the ingest the command runs); the tests here
    read the lists, and the CLI's own commands (`search`, `status --verify`) stay real."""
    return build_index(generate(tmp_path_factory.mktemp("ivf") / "gen", 200), env=FORCE)


@pytest.fixture
def built(_built: Path, tmp_path: Path) -> Path:
    """A copy of the generated corpus with its IVF index (mtimes kept: current)."""
    return Path(shutil.copytree(_built, tmp_path / "gen", symlinks=True))


def _index(root: Path, mode: str):
    return open_index(config=load_config(root, environ={"MDVDB_SEARCH_FIRST_PASS": mode}))


def _lists(root: Path):
    file = index_format.read_index(root / ".markdownvdb.index")
    n, d = file.tables["chunks"].num_rows, int(file.meta["dimensions"])
    return file, ivf.read(file.tables.get(ivf.TABLE), file.meta, n, d)


def test_pack_stores_sound_lists_and_verify_checks_them(built: Path):
    file, lists = _lists(built)
    n = file.tables["chunks"].num_rows
    assert lists is not None and lists.lists == round(n**0.5)
    assert sorted(np.asarray(lists.rows).tolist()) == list(range(n))  # each chunk once
    assert ivf.problems(lists, file.meta, n, int(file.meta["dimensions"])) == []
    result = run_cli("status", "--verify", cwd=built)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ivf_pass_recall_against_the_exact_scan(built: Path, monkeypatch):
    """Probing a third of the rows and rescoring 150: the fused top 10 is the exact one,
    and the pass really skipped rows (it is not a full scan in disguise)."""
    monkeypatch.setattr(vector, "IVF_MIN_PROBE_ROWS", 0)
    monkeypatch.setattr(vector, "IVF_PROBE_SHARE", 0.3)
    monkeypatch.setattr(vector, "IVF_RESCORE_DEPTH", 150)
    exact, fast = _index(built, "exact"), _index(built, "ivf")
    recalls = []
    for query in QUERIES:
        want, _ = mode_scores(exact, query, "hybrid")
        got, _ = mode_scores(fast, query, "hybrid")
        top = set(vector.top_rows(want, 10).tolist())
        recalls.append(len(top & set(vector.top_rows(got, 10).tolist())) / 10)
    side = fast.snapshot.cache[("ivf_side", 0.5)]
    ids, _ = side.probe(np.stack([side.centroids[0], side.centroids[1]]), 1.0)
    assert len(ids) < 0.6 * len(side.order)
    assert np.mean(recalls) >= 0.99


def test_cli_search_answers_the_same_with_ivf_and_exact(built: Path):
    """The command with each first pass (one query: two `mdvdb` processes); the library
    answers three queries the same with both."""
    answers = [
        run_cli("search", QUERIES[0], "--json", cwd=built, env={"MDVDB_SEARCH_FIRST_PASS": mode})
        for mode in ("ivf", "exact")
    ]
    assert all(a.returncode == 0 for a in answers), answers[0].stderr
    hits = [[(h["path"], h["score"]) for h in json.loads(a.stdout)["results"]] for a in answers]
    assert hits[0] == hits[1] and hits[0]
    fast, exact = _index(built, "ivf"), _index(built, "exact")
    for query in QUERIES[:3]:
        got = [(r.path, r.start_line, r.score) for r in fast.search(query).results]
        assert got == [(r.path, r.start_line, r.score) for r in exact.search(query).results]
        assert got


def _rewrite(root: Path, tables_change, meta_change=None) -> None:
    file = index_format.read_index(root / ".markdownvdb.index")
    tables = tables_change(dict(file.tables))
    meta = {k: v for k, v in file.meta.items() if k not in ("format_version", "written_at")}
    if meta_change:
        meta = meta_change(meta)
    index_format.write_index(root / ".markdownvdb.index", tables, meta)


def test_an_index_without_lists_is_searched_as_before(built: Path):
    _rewrite(
        built,
        lambda t: {k: v for k, v in t.items() if k != ivf.TABLE},
        lambda m: {k: v for k, v in m.items() if k != ivf.META_KEY},
    )
    fast, exact = _index(built, "ivf"), _index(built, "exact")
    for query in QUERIES[:3]:
        got = [(r.chunk_id, r.score) for r in fast.search(query).results]
        assert got == [(r.chunk_id, r.score) for r in exact.search(query).results]
    assert not any(isinstance(k, tuple) and k[0] == "ivf_side" for k in fast.snapshot.cache)
    assert run_cli("status", "--verify", cwd=built).returncode == 0


def test_damaged_lists_are_reported_not_crashed_on(built: Path):
    """Lists whose checksums hold but that leave a chunk out: search falls back to the other
    passes, `status --verify` names the table."""
    import pyarrow as pa

    def drop_one(tables):
        table = tables[ivf.TABLE]
        rows = table.column("rows").to_pylist()
        rows[0] = rows[0][1:]
        column = pa.array(rows, pa.list_(pa.int32()))
        return {**tables, ivf.TABLE: table.set_column(1, "rows", column)}

    _rewrite(built, drop_one)
    env = {"MDVDB_SEARCH_FIRST_PASS": "ivf"}
    result = run_cli("search", QUERIES[0], "--json", cwd=built, env=env)
    assert result.returncode == 0 and json.loads(result.stdout)["results"], result.stderr
    verify = run_cli("status", "--verify", cwd=built)
    assert verify.returncode != 0
    assert "table ivf" in verify.stdout + verify.stderr
    assert "Traceback" not in verify.stderr


def _add_files(root: Path, count: int, start: int) -> None:
    """`count` new generated pages (another seed: other text), as added/note-{start + i}.md."""
    source = generate(root.parent / f"more{start}", count, seed=start)
    target = root / "added"
    target.mkdir(exist_ok=True)
    for i in range(count):
        [path] = source.rglob(f"note-{i}.md")
        shutil.copy(path, target / f"note-{start + i}.md")


def _sound(root: Path) -> bool:
    """The checks `status --verify` makes of the lists (the test above runs the command)."""
    file, lists = _lists(root)
    n, d = file.tables["chunks"].num_rows, int(file.meta["dimensions"])
    return lists is not None and ivf.problems(lists, file.meta, n, d) == []


def test_incremental_pack_keeps_the_lists_and_retrains_on_drift(built: Path):
    """Incremental packs (the ingest `mdvdb ingest` runs, in this process)."""
    file, before = _lists(built)
    n_before = file.tables["chunks"].num_rows
    _add_files(built, 5, 1000)  # ~15 chunks: joined to the existing lists
    build_index(built, env=FORCE)
    file, after = _lists(built)
    n = file.tables["chunks"].num_rows
    assert n > n_before and after is not None
    assert np.array_equal(np.asarray(after.centroids), np.asarray(before.centroids))
    assert file.meta[ivf.META_KEY]["assigned_since"] == n - n_before
    assert sorted(np.asarray(after.rows).tolist()) == list(range(n))
    assert _sound(built)
    _add_files(built, 60, 2000)  # > 20% of the index since training: retrained
    build_index(built, env=FORCE)
    file, again = _lists(built)
    assert file.meta[ivf.META_KEY]["assigned_since"] == 0
    assert file.meta[ivf.META_KEY]["trained_rows"] == file.tables["chunks"].num_rows
    assert again is not None and _sound(built)


def test_rows_are_gathered_from_each_piece_as_take_gives_them():
    """Pack's IVF step reads the fresh rows' vectors piece by piece (a `take` on the
    spliced column would copy every piece first): the same rows, null vectors as zeros."""
    import pyarrow as pa

    from pipeline.pack import ivf as pack_ivf

    dims = 4
    rng = np.random.default_rng(5)

    def piece(n: int, null_at: int | None = None):
        flat = pa.array(rng.standard_normal(n * dims).astype(np.float32))
        mask = None if null_at is None else pa.array([i == null_at for i in range(n)])
        if null_at is not None:
            values = flat.to_numpy().copy()
            values[null_at * dims : (null_at + 1) * dims] = 0
            flat = pa.array(values)
        return pa.FixedSizeListArray.from_arrays(flat, dims, mask=mask)

    column = pa.chunked_array([piece(5), piece(3, null_at=1), piece(7)])
    chunks = pa.table({"vector": column})
    rows = np.array([0, 4, 6, 7, 9, 14])
    taken = column.take(pa.array(rows)).combine_chunks()
    expected = np.nan_to_num(
        np.asarray(taken.values.to_numpy(zero_copy_only=False), dtype=np.float32)
    ).reshape(-1, dims)
    assert np.array_equal(pack_ivf._rows(chunks, dims, rows), expected)
