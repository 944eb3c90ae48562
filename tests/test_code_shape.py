"""The shipped code's shape, read with `ast`: no function over 100 lines, and no module that
patches another package's internals (an assignment into `sys.modules`, an attribute written
into another package's module, such as `dataclasses` or `re`, a swapped `builtins.exec`,
an import hook in `sys.meta_path`). Each check is also run on a planted example, so that it
can fail."""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kernel", "pipeline", "query", "mdvdb")
MOST_LINES = 100
# Over the limit, each with the issue that splits it; an entry that is no longer over it
# fails the test too, so the list only shrinks.
LONG_FOR_NOW: dict[str, str] = {}


def shipped() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def long_functions(source: str, most: int = MOST_LINES) -> list[str]:
    return [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > most
    ]


def _modules_named(tree: ast.AST) -> dict[str, str]:
    """Local name -> the module it names, for every `import x`, `import x as y` and
    `from x import y` that binds a module."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _is_module(full):
                    names[alias.asname or alias.name] = full
    return names


@cache
def _is_module(name: str) -> bool:
    """Whether `name` (dotted) is a module, found on disk without importing its packages."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: located, not imported
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    folders = [Path(f) for f in spec.submodule_search_locations or ()]
    for i, part in enumerate(rest):
        if i == len(rest) - 1:
            return any(
                (f / part).is_dir() or (f / f"{part}.py").exists() or any(f.glob(f"{part}.*.so"))
                for f in folders
            )
        folders = [f / part for f in folders if (f / part).is_dir()]
    return True


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


HOOKS = ("sys.meta_path.", "sys.path_hooks.", "sys.modules.")
MUTATORS = ("insert", "append", "extend", "setdefault", "update", "pop", "__setitem__")


def patches(source: str) -> list[str]:
    """Where `source` writes into another package's module or the import system."""
    tree = ast.parse(source)
    modules = _modules_named(tree)

    def foreign(base: str | None) -> bool:
        if base is None:
            return False
        module = modules.get(base.split(".")[0])
        return module is not None and not module.startswith(PACKAGES)

    found = []
    for node in ast.walk(tree):
        targets: list = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Attribute) and foreign(_dotted(target.value)):
                found.append(f"line {node.lineno}: {_dotted(target)} =")
            if isinstance(target, ast.Subscript) and _dotted(target.value) == "sys.modules":
                found.append(f"line {node.lineno}: sys.modules[...] =")
        if isinstance(node, ast.Call):
            called = _dotted(node.func) or ""
            if called in ("setattr", "delattr") and node.args and foreign(_dotted(node.args[0])):
                found.append(f"line {node.lineno}: {called}({_dotted(node.args[0])}, ...)")
            if called.startswith(HOOKS) and called.rsplit(".", 1)[1] in MUTATORS:
                found.append(f"line {node.lineno}: {called}()")
    return found


def test_no_function_is_over_100_lines():
    planted = "def f():\n" + "    x = 1\n" * MOST_LINES
    assert long_functions(planted) == [f"f: {MOST_LINES + 1} lines"]
    found = {}
    for path in shipped():
        for function in long_functions(path.read_text("utf-8")):
            found[f"{path.relative_to(REPO)}:{function.split(':')[0]}"] = function
    assert set(found) == set(LONG_FOR_NOW), found


@pytest.mark.parametrize(
    "planted",
    [
        "import sys\nsys.modules['numpy.ma'] = object()\n",
        "import sys\ndel sys.modules['cloudpickle']\n",
        "import dataclasses\ndataclasses.exec = print\n",
        "import re\nre._compile = None\n",
        "import builtins\nbuiltins.exec = print\n",
        "import sys\nsys.meta_path.insert(0, object())\n",
        "import sys\nsys.modules.setdefault('x', None)\n",
        "from doit import plugin\nplugin.entry_points_impl = dict\n",
        "import numpy as np\nsetattr(np, 'ma', None)\n",
        "import pyarrow.vendored.docscrape as d\nd.NumpyDocString = object\n",
    ],
)
def test_the_patch_check_finds_a_planted_patch(planted: str):
    assert patches(planted), planted


def test_the_patch_check_leaves_ordinary_code_alone():
    ordinary = (
        "import os\nos.environ['X'] = '1'\n"
        "from query.score import second_core\nsecond_core._THREADS = 2\n"
        "import sys\nx = sys.modules.get('numpy')\n"
    )
    assert patches(ordinary) == []


def test_no_shipped_module_patches_another_packages_internals():
    found = {}
    for path in shipped():
        hits = patches(path.read_text("utf-8"))
        if hits:
            found[str(path.relative_to(REPO))] = hits
    assert not found, found
