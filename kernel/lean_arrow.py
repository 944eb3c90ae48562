"""`pyarrow.compute`'s import without parsing docstrings a short command never reads.

`import pyarrow.compute` wraps every Arrow compute function (~290) in a Python function and
writes its docstring; for each one whose options class is documented it parses that class's
numpydoc text with `pyarrow.vendored.docscrape` (which imports `pydoc`). That is ~40% of the
import (~35 ms of a small ingest, which needs the module: `Table.filter`, `is_in`...).

`defer_compute_docs()` installs an import hook that, when (and only when) `pyarrow.compute`
is imported, stands in for `pyarrow.vendored.docscrape` during that import with a parser that
finds no parameters: the functions, their signatures (`__signature__`, built from the
options classes themselves) and their results are the same; their docstrings lack the
options' parameter descriptions (`help(pc.sum)` names the options class instead). The stand-in
leaves `sys.modules` after the import, and the module's `docscrape` name is set back to the
real module, loaded on first use. Only the short commands' processes
(`mdvdb.cli.lean_start`) call it.
"""

from __future__ import annotations

import sys
import types

DOCSCRAPE = "pyarrow.vendored.docscrape"


class _NoParameters(dict):
    """`docscrape.NumpyDocString(text)` as `pyarrow.compute` reads it: no parameters."""

    def __init__(self, text: str = "", config: dict | None = None):
        super().__init__(Parameters=[])


class _Docscrape(types.ModuleType):
    NumpyDocString = _NoParameters


class _Lazy(types.ModuleType):
    """The real `docscrape`, loaded on the first attribute use."""

    def __getattr__(self, name: str):
        import importlib

        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(DOCSCRAPE), name)


class _ComputeFinder:
    """A meta path finder for `pyarrow.compute` alone; removes itself on first use."""

    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None):
        if fullname != "pyarrow.compute":
            return None
        from kernel.lean_numpy import next_spec_run_around

        return next_spec_run_around(cls, fullname, path, target, _without_docscrape)


def _without_docscrape(plain, module) -> None:
    """pyarrow.compute's own import, with the docstring parser stood in for while it runs."""
    if DOCSCRAPE in sys.modules:
        return plain(module)
    stand_in = sys.modules[DOCSCRAPE] = _Docscrape(DOCSCRAPE)
    try:
        plain(module)
    finally:
        if sys.modules.get(DOCSCRAPE) is stand_in:
            del sys.modules[DOCSCRAPE]
        if getattr(module, "docscrape", None) is stand_in:
            module.docscrape = _Lazy(DOCSCRAPE)


def defer_compute_docs() -> bool:
    """Install the hook, unless pyarrow.compute is already imported; whether it was."""
    if "pyarrow.compute" in sys.modules or _ComputeFinder in sys.meta_path:
        return False
    sys.meta_path.insert(0, _ComputeFinder)
    return True
