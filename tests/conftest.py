"""Shared fixtures: real folders in tmp, the real CLI, and the shared corpora when present.

Also the suite's markers (README, "Tests"): a test that uses the shared corpora is marked
`corpus` here, whatever its file says, so `-m "not slow and not corpus"` (the inner loop)
never waits on an archive. Under pytest-xdist the suite runs `--dist loadfile`: a file's tests
share one worker, so a module-scoped fixture is built once (with `load`, a worker switching
files tears it down and builds it again)."""

from __future__ import annotations

import fcntl
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_CORPORA = Path(os.environ.get("MDVDB_SHARED_CORPORA", REPO.parent / "shared" / "corpora"))

# Model tables live in a per-user cache (kernel/user_cache.py). The suite gets its own, shared
# by every test and every CLI subprocess of the session (they inherit the variable), so a test
# run never writes into the real home; tests/test_footprint.py checks the real location rules.
# Under pytest-xdist the workers inherit the variable from the controller, so one run builds
# the tables once (the cache's writes are atomic renames: workers racing on a file are safe).
_OWN_CACHE: str | None = None
if not os.environ.get("MDVDB_CACHE_DIR"):
    _OWN_CACHE = os.environ["MDVDB_CACHE_DIR"] = tempfile.mkdtemp(prefix="mdvdb-test-cache-")

# A test over this (call + setup, seconds) without `@pytest.mark.slow` is named at the end of
# the run: the inner loop's budget is kept by marking, and this says what to mark.
SLOW_SECONDS = 10.0


MARKDOWN = (".md", ".markdown")


def copy_markdown(source: Path, target: Path) -> Path:
    """Copy the Markdown files of `source` (and the folders holding them) to `target`, and
    nothing else: an index or state folder someone built in the fixtures (README command 1
    once pointed there) must never leak into a test."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [
            name
            for name in names
            if not (Path(folder, name).is_dir() and not Path(folder, name).is_symlink())
            and not name.lower().endswith(MARKDOWN)
        ]

    shutil.copytree(source, target, ignore=ignore)
    return target


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A copy of the small fixture folder's Markdown, as a project root."""
    return copy_markdown(FIXTURES / "notes", tmp_path / "notes")


def _run_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temp folder, shared by its xdist workers (each worker's base temp is a child
    of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def _indexed_notes_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ingest of the notes per run (`build_index`), whichever worker asks first (the others
    wait on the lock); nobody writes into it: `indexed_notes` hands out copies."""
    base = _run_base(tmp_path_factory)
    root = base / "indexed-once" / "notes"
    with open(base / ".indexed-once.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / ".indexed-once.done").exists():
            shutil.rmtree(root.parent, ignore_errors=True)
            build_index(copy_markdown(FIXTURES / "notes", root))
            (base / ".indexed-once.done").touch()
    return root


@pytest.fixture
def indexed_notes(_indexed_notes_once: Path, tmp_path: Path) -> Path:
    """`notes` with its default index already built: one ingest per run, copied
    (index, state and Markdown, mtimes kept, so the copy is current) into this test's own
    folder. For tests whose subject comes after the ingest; a test about ingest itself
    starts from `notes`."""
    # Not tmp_path / "notes": a test may take both fixtures (before and after an ingest).
    target = tmp_path / "indexed" / "notes"
    return Path(shutil.copytree(_indexed_notes_once, target, symlinks=True))


def build_index(root: Path, env: dict | None = None) -> Path:
    """Index `root` in this process, as `mdvdb ingest --root ROOT` would with `env` added to
    the environment: for a fixture whose tests read the index (through the real CLI) and
    are not about the ingest. The same `ingest_folder` the command runs, without a Python
    start-up (~0.8 CPU-s for a few pages against ~0.1 here once the worker has the pipeline
    loaded). A test about ingest itself runs `run_cli("ingest", ...)`."""
    from kernel.config import load_config
    from pipeline import ingest_folder

    # What would fail the command raises here (the command's warnings, as a page whose
    # front matter does not parse, are the report's, as they are the command's).
    ingest_folder(load_config(root, environ={**os.environ, **(env or {})}))
    return root


def seed_model_cache(cache: Path) -> Path:
    """`cache`, a test's own MDVDB_CACHE_DIR (for a test of what a command writes there, as
    the generated code), holding the run's model tables (`models/`: the default model's
    33 MB float32 table, its BPE lookup, the digest stamps) as hard links: a command then
    starts as it does for a user who ran it before, instead of building the tables again
    (~0.3 CPU-s and 33 MB written). Nothing is linked where the run's cache has no tables
    yet or cannot be linked (another file system): the command builds them, as before. The
    cache's files are replaced by rename, never written in place, so a link is never
    changed under another test."""
    run_cache = os.environ.get("MDVDB_CACHE_DIR", "").strip()
    shared = Path(run_cache) / "models"
    if not run_cache or not shared.is_dir():
        return cache
    for source in shared.rglob("*"):
        if source.is_file() and not source.name.startswith("."):  # not a temp file
            target = cache / "models" / source.relative_to(shared)
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                os.link(source, target)
            except OSError:
                return cache
    return cache


def tree_stamp(root: Path) -> list[tuple[str, int, int]]:
    """Every file under `root` with its size and mtime: a module fixture that hands one built
    folder to tests that only read it (no copy per test) compares this at teardown, so a
    test that wrote into it fails instead of leaking into the next."""
    return sorted(
        (str(path.relative_to(root)), path.stat().st_size, path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file()
    )


@contextmanager
def read_only_folder(root: Path):
    """Hand out `root` to readers; fail at the end if anything in it was written."""
    before = tree_stamp(root)
    yield root
    assert tree_stamp(root) == before, f"a test wrote into the shared folder {root}"


def start_serve(root: Path, idle_timeout: int = 60) -> subprocess.Popen:
    """A real `mdvdb serve` on `root` (text pipes): the caller waits for its socket and kills it."""
    return subprocess.Popen(
        [sys.executable, "-m", "mdvdb", "serve", "--idle-timeout", str(idle_timeout)]
        + ["--root", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, input: str | None = None):
    """Run the real `mdvdb` command in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "mdvdb", *args],
        cwd=cwd,
        env=full_env,
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Every `--json` output a test produces is the documented shape (docs/json.md).
    from tests.json_shapes import check_cli

    check_cli(tuple(map(str, args)), done.returncode, done.stdout)
    return done


