"""The cold search path reads the index without pyarrow (`kernel.arrow_lite`): every column it
decodes must read exactly as pyarrow reads it, a plain `mdvdb search` must never import
pyarrow, its output must be byte for byte the pyarrow reader's, and damage must still be one
line."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kernel import arrow_lite, index_format
from kernel.config import load_config
from query import open_index
from tests.conftest import build_index, run_cli

ENV = {"MDVDB_NO_WARM": "1"}
ARROW = {**ENV, index_format.ARROW_READER_ENV: "1"}

PAGES = {
    "tools/tar.md": "---\ntitle: Tar archives\ntags: [archive, cli]\nstatus: draft\n"
    "rating: 4\nreviewed: true\nupdated: 2024-05-01\nowner: {name: ann}\nmixed: 3\n---\n"
    "# Tar archives\n\nExtract a tar archive with `tar xf file.tar`.\n\n"
    "## Create\n\nCreate one with `tar cf out.tar folder/`.\n",
    "tools/zip.md": "---\ntitle: Zip files\ntags: [archive]\nstatus: published\nrating: 2.5\n"
    "reviewed: false\nupdated: 2023-01-02T10:00:00\nmixed: [a, b]\n---\n"
    "# Zip files\n\nUnpack a zip file with `unzip file.zip`.\n",
    "vcs/git.md": "---\ntitle: Undo a commit\ntags: [git]\nstatus: published\n---\n"
    "# Undo a commit\n\nUse `git reset HEAD~1` to undo the last commit.\n\n"
    "## Keep the changes\n\n`git reset --soft HEAD~1` keeps them staged.\n",
    "vcs/ÄÖ ümlaut.md": "# Çà et là: İstanbul\n\nNon-ASCII headings and paths, lowered.\n",
    "cook/soup.md": "# Soup\n\nBoil the stock, add the vegetables, simmer for an hour.\n",
    "cook/broken.md": "---\ntitle: [unclosed\n---\n# Broken frontmatter\n\nStill indexed.\n",
    "cook/copy.md": "# Soup\n\nBoil the stock, add the vegetables, simmer for an hour.\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lite")
    for rel, text in PAGES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return build_index(root, ENV)


def test_every_column_reads_as_pyarrow_reads_it(project: Path):
    path = project / ".markdownvdb.index"
    arrow = index_format.read_index(path)
    lite = index_format.read_index(path, lite=True)
    assert lite.meta == arrow.meta and set(lite.tables) == set(arrow.tables)
    kinds: set[str] = set()
    for name, table in arrow.tables.items():
        other = lite.tables[name]
        assert isinstance(other, arrow_lite.LiteTable), name
        assert other.num_rows == table.num_rows and other.column_names == table.column_names
        for column_name in table.column_names:
            where = f"{name}.{column_name}"
            want = index_format.column_array(table, column_name)
            got = index_format.column_array(other, column_name)
            if isinstance(got, arrow_lite.LiteArray):
                kinds.add(got.type.kind)
            else:  # a type the lite reader leaves to pyarrow (a timestamp...)
                kinds.add("pyarrow")
            assert len(got) == len(want), where
            assert got.to_pylist() == want.to_pylist(), where
            for i in range(len(want)):
                assert got[i].as_py() == want[i].as_py(), f"{where}[{i}]"
            if len(want):
                assert got[-1].as_py() == want[-1].as_py(), where
            numeric = pa.types.is_integer(want.type) or pa.types.is_floating(want.type)
            if numeric and want.null_count == 0:
                a, b = got.to_numpy(zero_copy_only=True), want.to_numpy(zero_copy_only=True)
                assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), where
            if pa.types.is_list(want.type) and pa.types.is_primitive(want.type.value_type):
                for a, b in zip(
                    index_format.list_parts(other, column_name),
                    index_format.list_parts(table, column_name),
                    strict=True,
                ):
                    assert a.dtype == b.dtype and np.array_equal(a, b), where
            if pa.types.is_string(want.type) and len(want):
                mine, theirs = got.buffers(), want.buffers()
                assert bytes(mine[1]) == theirs[1].to_pybytes()[: len(bytes(mine[1]))], where
                assert bytes(mine[2] or b"") == (theirs[2] or pa.py_buffer(b"")).to_pybytes()
            # the pyarrow form of the lite column is the same column
            assert index_format.arrow_array(other, column_name).equals(want), where
    # every kind the lite reader decodes is met here, and a fallback type too
    assert kinds >= {"fixed", "utf8", "bool", "list", "fixed_size_list", "pyarrow"}, kinds


def test_the_schema_reader_decodes_what_it_knows_and_leaves_the_rest():
    known = {
        pa.int8(): "b",
        pa.uint8(): "B",
        pa.int16(): "h",
        pa.uint16(): "H",
        pa.int32(): "i",
        pa.uint32(): "I",
        pa.int64(): "q",
        pa.uint64(): "Q",
        pa.float32(): "f",
        pa.float64(): "d",
    }
    fields = [pa.field(f"c{i}", t) for i, t in enumerate(known)]
    fields += [
        pa.field("s", pa.string()),
        pa.field("ok", pa.bool_()),
        pa.field("ls", pa.list_(pa.string())),
        pa.field("li", pa.list_(pa.int32())),
        pa.field("v", pa.list_(pa.float32(), 7)),
    ]
    others = [
        pa.timestamp("us"),
        pa.large_string(),
        pa.float16(),
        pa.dictionary(pa.int32(), pa.string()),
        pa.struct([("a", pa.int32())]),
        pa.list_(pa.list_(pa.int32())),
        pa.list_(pa.bool_()),
        pa.date32(),
        pa.binary(),
    ]
    fields += [pa.field(f"o{i}", t) for i, t in enumerate(others)]
    schema = arrow_lite.read_schema(pa.schema(fields).serialize().to_pybytes())
    assert schema.names == [f.name for f in fields]
    for f, t in zip(schema, known, strict=False):
        assert (f.type.kind, f.type.code) == ("fixed", known[t]), f.name
    assert [schema.field(n).type.kind for n in ("s", "ok", "ls", "li", "v")] == [
        "utf8",
        "bool",
        "list",
        "list",
        "fixed_size_list",
    ]
    assert schema.field("v").type.list_size == 7
    assert schema.field("li").type.value_type.to_pandas_dtype() == np.dtype(np.int32)
    assert all(schema.field(f"o{i}").type.kind == "other" for i in range(len(others)))
    # every schema the index writes is decoded
    for built in (
        index_format.FILES_SCHEMA,
        index_format.chunks_schema(256),
        index_format.CLUSTERS_SCHEMA,
        index_format.LEXICAL_SCHEMA,
        index_format.LEXICAL_FORWARD_SCHEMA,
        index_format.SCHEMA_TABLE_SCHEMA,
    ):
        read = arrow_lite.read_schema(built.serialize().to_pybytes())
        assert read.names == built.names
        assert all(f.type.kind != "other" for f in read)
    with pytest.raises(arrow_lite.Unsupported):
        arrow_lite.read_schema(b"\xff\xff\xff\xff\x08\x00\x00\x00garbage!")


@pytest.mark.parametrize(
    "query, mode",
    [
        ("extract a tar archive", "hybrid"),
        ("extract a tar archive", "lexical"),
        ("extract a tar archive", "semantic"),
        # no match: the rule measures its references (headings read by row, not `take`)
        ("qqqzzzxxy", "hybrid"),
    ],
)
def test_a_plain_search_never_imports_pyarrow(project: Path, query: str, mode: str):
    found = run_cli(
        "search",
        query,
        "--mode",
        mode,
        "--root",
        str(project),
        env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert found.returncode == 0, found.stderr
    if query == "qqqzzzxxy":
        assert "No matches." in found.stdout
    else:
        assert "Tar archives" in found.stdout or "tar" in found.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in found.stderr.splitlines()]
    assert "numpy" in imported  # the import log is there
    assert not [m for m in imported if m.startswith("pyarrow")]


ARGUMENT_LISTS = [
    ["extract a tar archive"],
    ["extract a tar archive", "--json"],
    ["extract a tar archive", "--json", "--mode", "lexical"],
    ["extract a tar archive", "--json", "--mode", "semantic"],
    ["undo commit", "--json", "-n", "2", "--explain"],
    ["undo commit", "--explain"],
    ["soup", "--json"],
    ["soup", "--files", "--json"],
    ["istanbul", "--json"],
    ["ümlaut"],
    ["archive", "--json", "--filter", "rating>=3"],
    ["archive", "--json", "--filter", "updated>=2024-01-01"],
    ["archive", "--json", "--tag", "archive"],
    ["archive", "--json", "--tag", "nothing"],
    ["archive", "--tag", "nothing"],
    ["--filter", "status=published", "--json"],
    ["--filter", "status=published"],
    ["--category", "cli"],
    ["zzqx nowhere", "--json"],
    ["zzqx nowhere"],
]


# Two `mdvdb` processes a list (~0.45 CPU-s): these six run in the inner loop, the other
# fourteen in CI. Every column is compared in-process above, and tests/test_cold_start.py
# compares the plain, --json and no-match outputs of both readers in the inner loop too.
IN_THE_INNER_LOOP = [2, 4, 7, 9, 11, 12]


@pytest.mark.parametrize(
    "args",
    [
        args if i in IN_THE_INNER_LOOP else pytest.param(args, marks=pytest.mark.slow)
        for i, args in enumerate(ARGUMENT_LISTS)
    ],
    ids=" ".join,
)
def test_the_cli_prints_what_the_pyarrow_reader_prints(project: Path, args: list[str]):
    lite = run_cli("search", *args, "--root", str(project), env=ENV)
    arrow = run_cli("search", *args, "--root", str(project), env=ARROW)
    assert (lite.returncode, lite.stdout, lite.stderr) == (
        arrow.returncode,
        arrow.stdout,
        arrow.stderr,
    )
    assert lite.returncode in (0, 1, 2) and "Traceback" not in lite.stderr
    if "--json" in args and lite.returncode == 0:
        json.loads(lite.stdout)


def _damage(project: Path, tmp_path: Path, change) -> Path:
    work = Path(shutil.copytree(project, tmp_path / "work"))
    index = work / ".markdownvdb.index"
    opened = index_format.read_index(index)
    layouts = opened.layouts
    del opened
    data = bytearray(index.read_bytes())
    change(data, layouts)
    index.write_bytes(bytes(data))
    return work


def _text_offsets(data: bytearray, layouts) -> None:
    where = layouts["chunks"]["columns"][6]["b"][1]  # chunks.text offsets
    data[where[0] + 4 * 2 : where[0] + 4 * 3] = (10**9).to_bytes(4, "little")


def _schema_byte(data: bytearray, layouts) -> None:
    data[layouts["files"]["schema"][0] + 40] ^= 0x10


def _footer_byte(data: bytearray, layouts) -> None:
    data[-40] ^= 0x01


def _title_byte(data: bytearray, layouts) -> None:
    where = layouts["files"]["columns"][5]["b"][2]  # files.title values
    data[where[0]] = 0xFF  # not UTF-8: found by the checksums after the error


@pytest.mark.parametrize("change", [_text_offsets, _schema_byte, _footer_byte, _title_byte])
def test_a_damaged_index_is_one_line_on_the_lite_path(project, tmp_path, change):
    """Every damage through the lite reader (the command's default); the pyarrow reader, whose
    checks tests/test_index_damage.py flips and cuts in-process, on the first one only."""
    work = _damage(project, tmp_path, change)
    for env in (ENV, ARROW) if change is _text_offsets else (ENV,):
        found = run_cli("search", "tar", "--root", str(work), env=env)
        assert "Traceback" not in found.stderr, found.stderr
        if change is _title_byte and found.returncode == 0:
            continue  # the damaged title is not on a row this search decodes
        assert found.returncode == 1, (env, found.stdout)
        assert found.stderr.strip().splitlines() == [found.stderr.strip()]
        assert "index damaged: run `mdvdb ingest --full`" in found.stderr


def test_random_flips_read_or_raise_the_damage_error_in_the_lite_reader(project, tmp_path):
    clean = (project / ".markdownvdb.index").read_bytes()
    rng = random.Random(11)
    work = Path(shutil.copytree(project, tmp_path / "flips"))
    config = load_config(work, environ={**os.environ, **ENV})
    for _ in range(40):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]
        if bytes(data) == clean:
            continue
        (work / ".markdownvdb.index").write_bytes(bytes(data))
        try:
            index = open_index(config=config, lite=True)
            index.search("tar archive", limit=5)
            index.search("soup", limit=5, mode="lexical")
        except index_format.IndexFormatError:
            pass
        except Exception:
            assert index_format.damage_message(), "an error from an index that passes its checks"


def test_the_lite_reader_never_falls_back_on_a_plain_search(project: Path, monkeypatch):
    used: list[str] = []
    monkeypatch.setattr(arrow_lite, "ON_FALLBACK", used.append)
    config = load_config(project, environ={**os.environ, **ENV})
    index = open_index(config=config, lite=True)
    for mode in ("hybrid", "lexical", "semantic"):
        for query in ("extract a tar archive", "soup", "undo the last commit"):
            hits = index.search(query, limit=5, mode=mode).results
            assert hits
    assert used == []
