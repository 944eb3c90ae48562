"""The cold `mdvdb search` shortcuts compute what the plain code computed, bit for bit: the
page sums without reduceat's inner loop, the ASCII tokenizer, the title tier's ASCII check;
and a cold search answers as the warm library."""

from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from kernel import text_analysis
from tests.conftest import run_cli


def test_page_sums_are_reduceat_bit_for_bit():
    from query.score.vector import page_sums

    rng = np.random.default_rng(5)
    for high in (3, 9, 40):
        count = rng.integers(1, high, size=500)
        vectors = (rng.standard_normal((int(count.sum()), 64)) * 100).astype(np.float32)
        offsets = np.cumsum(count) - count
        want = np.add.reduceat(vectors, offsets, axis=0)
        got = page_sums(vectors, offsets, count)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), high


def test_the_ascii_tokenizer_splits_as_the_full_pattern():
    full = re.compile(text_analysis._TOKEN_PATTERN)
    rng = random.Random(7)
    ascii_chars = "".join(chr(c) for c in range(128))
    mixed = ascii_chars + "çİß中ｶ한Пé²ﬁ🎉١"
    samples = ["Extract a tar archive", "git_reset --soft HEAD~1", "中文 and english", ""]
    for alphabet in (ascii_chars, mixed):
        samples += [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)
        ]
    for sample in samples:
        text = unicodedata.normalize("NFKC", sample).casefold()
        got = [t if isinstance(t, tuple) else ("", t) for t in text_analysis.tokens_of(sample)]
        assert got == full.findall(text), sample


# -- the cold answer is the warm library's ------------------------------------------------

ANSWER_ARGS = [
    ["extract a tar archive"],  # hybrid, a page the query names (tar)
    ["Networking cheatsheet"],  # a title tier match
    ["git branch", "--mode", "lexical"],
    ["sourdough starter", "--mode", "semantic"],
    ["how do I see which ports are open and listening on this machine", "--explain"],
    ["tar", "-n", "2", "--per-file", "1"],
    ["zzqx nowhere"],  # no match: the suggestions are part of the answer
]


def library_answer(root: Path, args: list[str]) -> dict:
    """What `mdvdb search ARGS --json` answers, computed by a warm library Index (pyarrow
    reader, warmed by two other queries first), assembled as the CLI assembles it."""
    from kernel.config import load_config
    from mdvdb.cli import command
    from mdvdb.cli.parser import parse
    from query import SearchRequest, explain_no_match, open_index, run_request

    fields = parse(command("search"), [*args, "--json"])
    fields.pop("root"), fields.pop("as_json")
    index = open_index(config=load_config(root))
    for warm in ("warm up the reader", "git"):
        run_request(index, SearchRequest(query=warm))
    wanted = SearchRequest(**fields)
    outcome = run_request(index, wanted)
    data = outcome.tiers.to_json(wanted.explain)
    if not outcome.tiers.results:
        data["no_match"] = explain_no_match(index, outcome).to_json()
    return {"schema_version": 1, **data}  # the CLI adds the version (docs/json.md)


