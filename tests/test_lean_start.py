"""Every short `mdvdb` command starts lean (`mdvdb.cli.lean_start`), and answers the same.

The real commands are run with `-X importtime` (the log of what they loaded) and a cache
folder of their own: the ingest and the status keep the code `dataclasses` generates and the
regular expressions their imports compile (`kernel.code_cache`), import NumPy without its
extras (`kernel.lean_numpy`: no `numpy._typing`, no `numpy.ma`) and doit without
`importlib.metadata` (`pipeline.doit_run`); a second run reads the caches and prints the same.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES, copy_markdown, run_cli


def _loaded(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}


def test_short_commands_start_lean_and_answer_the_same(tmp_path: Path):
    cache = tmp_path / "cache"
    env = {"MDVDB_NO_WARM": "1", "MDVDB_CACHE_DIR": str(cache), "PYTHONPROFILEIMPORTTIME": "1"}
    first = copy_markdown(FIXTURES / "notes", tmp_path / "first")
    done = run_cli("ingest", "--json", "--root", str(first), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = _loaded(done.stderr)
    assert {"numpy", "pipeline.tasks", "doit"} <= loaded
    assert not {m for m in loaded if m.startswith(("numpy._typing", "numpy.ma."))}
    assert "numpy.ma" not in loaded
    assert not loaded & {"importlib.metadata", "typer", "pydantic"}
    code = sorted(p.name.split(".")[0] for p in (cache / "code").iterdir())
    assert code == ["dataclasses", "re"]
    stamps = {p: p.stat().st_mtime_ns for p in (cache / "code").iterdir()}
    # A second folder: the same imports, served from the caches (not written again).
    second = copy_markdown(FIXTURES / "notes", tmp_path / "second")
    again = run_cli("ingest", "--json", "--root", str(second), env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    for root in (first, second):
        status = run_cli("status", "--json", "--root", str(root), env=env)
        assert status.returncode == 0, status.stderr[-2000:]
        assert '"fresh": true' in status.stdout and '"files": 4' in status.stdout
    # The same answers as a process without the caches (and without the import log).
    plain = {"MDVDB_NO_WARM": "1", "MDVDB_CACHE_DIR": str(tmp_path / "other")}
    for argv in (["search", "tar", "--json"], ["get", "tar.md"], ["schema", "--json"]):
        lean = run_cli(*argv, "--root", str(first), env={**env, "PYTHONPROFILEIMPORTTIME": ""})
        cold = run_cli(*argv, "--root", str(second), env=plain)
        assert (lean.returncode, lean.stdout) == (cold.returncode, cold.stdout), argv