def pytest_unconfigure(config: pytest.Config) -> None:
    """The per-run model cache goes with the run that made it (not a worker's copy of the
    variable: the controller made it and removes it)."""
    if _OWN_CACHE and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


# pytest keeps the temp folders of the last three runs (`tmp_path_retention_count`) and removes
# older ones when a run ends: a run of the inner loop leaves ~10,000 files (~300 MB), and the
# removal took 0.8-4 s after the last test of every run (measured at load 0-3). The run's first
# process starts that same clean-up (pytest's own function and rules: a folder whose lock is
# fresh, another run's in progress, is never touched) in a thread as the run starts, where it
# overlaps the workers' start; pytest's pass at the end then finds nothing left to remove.
_EARLY_CLEANUP = pytest.StashKey[threading.Thread]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # a worker's temp folder is the controller's
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    try:
        from _pytest.pathlib import LOCK_TIMEOUT, cleanup_numbered_dir

        if factory is None or factory._given_basetemp is not None:
            return  # --basetemp: pytest empties that folder itself
        keep = 0 if factory._retention_policy == "none" else factory._retention_count
        if keep < 1:  # keep 0 would take this run's own folder: left to pytest's end
            return
        base = factory.getbasetemp()
        stale_before = base.stat().st_mtime - LOCK_TIMEOUT
    except (ImportError, AttributeError, OSError):  # another pytest: its end-of-run pass
        return
    thread = threading.Thread(
        target=cleanup_numbered_dir,
        args=(base.parent, "pytest-", keep, stale_before),
        name="old-temp-cleanup",
        daemon=True,
    )
    thread.start()
    session.config.stash[_EARLY_CLEANUP] = thread


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Before pytest's own pass: a folder half removed by a thread cut short would stay (its
    lock fresh) until pytest deems it stale, days later."""
    thread = session.config.stash.get(_EARLY_CLEANUP, None)
    if thread is not None:
        thread.join()


# Bytecode is written, whatever PYTHONDONTWRITEBYTECODE says (some shells and CI images set
# it). Without a current .pyc, a process compiles each module it imports: pytest's rewritten
# test modules in every run and every xdist worker (~2-3 CPU-s a worker), and in every `mdvdb`
# process of the run (~260 in the inner loop) each module changed since its .pyc was written
# (~5 ms a module: ~10 CPU-s a run after an edit of a few core modules; a venv never compiled,
# far more). The test process and its workers and subprocesses (they inherit the environment)
# write them once, in `__pycache__` folders, which git ignores; the code runs as it would.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


# Files that pay the same one-time cost in the test process share one work unit under
# `--dist loadfile` (one worker pays it once): the client SDK of MCP (~1.2 CPU-s import);
# MiniLM's weights and onnxruntime (~0.7 CPU-s a process to load, ~2 CPU-s less for the four
# files together than apart); scikit-learn and SciPy (~1.7 CPU-s of imports; ~0.8 CPU-s on a
# faster machine), which `clusters --plot` imports too (its layout: PCA and MDS).
SAME_WORKER = {
    "tests/test_agents_mcp.py": "mcp",
    "tests/test_project_files.py": "mcp",
    "tests/test_minilm.py": "minilm",
    "tests/test_encoder_onnx.py": "minilm",
    "tests/test_warm_queries.py": "minilm",
    "tests/test_bpe.py": "minilm",
    "tests/test_small_kmeans.py": "sklearn",
    "tests/test_cluster_counts.py": "sklearn",
    "tests/test_cli_parser.py": "sklearn",
}


# What the inner loop's files cost (CPU-s: their tests' own and their subprocesses', as the
# end-of-run list gives them; 2026-12-01 18:08-18:15 UTC, load 2.7-3.9, session 11, the mean
# of two runs of `python bench/inner_loop.py --ref /work/base --rounds 2 --files 200`; files
# under 0.6 CPU-s are left to the default). A file whose tests mostly wait (a server's retries
# and timeouts) counts its wall instead: a waiting worker is as busy for the queue.
# Under xdist the work units (a file, or the files of one SAME_WORKER unit: their sum) are
# handed out costliest first, so that the cheap ones fill the end of both workers' queues:
# handed out by number of tests (xdist's default), a 5 CPU-s file of one test came last and
# one worker finished 13 s after the other. A file not listed counts as DEFAULT_FILE_CPU; the
# figures only order the queue (a stale one costs balance, never a result).
FILE_CPU = {
    "tests/test_agents_mcp.py": 2.9,
    "tests/test_minilm.py": 2.7,
    "tests/test_hybrid_candidates.py": 2.6,  # a 400-page index built in the worker
    "tests/test_warm_queries.py": 2.4,
    "tests/test_shard_rounds.py": 2.2,
    "tests/test_providers_http.py": 2.2,  # wall (0.1 CPU-s): Retry-After, a hang, latency
    "tests/test_grep.py": 2.0,
    "tests/test_cli_hygiene.py": 1.9,
    "tests/test_cold_start.py": 1.9,
    "tests/test_encoder_onnx.py": 1.8,
    "tests/test_ivf.py": 1.6,
    "tests/test_project_files.py": 1.6,
    "tests/test_security_outside.py": 1.4,
    "tests/test_agents_search.py": 1.4,
    "tests/test_writer_lock.py": 1.3,
    "tests/test_metadata.py": 1.3,
    "tests/test_incremental_pack.py": 1.3,
    "tests/test_index_writer.py": 1.1,
    "tests/test_results_diversity.py": 1.0,
    "tests/test_parse_retry.py": 1.0,
    "tests/test_ingest_exit.py": 1.0,
    "tests/test_lexical.py": 0.9,
    "tests/test_library.py": 0.9,
    "tests/test_hostile_files.py": 0.9,
    "tests/test_small_kmeans.py": 0.9,
    "tests/test_edit_delta.py": 0.8,
    "tests/test_ingest.py": 0.8,
    "tests/test_cli.py": 0.7,
    "tests/test_watch.py": 0.7,  # wall: a watcher's debounce
    "tests/test_state_handover.py": 0.6,
    "tests/test_layers.py": 0.6,
    "tests/test_index_damage.py": 0.6,
}
DEFAULT_FILE_CPU = 0.5


def file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile`, but the files of SAME_WORKER share one unit (one worker), and the
    units go out in the order of the collection (`by_cost`), not by number of tests."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SAME_WORKER.get(scope, scope)

    return Scheduling(config, log)


def unit_cost(path: str) -> float:
    """What the work unit of a file costs: the file's FILE_CPU, or its SAME_WORKER unit's sum."""
    unit = SAME_WORKER.get(path)
    files = [f for f, u in SAME_WORKER.items() if u == unit] if unit else [path]
    return sum(FILE_CPU.get(f, DEFAULT_FILE_CPU) for f in files)


def by_cost(items: list[pytest.Item]) -> None:
    """Units costliest first (`unit_cost`), each unit's files and each file's tests together
    and in their order."""
    items.sort(key=lambda item: (-unit_cost(file_of(item)), SAME_WORKER.get(file_of(item), "")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "corpora_dir" in item.fixturenames and item.get_closest_marker("corpus") is None:
            item.add_marker(pytest.mark.corpus)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: the order its units go out in
        by_cost(items)


_SPENT: dict[str, float] = {}
_MARKED_SLOW: set[str] = set()
_CPU: dict[str, float] = {}
_WORKER_CPU: dict[str, float] = {}  # xdist worker -> its tests' CPU: the wall's floor
_WORKER_END: dict[str, float] = {}  # xdist worker -> when its last test ended (epoch s)
_FIRST_START: list[float] = []  # when the run's first test began
_CPU_START = pytest.StashKey[float]()
CPU_SHOWN = int(os.environ.get("MDVDB_TEST_CPU_SHOWN", "15"))  # tests listed by CPU at the end


def _cpu_seconds() -> float:
    """CPU of this process and of every child it waited for (the `mdvdb` subprocesses): the
    cost of a test that the others' load does not inflate as it does wall time."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Where the test runs (a worker under xdist): its CPU, setup to teardown, rides on the
    teardown report to the controller."""
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        spent = _cpu_seconds() - item.stash[_CPU_START]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        outcome.get_result().user_properties.extend([("cpu_s", spent), ("worker", worker)])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Runs where the reports arrive (the controller under xdist): sums setup + call."""
    if report.when in ("setup", "call"):
        _SPENT[report.nodeid] = _SPENT.get(report.nodeid, 0.0) + report.duration
        if "slow" in report.keywords:
            _MARKED_SLOW.add(report.nodeid)
    if report.when == "setup" and (not _FIRST_START or report.start < _FIRST_START[0]):
        _FIRST_START[:] = [report.start]
    properties = dict(report.user_properties)
    if "cpu_s" in properties:
        worker = properties["worker"]
        _CPU[report.nodeid] = properties["cpu_s"]
        _WORKER_CPU[worker] = _WORKER_CPU.get(worker, 0.0) + properties["cpu_s"]
        _WORKER_END[worker] = max(_WORKER_END.get(worker, 0.0), report.stop)


