"""A package's public names, each loaded from its module on first use (PEP 562): the
`__init__` of `pipeline`, `query` and `mdvdb` imports nothing (docs/architecture.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, tuple[str, str]], public: Iterable[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`: `table` maps a public name to (module,
    name in that module); a loaded name is kept in the package, so it is looked up once."""
    names = set(public)

    def __getattr__(name: str) -> object:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # the import statement's path (importlib.import_module would hide it from -X importtime)
        value = getattr(__import__(where[0], fromlist=[where[1]]), where[1])
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | names)

    return __getattr__, __dir__
