"""NumPy's import without the parts a one-shot search never touches.

`import numpy` (NumPy 2.4, ~350 M instructions with the collector off) spends a third of its
work on three things a `mdvdb search` never uses:

- **docstrings**: `numpy._core._add_newdocs` and `_add_newdocs_scalars` attach ~370
  docstrings to the C types and functions, each first passed through `inspect.cleandoc`
  (~15% of the import);
- **type hints**: `numpy.linalg` imports `numpy._typing` for the annotations of five
  NamedTuples (`EigResult`...): ~80 `typing` subscriptions and `Literal`s (~13%);
- **ctypes** and **platform**, imported by `numpy._core._internal` and `numpy.lib._utils_impl`
  for `ndarray.ctypes` and `np.show_runtime()` only (~3%).

`defer_numpy_extras()` installs an import hook that, when (and only when) `numpy` itself is
imported, stands in for these modules during that import with deferred ones: a deferred
module loads the real one on its first attribute use (`arr.ctypes`, `platform.uname()`,
`import numpy.typing` all work as before), so nothing is lost but the docstrings of NumPy's
C objects and the exact annotations of the linalg NamedTuples (`numpy._typing.NDArray` is
`numpy.ndarray` for `numpy.linalg._linalg` during that import). Once NumPy is imported the
stand-ins leave `sys.modules`: a later import of any of them runs the real module.

`numpy.ma` is the same story after the import: `np.unique(x)` (and `union1d`, `setdiff1d`...,
which call it) asks `np.ma.is_masked(x)`, and `pa.array(ndarray)` asks `isinstance(x,
np.ma.MaskedArray)`; that first `np.ma` imports the masked-array package (~10-15 ms).
`numpy.ma` is set to a stand-in that answers these two itself while the real package was
never imported (then no masked array exists: nothing is masked, nothing is one) and loads
the real package for any other name; an explicit `import numpy.ma` replaces it. Its
`MaskedArray` asks the real class once the package is loaded (so a copy kept by some module
stays right) and builds real ones.

Only the short commands' processes (`mdvdb.cli.lean_start`) call it; a library user, `mdvdb
serve`, MCP and the tests import NumPy as usual.
"""

from __future__ import annotations

import sys
import types

# Modules NumPy's import loads that a search never uses: stood in for during that import.
DEFERRED = (
    "numpy._core._add_newdocs",
    "numpy._core._add_newdocs_scalars",
    "numpy._typing",
    "ctypes",
    "platform",
)
# numpy._typing's names that are served without loading it, and to which module only.
TYPING_FOR = {"NDArray": "numpy.linalg._linalg"}


class _Deferred(types.ModuleType):
    """A module that is loaded (for real, by the import system) on its first attribute use.
    numpy._typing's stand-in carries the real `__path__`, so that `from numpy._typing import
    NDArray` asks it for the name (and its submodules would import as usual)."""

    def __getattr__(self, name: str):
        if name in TYPING_FOR and self.__name__ == "numpy._typing":
            numpy = sys.modules.get("numpy")
            if _caller(sys._getframe(1)) == TYPING_FOR[name] and numpy is not None:
                return numpy.ndarray  # `NDArray[Any]` in a NamedTuple's annotations
        return getattr(_load(self.__name__), name)


class _MaskedMeta(type):
    """isinstance/issubclass against the real `MaskedArray` once `numpy.ma` is loaded; before
    that no masked array exists."""

    def __instancecheck__(cls, obj) -> bool:
        real = sys.modules.get("numpy.ma")
        return real is not None and isinstance(obj, real.MaskedArray)

    def __subclasscheck__(cls, sub) -> bool:
        real = sys.modules.get("numpy.ma")
        return real is not None and issubclass(sub, real.MaskedArray)


class _MaskedArray(metaclass=_MaskedMeta):
    """`np.ma.MaskedArray` before `numpy.ma` is loaded: building one loads it."""

    def __new__(cls, *args, **kwargs):
        return _real_ma().MaskedArray(*args, **kwargs)


def _real_ma() -> types.ModuleType:
    import importlib

    real = importlib.import_module("numpy.ma")
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(vars(numpy).get("ma"), _MaskedArrays):
        numpy.ma = real
    return real


class _MaskedArrays(types.ModuleType):
    """`numpy.ma` until something other than `is_masked` or `MaskedArray` is asked of it."""

    MaskedArray = _MaskedArray

    def is_masked(self, x) -> bool:
        real = sys.modules.get("numpy.ma")
        if real is None:  # never imported: no MaskedArray exists, so nothing is masked
            return False
        return real.is_masked(x)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_real_ma(), name)


def _caller(frame) -> str | None:
    """The module whose code asked, past the import system's own frames."""
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name not in ("importlib._bootstrap", "importlib._bootstrap_external"):
            return name
        frame = frame.f_back
    return None


def _load(name: str) -> types.ModuleType:
    import importlib

    found = sys.modules.get(name)
    if isinstance(found, _Deferred):
        del sys.modules[name]
    return importlib.import_module(name)


def next_spec_run_around(finder: type, fullname: str, path, target, around):
    """For a meta path finder that serves one import: the spec the finders after it give
    for `fullname` (it removes itself from `sys.meta_path` first), its loader's
    `exec_module` replaced, for that one call, by `around(exec_module, module)`. A spec
    without such a loader is returned as found."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    spec = None
    for other in sys.meta_path:  # what the import system would ask next
        find = getattr(other, "find_spec", None)
        spec = find(fullname, path, target) if find is not None else None
        if spec is not None:
            break
    loader = getattr(spec, "loader", None)
    if spec is None or loader is None or not hasattr(loader, "exec_module"):
        return spec
    plain = loader.exec_module

    def exec_module(module):
        del loader.exec_module  # the loader's own method again
        return around(plain, module)

    loader.exec_module = exec_module
    return spec


class _NumpyFinder:
    """A meta path finder for `numpy` alone: the spec the other finders give, its loader's
    `exec_module` run with the stand-ins in place. Removes itself on first use."""

    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None):
        if fullname != "numpy":
            return None
        return next_spec_run_around(cls, fullname, path, target, _with_stand_ins)


def _with_stand_ins(plain, module) -> None:
    """NumPy's own import, with DEFERRED's modules stood in for while it runs."""
    stand_ins = {}
    for name in DEFERRED:
        if name not in sys.modules:
            stand_ins[name] = sys.modules[name] = _Deferred(name)
    typing = stand_ins.get("numpy._typing")
    if typing is not None:  # a package: `from numpy._typing import NDArray` asks it
        typing.__path__ = [f"{p}/_typing" for p in module.__spec__.submodule_search_locations]
    try:
        plain(module)
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    if "numpy.ma" not in sys.modules and "ma" not in vars(module):
        module.ma = _MaskedArrays("numpy.ma")


def defer_numpy_extras() -> bool:
    """Install the hook, unless NumPy is already imported; whether it was installed."""
    if "numpy" in sys.modules or _NumpyFinder in sys.meta_path:
        return False
    sys.meta_path.insert(0, _NumpyFinder)
    return True