def pytest_terminal_summary(terminalreporter) -> None:
    if _CPU:
        terminalreporter.section(f"CPU: {sum(_CPU.values()):.0f} s in all, the {CPU_SHOWN} most")
        if len(_WORKER_CPU) > 1:
            shares = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_WORKER_CPU.items()))
            terminalreporter.write_line(f"by worker: {shares}")
            # A worker that ends early leaves a core idle: the figures say how much.
            ends = ", ".join(
                f"{w} {end - _FIRST_START[0]:.1f} s" for w, end in sorted(_WORKER_END.items())
            )
            terminalreporter.write_line(f"last test ended (after the first began): {ends}")
        for nodeid, spent in sorted(_CPU.items(), key=lambda kv: -kv[1])[:CPU_SHOWN]:
            terminalreporter.write_line(f"{spent:7.1f} s  {nodeid}")
    unmarked = sorted(
        ((spent, nodeid) for nodeid, spent in _SPENT.items() if nodeid not in _MARKED_SLOW),
        reverse=True,
    )
    unmarked = [(spent, nodeid) for spent, nodeid in unmarked if spent > SLOW_SECONDS]
    if unmarked:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        terminalreporter.section(f"over {SLOW_SECONDS:.0f} s without @pytest.mark.slow")
        for spent, nodeid in unmarked:
            terminalreporter.write_line(f"{spent:7.1f} s  {nodeid}")
        terminalreporter.write_line(f"(load average now {load:.1f}: mark only what is slow quiet)")


