"""Every short `mdvdb` command starts lean (`mdvdb.cli.lean_start`), and answers the same.

The real commands are run with `-X importtime` (the log of what they loaded) and a cache
folder of their own: the ingest and the status keep the code `dataclasses` generates and the
regular expressions their imports compile (`kernel.code_cache`), import NumPy without its
extras (`kernel.lean_numpy`: no `numpy._typing`, no `numpy.ma`), `pyarrow.compute` without
`docscrape` (`kernel.lean_arrow`) and doit without `importlib.metadata`
(`pipeline.doit_run`); a second run reads the caches and prints the same.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES, copy_markdown, run_cli, seed_model_cache


def _loaded(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}


def test_short_commands_start_lean_and_answer_the_same(_indexed_notes_once: Path, tmp_path: Path):
    cache = seed_model_cache(tmp_path / "cache")  # the model's tables; the code caches empty
    env = {"MDVDB_NO_WARM": "1", "MDVDB_CACHE_DIR": str(cache), "PYTHONPROFILEIMPORTTIME": "1"}
    first = copy_markdown(FIXTURES / "notes", tmp_path / "first")
    done = run_cli("ingest", "--json", "--root", str(first), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = _loaded(done.stderr)
    assert {"numpy", "pipeline.tasks", "doit"} <= loaded
    assert not {m for m in loaded if m.startswith(("numpy._typing", "numpy.ma."))}
    assert "numpy.ma" not in loaded
    assert not loaded & {"importlib.metadata", "typer", "pydantic", "pyarrow.vendored.docscrape"}
    assert "pyarrow.compute" in loaded
    code = sorted(p.name.split(".")[:2] for p in (cache / "code").iterdir())
    assert code == [["dataclasses", "ingest"], ["re", "ingest"]]  # a file pair per command
    stamps = {p: p.stat().st_mtime_ns for p in (cache / "code").iterdir()}
    # A second folder: the same imports, served from the caches (not written again).
    second = copy_markdown(FIXTURES / "notes", tmp_path / "second")
    again = run_cli("ingest", "--json", "--root", str(second), env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    status = run_cli("status", "--json", "--root", str(second), env=env)
    assert status.returncode == 0, status.stderr[-2000:]
    assert '"fresh": true' in status.stdout and '"files": 4' in status.stdout
    # The same answers from an index built without the caches and one built from them, and
    # from a search without its caches (it writes them) and one reading them.
    answers = []
    for root in (first, second):
        lean = run_cli("search", "tar", "--json", "--root", str(root), env=plain_log(env))
        assert lean.returncode == 0 and '"tar.md"' in lean.stdout, lean.stderr[-2000:]
        answers.append(lean.stdout)
    assert answers[0] == answers[1]
    # The documents and the schema, read in this process from both indexes (no code cache here).
    import mdvdb

    built = [mdvdb.open_index(root) for root in (first, second)]
    assert repr(built[0].get_document("tar.md")) == repr(built[1].get_document("tar.md"))
    assert repr(built[0].schema()) == repr(built[1].schema())
    assert "tags" in built[0].schema().fields


def plain_log(env: dict) -> dict:
    """`env` without the import log (its output on stderr is not the answer)."""
    return {**env, "PYTHONPROFILEIMPORTTIME": ""}


LEAN_ARROW = """
import hashlib, inspect, sys
lean = sys.argv[1] == "lean"
if lean:
    from kernel.lean_arrow import defer_compute_docs

    assert defer_compute_docs()
import pyarrow as pa
import pyarrow.compute as pc

print("docscrape", "pyarrow.vendored.docscrape" in sys.modules, "pydoc" in sys.modules)
wrapped = [n for n in dir(pc) if hasattr(getattr(pc, n), "__arrow_compute_function__")]
signatures = repr([(n, str(inspect.signature(getattr(pc, n)))) for n in sorted(wrapped)])
print("functions", len(wrapped), hashlib.sha256(signatures.encode()).hexdigest())
print("sum", pc.sum(pa.array([1, 2, 3])).as_py())
print("is_in", pc.is_in(pa.array(["a", "b"]), value_set=pa.array(["b"])).to_pylist())
print("summary", pc.sum.__doc__.splitlines()[0])
from pyarrow.vendored import docscrape

print("later", type(docscrape.NumpyDocString("x")).__name__, "pydoc" in sys.modules)
print("kept", pc.docscrape.NumpyDocString is docscrape.NumpyDocString)
"""


def test_pyarrow_compute_imported_lean_is_pyarrow_compute():
    """With the hook, `pyarrow.compute` imports without `docscrape` (nor `pydoc`), and offers
    the same functions with the same signatures and results as a plain import; the real
    `docscrape` loads when asked for."""
    import subprocess
    import sys

    runs = {}
    for mode in ("lean", "plain"):
        done = subprocess.run(
            [sys.executable, "-c", LEAN_ARROW, mode],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert done.returncode == 0, done.stderr
        runs[mode] = done.stdout.splitlines()
    assert runs["lean"][0] == "docscrape False False"
    assert runs["plain"][0] == "docscrape True True"
    assert runs["lean"][1:] == runs["plain"][1:]
    assert runs["lean"][-2:] == ["later NumpyDocString True", "kept True"]


def test_cache_groups_are_plain_names(tmp_path: Path):
    """A command's cache files are named by a known command only: an unknown word (argv is
    the user's) shares the "other" pair and never becomes part of a path."""
    import pytest

    from kernel.code_cache import cache_file, regex_cache_file

    assert cache_file("ingest").name.startswith("dataclasses.ingest.")
    assert regex_cache_file("").name.startswith("re.cpython")
    for bad in ("../x", "a/b", "x.y", "é"):
        with pytest.raises(ValueError):
            cache_file(bad)
    env = {"MDVDB_NO_WARM": "1", "MDVDB_CACHE_DIR": str(tmp_path / "cache")}
    done = run_cli("../../escape", env=env)
    assert done.returncode == 2 and "No such command" in done.stderr
    assert {p.name.split(".")[1] for p in (tmp_path / "cache" / "code").iterdir()} == {"other"}