def test_a_cold_search_answers_as_the_warm_library(indexed_notes: Path):
    """The real command, in a fresh process with everything the cold path skips (the
    per-path lowering, the exact first scan, the plain JSON copy), prints for each query
    kind the answer a long-lived library Index gives."""
    import json

    for args in ANSWER_ARGS:
        done = run_cli(
            "search", *args, "--root", str(indexed_notes), "--json", env={"MDVDB_NO_WARM": "1"}
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == library_answer(indexed_notes, args), args


def test_a_cold_search_skips_what_it_does_not_use(indexed_notes: Path):
    """A plain cold search imports neither pyarrow (the index format's own reader reads it)
    nor the agent shapes: `-X importtime` of the real command lists what it loaded."""
    done = run_cli(
        "search",
        "extract a tar archive",
        "--root",
        str(indexed_notes),
        "--json",
        env={"MDVDB_NO_WARM": "1", "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert done.returncode == 0, done.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "numpy" in loaded and "kernel.text_analysis" in loaded  # the log is there
    assert not {m for m in loaded if m.startswith("pyarrow")}
    assert "query.shaping" not in loaded


# -- each shortcut computes what it replaces ---------------------------------------------


def test_a_results_json_is_asdicts():
    from dataclasses import asdict

    from query.results import SearchResult

    hit = SearchResult(
        path="a.md",
        heading="H",
        heading_path=["T", "H"],
        start_line=1,
        end_line=9,
        score=0.5,
        excerpt="x",
        metadata={"tags": ["a", {"b": [1, 2.5, None, True]}], "n": 3},
        explain={"lexical": 0.1},
        also_in=[{"path": "b.md", "start_line": 2, "end_line": 3}],
        also_in_count=1,
        excerpt_lines=[1, 2],
    )
    for explain in (False, True):
        want = asdict(hit)
        del want["chunk_id"], want["file_id"]  # row numbers stay out of the JSON
        del want["source"]  # only where the project names its sources
        if not explain:
            want.pop("explain")
        got = hit.to_json(explain)
        assert got == want and list(got) == list(want)
    got = hit.to_json()
    got["metadata"]["tags"][1]["b"].append(9)
    got["also_in"][0]["path"] = "c.md"
    got["heading_path"].append("X")
    assert hit.metadata["tags"][1]["b"] == [1, 2.5, None, True]  # a copy, as asdict's
    assert hit.also_in[0]["path"] == "b.md" and hit.heading_path == ["T", "H"]
    odd = SearchResult("a.md", "", [], 1, 2, 0.0, "", {"when": (1, 2)})
    left_out = ("explain", "chunk_id", "file_id", "source")
    assert odd.to_json() == {k: v for k, v in asdict(odd).items() if k not in left_out}


def test_a_path_lowered_alone_is_its_slice_of_the_lowered_column():
    """`query.rank.titles` lowers the paths a first name query looks at one by one; a later one,
    or a path with a capital sigma, reads the whole lowered column: the same strings."""
    import pyarrow as pa

    from query.rank import titles

    paths = [
        "docs/Tar.md",
        "ΣΟΦΙΑ/ΑΣ",  # a sigma at a row's end, a letter at the next row's start
        "Ωmega/x.md",
        "İstanbul/notes.md",  # lowers to more characters: the column goes row by row
        "[link](target)/a.md",
        "中文/页面.md",
        "plain/ascii.md",
        "ΑΣ",
        "b",
    ]

    class Files:
        def column(self, name):
            return pa.chunked_array([pa.array(rows, pa.string())])

    class Snap:
        def __init__(self):
            self.cache = {}

        def table(self, name):
            return Files()

    for rows in (paths, [p for p in paths if "İ" not in p and "](" not in p], paths[:3]):
        column = titles._Lowered.of(pa.array(rows, pa.string()))
        want = [column.text[a:b] for a, b in zip(column.starts, column.ends, strict=True)]
        snap = Snap()
        first = titles._path_lowering(snap)  # the first name query: one path at a time
        assert "tiers_paths" not in snap.cache
        got = [first(i) for i in range(len(rows)) if "Σ" not in rows[i]]
        assert got == [w for w, r in zip(want, rows, strict=True) if "Σ" not in r]
        got = [first(i) for i in range(len(rows))]  # sigma rows read the column
        assert got == want
        later = titles._path_lowering(snap)
        assert [later(i) for i in range(len(rows))] == want


def test_the_first_vector_query_scans_exactly_and_counts_as_before(indexed_notes, monkeypatch):
    """The first vector query of a large snapshot (in auto mode) is an exact scan decided
    without the IVF meta; it counts as a vector query, so the second one quantises."""
    pytest.importorskip("simsimd")
    from kernel.config import load_config
    from query import open_index
    from query.score import vector

    monkeypatch.setattr(vector, "AUTO_MIN_ROWS", 1)
    index = open_index(config=load_config(indexed_notes))
    n = index.snapshot.vectors.shape[0]
    monkeypatch.setattr(vector, "RESCORE_DEPTH", max(1, n - 1))
    first = vector.dense_scorer(index)
    assert first.compact is None and first.lists is None
    assert index.snapshot.cache["vector_queries"] == 1
    second = vector.dense_scorer(index)
    assert second.compact is not None  # quantised from the second query, as before


def test_page_vectors_summed_in_place_are_the_gathered_ones():
    """`multi_section_pages` sums each page's rows where they lie in the matrix: the same
    bits as summing a gathered copy of them (pages of 1 to 12 sections)."""
    from query.score.vector import multi_section_pages, page_sums

    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 13, size=300)
    files = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    matrix = rng.standard_normal((len(files), 32)).astype(np.float32)
    first, chunks, rows, unit = multi_section_pages(files, matrix)
    count = sizes[sizes > 1]
    offsets = np.cumsum(count) - count
    sums = page_sums(np.asarray(matrix[chunks], dtype=np.float32), offsets, count)
    want = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), np.float32(1e-12))
    assert np.array_equal(unit.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(first, np.flatnonzero(np.r_[True, files[1:] != files[:-1]])[sizes > 1])