@pytest.fixture(scope="session")
def corpora_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the corpora are unpacked: one folder per run, shared by the xdist workers (each
    worker's base temp is a child of the run's), so each archive is unpacked once per run.
    The unpacked folders are read-only by convention: a test that ingests copies first."""
    if not SHARED_CORPORA.is_dir():
        pytest.skip("../shared/corpora is not here")
    target = _run_base(tmp_path_factory) / "corpora"
    target.mkdir(exist_ok=True)
    return target


def unpack_corpus(corpora_dir: Path, name: str) -> Path:
    """Unpack ../shared/corpora/<archive> once per run (an exclusive lock per archive: two
    workers asking at once unpack it once); returns the unpacked folder, not to be written."""
    archives = {
        "tldr": "tldr.tar.gz",
        "leetcode": "leetcode.tar.gz",
        "powershell-docs": "powershell-docs.tar.gz",
        "edge-cases": "edge-cases.tar.gz",
        "nfcorpus": "beir-nfcorpus.tar.gz",
        "cranfield": "beir-cranfield.tar.gz",
    }
    target = corpora_dir / name
    with open(corpora_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = corpora_dir / f".{name}.unpacked"
        if not done.exists():
            with tarfile.open(SHARED_CORPORA / archives[name]) as tar:
                tar.extractall(corpora_dir, filter="data")
            done.touch()
    if not target.exists():
        pytest.skip(f"corpus {name} did not unpack to {target}")
    return target
