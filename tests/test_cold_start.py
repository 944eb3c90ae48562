"""The cold `mdvdb search` shortcuts compute what the plain code computed, bit for bit: the
page sums without reduceat's inner loop, the ASCII tokenizer, the title tier's ASCII check;
and the one-shot process's exit (no teardown) still prints everything and its exit code."""

from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from kernel import text_analysis
from tests.conftest import run_cli, seed_model_cache


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
        assert text_analysis._token_pairs(text) == full.findall(text), sample


@pytest.mark.parametrize("args", [["tar"], ["tar", "--json"], ["zzqx nowhere"]])
def test_a_one_shot_search_prints_everything_before_it_exits(indexed_notes: Path, args):
    """The search process ends with os._exit after flushing: the whole output is there (a
    pipe, so stdout is block-buffered), identical to the pyarrow reader's ordinary exit."""
    fast = run_cli("search", *args, "--root", str(indexed_notes), env={"MDVDB_NO_WARM": "1"})
    plain = run_cli(
        "search",
        *args,
        "--root",
        str(indexed_notes),
        env={"MDVDB_NO_WARM": "1", "MDVDB_ARROW_READER": "1"},
    )
    assert fast.returncode == plain.returncode == 0
    assert fast.stdout == plain.stdout and fast.stdout.endswith("\n")
    assert fast.stderr == plain.stderr


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
    from mdvdb.cli.search import parse
    from query import SearchRequest, explain_no_match, open_index, run_request

    fields = parse([*args, "--json"])
    assert fields is not None
    fields.pop("root", None), fields.pop("as_json", None)
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
    """The real command, in a fresh process with everything the cold path skips (the lite
    reader, the per-path lowering, the exact first scan, the plain JSON copy), prints for
    each query kind the answer a long-lived library Index gives."""
    import json

    for args in ANSWER_ARGS:
        done = run_cli(
            "search", *args, "--root", str(indexed_notes), "--json", env={"MDVDB_NO_WARM": "1"}
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == library_answer(indexed_notes, args), args


def test_a_cold_search_skips_what_it_does_not_use(indexed_notes: Path):
    """A plain cold search imports neither pyarrow, nor OpenSSL (`hashlib`), nor the agent
    shapes: `-X importtime` of the real command lists what it loaded."""
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
    assert not loaded & {"_hashlib", "hashlib", "query.shaping"}
    # NumPy's docstrings, type hints, ctypes and platform (kernel.lean_numpy)
    assert not {m for m in loaded if m.startswith("numpy._typing") or "_add_newdocs" in m}
    assert not loaded & {"ctypes", "platform"}


# -- each shortcut computes what it replaces ---------------------------------------------


def test_the_digests_are_hashlibs():
    import hashlib

    from kernel import digests

    rng = random.Random(3)
    for n in (0, 1, 63, 64, 65, 1000):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert (
            digests.blake2b(data, digest_size=8).digest()
            == hashlib.blake2b(data, digest_size=8).digest()
        )
        assert digests.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert text_analysis.term_hash("archiv") == int.from_bytes(
        hashlib.blake2b(b"archiv", digest_size=8).digest(), "little"
    )


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
    left_out = ("explain", "chunk_id", "file_id")
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
    index = open_index(config=load_config(indexed_notes), lite=True)
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


# -- generated dataclass code, compiled once per user ---------------------------------------

CLASS_SOURCE = """
from dataclasses import dataclass, field

@dataclass(frozen=True, order=True)
class Point:
    x: int
    y: float = 0.5
    tags: list = field(default_factory=list, compare=False)

@dataclass
class Box:
    lo: Point
    hi: Point | None = None
"""


def _classes() -> dict:
    namespace: dict = {"__name__": "cached_classes"}
    exec(compile(CLASS_SOURCE, "cached_classes", "exec", dont_inherit=True), namespace)
    return namespace


def _behaviour(ns: dict) -> list:
    point, box = ns["Point"], ns["Box"]
    a, b = point(1), point(2, 1.0, ["t"])
    return [
        repr(a),
        repr(box(a, b)),
        a == point(1, 0.5, ["other"]),
        a < b,
        hash(a) == hash(point(1)),
        box(a) == box(point(1)),
        point.__init__.__annotations__,
        repr(point.__init__.__defaults__),
        sorted(n for n in vars(point) if n.startswith("__") and callable(getattr(point, n))),
    ]


def test_generated_code_is_compiled_once_and_behaves_the_same(tmp_path: Path):
    import dataclasses

    from kernel.code_cache import GeneratedCode, remember_generated_code

    plain = _behaviour(_classes())
    path = tmp_path / "code" / "dataclasses.marshal"
    try:
        first = remember_generated_code(path)
        assert first is not None and remember_generated_code(path) is None  # installed once
        assert _behaviour(_classes()) == plain
        assert first.added and first.save() and path.stat().st_mode & 0o777 == 0o600
        held = len(first.codes)
        del dataclasses.exec
        second = remember_generated_code(path)
        assert len(second.codes) == held
        assert _behaviour(_classes()) == plain
        assert not second.added and not second.save()  # nothing compiled, nothing written
    finally:
        vars(dataclasses).pop("exec", None)
    for source, code in second.codes.items():  # the code `exec` itself would compile
        fresh = compile(source, "<string>", "exec", dont_inherit=True)
        assert code == fresh and code.co_filename == fresh.co_filename == "<string>"
    path.chmod(0o644)  # a file others could have written is not read
    assert GeneratedCode(path).codes == {}
    path.chmod(0o600)
    path.write_bytes(b"\x00not marshal")
    assert GeneratedCode(path).codes == {}


# -- the regex programs kept per user ------------------------------------------------------

PATTERNS = [
    (r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", 0),
    ("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]|\r(?!\n)", 0),
    (r"(?P<order1>[<>|=]?)(?P<repeats> *[(]?[ ,0-9]*[)]? *)(?P<rest>.*)", 0),
    (r"(?<![^\W_])(?:extrac|archi|ta)[^\W_]*", re.IGNORECASE),
    (r"^[ \t]{0,3}(```+|~~~+)[^\n]*$", re.MULTILINE),
    (r"(?x) a \s+ (b|c)  # a comment", 0),
    (r"[a-z0-9\u00c0-\u024f]+", re.ASCII | re.IGNORECASE),
    (r"(\w+)\s(?P<second>\1)", re.UNICODE | re.DOTALL),
    (b"[\x80-\xff]+(?=x)", 0),
    (rb"(?i)^\d{4}-\d{2}$", re.MULTILINE),
]


def _compile_at_module_level(pattern, flags):
    """`re.compile` from a module's body, as an import runs it (the patterns kept)."""
    scope = {"re": re, "pattern": pattern, "flags": flags}
    exec(compile("found = re.compile(pattern, flags)", "<module body>", "exec"), scope)
    return scope["found"]


def test_regex_programs_are_compiled_once_and_equal_res_own(tmp_path: Path):
    """A kept program makes the pattern `re` makes (`==` compares the programs too), and
    matches the same; a query's own patterns (compiled in a function) are not kept; a
    damaged or foreign file, or a damaged program, is not trusted."""
    from re import _compiler

    from kernel.code_cache import RegexPrograms, remember_regex_programs

    plain = _compiler.compile
    path = tmp_path / "code" / "re.marshal"
    texts = ["Extract a TAR archive", "1999-12", "a \t b", "x\x1b[2Jy\u202e", "-1.5e3", "tar tar"]
    try:
        first = remember_regex_programs(path)
        assert first is not None and remember_regex_programs(path) is None  # installed once
        for pattern, flags in PATTERNS:
            re.purge()
            got, want = _compile_at_module_level(pattern, flags), plain(pattern, flags)
            assert got == want and got.groupindex == want.groupindex, pattern
            assert (got.flags, got.groups, got.pattern) == (want.flags, want.groups, pattern)
        assert len(first.programs) == len(PATTERNS) and first.save()
        assert path.stat().st_mode & 0o777 == 0o600
        re.purge()
        re.compile("a query's (own|words)")  # from a function: compiled, not kept
        assert len(first.programs) == len(PATTERNS)
        _compiler.compile = plain
        second = remember_regex_programs(path)
        assert len(second.programs) == len(PATTERNS)
        for pattern, flags in PATTERNS:
            re.purge()
            got, want = _compile_at_module_level(pattern, flags), plain(pattern, flags)
            assert got == want, pattern
            for text in texts:
                sample = text.encode() if isinstance(pattern, bytes) else text
                assert [m.span() for m in got.finditer(sample)] == [
                    m.span() for m in want.finditer(sample)
                ]
        assert not second.added and not second.save()  # nothing compiled, nothing written
        key = next(iter(second.programs))
        flags, code, *rest = second.programs[key]
        second.programs[key] = (flags, [99999, *code], *rest)  # not a program _sre accepts
        re.purge()
        assert _compile_at_module_level(*key) == plain(*key)
    finally:
        _compiler.compile = plain
        re.purge()
    path.chmod(0o644)  # a file others could have written is not read
    assert RegexPrograms(path, plain).programs == {}
    path.chmod(0o600)
    path.write_bytes(b"\x00not marshal")
    assert RegexPrograms(path, plain).programs == {}


def test_a_cold_search_writes_its_caches_once(indexed_notes: Path, tmp_path: Path):
    """The real command: the first cold search writes the generated code and the import's
    patterns; the next ones read them and print the same bytes, and a search for other words
    (other excerpt patterns) neither grows nor rewrites the patterns' file; a damaged code
    file is ignored (and replaced)."""
    cache = seed_model_cache(tmp_path / "cache")  # the code caches start empty
    env = {"MDVDB_NO_WARM": "1", "MDVDB_CACHE_DIR": str(cache)}
    args = ("--root", str(indexed_notes), "--json")
    first = run_cli("search", "extract a tar archive", *args, env=env)
    assert first.returncode == 0, first.stderr
    (code,) = (tmp_path / "cache" / "code").glob("dataclasses.*.marshal")
    (regex,) = (tmp_path / "cache" / "code").glob("re.*.marshal")
    stamps = {path: path.stat().st_mtime_ns for path in (code, regex)}
    assert regex.stat().st_mode & 0o777 == 0o600
    again = run_cli("search", "extract a tar archive", *args, env=env)
    assert again.stdout == first.stdout
    assert {path: path.stat().st_mtime_ns for path in stamps} == stamps
    for query in ("git branch", "sourdough starter"):
        other = run_cli("search", query, *args, env=env)
        assert other.returncode == 0, other.stderr
        assert regex.stat().st_mtime_ns == stamps[regex], query
    code.write_bytes(b"damaged")
    damaged = run_cli("search", "extract a tar archive", *args, env=env)
    assert damaged.returncode == 0 and damaged.stdout == first.stdout
    assert code.stat().st_size > 1000  # rewritten


# -- NumPy's import without its extras ------------------------------------------------------

LEAN_NUMPY = """
import sys
from kernel.lean_numpy import defer_numpy_extras

assert defer_numpy_extras()
import numpy as np

assert not defer_numpy_extras()  # once; and not once NumPy is in
skipped = [m for m in sys.modules if m.startswith("numpy._typing") or "_add_newdocs" in m]
print("skipped", not skipped and "ctypes" not in sys.modules and "platform" not in sys.modules)
print("docs", np.ndarray.sum.__doc__ is None)
a = np.arange(3)
print("ctypes", a.ctypes.data == a.__array_interface__["data"][0])
print("ctypes module", type(sys.modules["ctypes"]).__name__, sys.modules["ctypes"].c_int.__name__)
print("linalg", np.linalg.eig(np.diag([2.0, 3.0])).eigenvalues.tolist())
import numpy.typing as npt

print("typing", npt.NDArray.__origin__ is np.ndarray and "numpy._typing._array_like" in sys.modules)
import platform

print("platform", type(platform).__name__, platform.system() != "")
import numpy._core._add_newdocs

print("docs later", np.ndarray.sum.__doc__.startswith("a.sum("))
print("unique", np.unique(np.array([3, 1, 3])).tolist(), "numpy.ma" in sys.modules)
print("union", np.union1d([2, 1], [3, 1]).tolist(), "numpy.ma" in sys.modules)
kept = np.ma.MaskedArray  # what a module might keep
print("not masked", isinstance(a, kept), issubclass(np.ndarray, kept), "numpy.ma" in sys.modules)
built = np.ma.MaskedArray([1, 2], mask=[0, 1])
real = sys.modules["numpy.ma"].MaskedArray
print("built", type(built) is real, isinstance(built, kept), isinstance(a, kept))
m = np.ma.masked_array([1, 2], mask=[0, 1])
print("ma", type(np.ma).__name__, np.ma is sys.modules["numpy.ma"], np.ma.is_masked(m))
print("unique masked", np.unique(m).tolist())
"""


def test_numpy_imported_lean_is_numpy():
    """With the hook, NumPy's import runs none of the deferred modules; each loads for real
    when asked for (ctypes, platform, numpy.typing, the docstrings), and NumPy computes as
    ever. Fails if a NumPy version needs one of them at import: the import would raise."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", LEAN_NUMPY],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "skipped True",
        "docs True",
        "ctypes True",
        "ctypes module module c_int",
        "linalg [2.0, 3.0]",
        "typing True",
        "platform module True",
        "docs later True",
        "unique [1, 3] False",
        "union [1, 2, 3] False",
        "not masked False False False",
        "built True True False",
        "ma module True True",
        "unique masked [1, None]",
    ]
