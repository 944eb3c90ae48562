"""The layering as a contributor meets it: `lint-imports` (the contracts in pyproject.toml)
passes on the code, and fails, naming the contract, when an import runs back up a layer, joins
pipeline/ and query/, closes a cycle in query/ or pipeline/, or breaks the order of their
subpackages. The public fronts (`__all__`) resolve."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGES = tuple(PYPROJECT["tool"]["importlinter"]["root_packages"])
KERNEL_MODULE = "kernel/text_analysis.py"  # a kernel module, at the bottom
LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [LINT, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The packages and pyproject.toml in a folder of their own, to break on purpose."""
    for package in PACKAGES:
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(path: Path, statement: str) -> None:
    """A function-level import, as the code base's lazy imports are: it counts too."""
    with path.open("a", encoding="utf-8") as f:
        f.write(f"\n\ndef _added_by_the_test():\n    {statement}\n")


def test_lint_imports_passes_on_the_code():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and " 0 broken" in result.stdout


# One case of each contract, all in one copy and one `lint-imports` run (a run costs ~0.4
# CPU-s): each contract's section of the report must name the import added for it.
ONE_OF_EACH = [
    # the kernel importing the shell: a back-up import
    (KERNEL_MODULE, "from mdvdb.cli import main", "Layers", "kernel.text_analysis -> mdvdb.cli"),
    # the write side importing the read side
    (
        "pipeline/walk/discover.py",
        "from query import open_index",
        "never import each other",
        "pipeline.walk.discover -> query",
    ),
    # the shell reaching past the read side's public names
    (
        "mdvdb/cli/status.py",
        "from query.verify import verify",
        "public names",
        "mdvdb.cli.status -> query.verify",
    ),
    # a cycle inside query/: snapshot is the bottom, index the front
    ("query/snapshot.py", "from query.index import Index", "query has no import cycle", "index"),
    # a cycle inside pipeline/: a pack step reaching back into pack
    (
        "pipeline/pack/lexical.py",
        "from pipeline.pack.build import plan",
        "pipeline has no import",
        "lexical",
    ),
    # the scoring functions reaching up into a search's ranking
    (
        "query/score/vector.py",
        "from query.rank.search import search",
        "rank > shards > score",
        "query.score.vector -> query.rank.search",
    ),
    # grep opening the index it promises not to need
    (
        "query/grep/ripgrep.py",
        "from query.snapshot import Reader",
        "never the index",
        "query.grep.ripgrep -> query.snapshot",
    ),
    # the clustering step reaching up into pack, which calls it
    (
        "pipeline/cluster/topics.py",
        "from pipeline.pack.build import plan",
        "pack > cluster",
        "pipeline.cluster.topics -> pipeline.pack.build",
    ),
]


def sections(report: str) -> dict[str, str]:
    """The "Broken contracts" part of a `lint-imports` report, by contract name (each a title
    line underlined with dashes)."""
    lines = report.split("Broken contracts", 1)[-1].splitlines()
    found: dict[str, list[str]] = {}
    title = None
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and lines[i + 1].startswith("---") and line.strip():
            title = line.strip()
            found[title] = []
        elif title is not None:
            found[title].append(line)
    return {name: "\n".join(body) for name, body in found.items()}


def test_a_wrong_import_breaks_its_contract(copy: Path):
    for where, statement, _, _ in ONE_OF_EACH:
        add_import(copy / where, statement)
    result = lint(copy)
    assert result.returncode != 0, result.stdout
    broken = sections(result.stdout)
    for where, statement, contract, named in ONE_OF_EACH:
        [name] = [name for name in broken if contract in name] or [None]
        assert name is not None, (contract, result.stdout)
        assert named in broken[name], (where, statement, broken[name])


SLOW = pytest.mark.slow  # the other cases, each in a copy of its own (CI)


@pytest.mark.parametrize(
    ("where", "statement", "contract"),
    [
        # the kernel importing the read side
        pytest.param(KERNEL_MODULE, "from query import open_index", "Layers", marks=SLOW),
        # the read side importing the shell
        pytest.param("query/rank/search.py", "from mdvdb.cli import search", "Layers", marks=SLOW),
        # the stages and their doit adapters: tasks calls the stages, never the reverse
        pytest.param(
            "pipeline/stages.py",
            "from pipeline.tasks import IngestRun",
            "pipeline has no import",
            marks=SLOW,
        ),
    ],
)
def test_a_wrong_import_breaks_a_contract(copy: Path, where: str, statement: str, contract: str):
    add_import(copy / where, statement)
    result = lint(copy)
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), result.stdout


@pytest.mark.parametrize("package", ["pipeline", "query"])
def test_every_public_name_resolves(package: str):
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    assert set(module.__all__) == set(module._PUBLIC)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_every_package_declares_its_public_names():
    for init in sorted(REPO.glob("*/**/__init__.py")):
        if init.parts[len(REPO.parts)] not in PACKAGES or "tests" in init.parts:
            continue
        assert "__all__" in init.read_text(encoding="utf-8"), init


def test_the_search_path_takes_no_untyped_keyword_bags():
    """`**options: Any` once erased the search signature between the index and the tiers:
    every function on the search path names and types what it takes."""
    import inspect

    from query.index import Index
    from query.rank.search import search
    from query.rank.tiers import tiered_search

    for function in (Index.search, Index.asearch, search, tiered_search):
        for param in inspect.signature(function).parameters.values():
            assert param.kind is not inspect.Parameter.VAR_KEYWORD, (function, param)
            assert param.name == "self" or param.annotation is not inspect.Parameter.empty


MUTATORS = {"update", "append", "extend", "clear", "pop", "popitem", "setdefault", "add"}
MUTATORS |= {"remove", "insert", "discard", "appendleft", "__setitem__"}


def module_state_writes(source: str) -> list[str]:
    """Where a function writes module state: a `global` statement, or an item set on, or a
    mutating method called on, a module-level name bound to a dict, list, set or deque."""
    import ast

    tree = ast.parse(source)
    containers = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
    kinds = {"dict", "list", "set", "defaultdict", "deque", "OrderedDict", "Counter"}
    shared = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        value = getattr(node, "value", None)
        called = isinstance(value, ast.Call) and getattr(value.func, "id", None) in kinds
        if isinstance(value, containers) or called:
            shared |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    # Everything inside a top-level function or class runs after import (each walked once).
    for top in tree.body:
        if not isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(top):
            if isinstance(node, ast.Global):
                found += [f"{top.name}: global {', '.join(node.names)}"]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                if getattr(node.value, "id", None) in shared:
                    found.append(f"{top.name}: {node.value.id}[...] =")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = getattr(node.func.value, "id", None)
                if owner in shared and node.func.attr in MUTATORS:
                    found.append(f"{top.name}: {owner}.{node.func.attr}()")
    return found


def test_no_pipeline_module_keeps_stage_state_in_a_global():
    """A stage gets its run as an argument and returns its output; nothing a run learns
    (a pool's actors, a stage's context) is parked in a module global, where a second run in
    the process (the watcher, the library's `aingest`) would read or overwrite it."""
    assert module_state_writes("_last = {}\ndef f():\n    _last['actors'] = 3\n")
    assert module_state_writes("_last = dict()\ndef f():\n    _last.update(a=1)\n")
    assert module_state_writes("RUN = None\ndef f(run):\n    global RUN\n    RUN = run\n")
    assert not module_state_writes("KINDS = {}\ndef f():\n    out = {}\n    out['a'] = 1\n")
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        assert module_state_writes(path.read_text(encoding="utf-8")) == [], path.name
