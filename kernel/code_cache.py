"""The code `dataclasses` generates, compiled once per user instead of once per process.

Each `@dataclass` writes the source of its `__init__`, `__repr__`, `__eq__`... and compiles
it with `exec` when its module is imported. Parsing and compiling those texts is ~18% of the
instructions of a cold `mdvdb search` (the ~40 dataclasses on its path; NumPy's import
compiles nothing at run time). `remember_generated_code` shadows `exec` in the `dataclasses`
module with one that keeps the code object of each source text in a marshal file in the
per-user cache (`kernel.user_cache`), as `__pycache__` keeps a module's: the same text compiled
with the same flags is the same code, so the classes are the same. The file is named by the
interpreter's exact version (bytecode and marshal format), written only when a text was
missing (atomically), and ignored when it is unreadable, foreign, or not the user's own and
private. Only the one-shot search process uses it (`mdvdb.cli.main`).
"""

from __future__ import annotations

import builtins
import marshal
import os
import sys
from pathlib import Path

ENTRIES_MAX = 4096  # source texts kept (then the file starts over)


def cache_file() -> Path:
    from kernel.user_cache import cache_dir

    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:x}"
    return cache_dir() / "code" / f"dataclasses.{tag}.marshal"


class GeneratedCode:
    """`exec` for `dataclasses`: a source text's code object from the cache, else compiled
    (and remembered) exactly as `exec` would compile it."""

    def __init__(self, path: Path):
        self.path = path
        self.codes = _read(path)
        self.added = False

    def exec(self, source, globals=None, locals=None, /, **options):  # noqa: A002 - exec's
        if type(source) is str and not options:
            code = self.codes.get(source)
            if code is None:
                # exec(str) in `dataclasses` (no __future__ imports) compiles with no
                # inherited flags, file name "<string>": the same call.
                code = compile(source, "<string>", "exec", dont_inherit=True)
                if len(self.codes) >= ENTRIES_MAX:
                    self.codes.clear()
                self.codes[source] = code
                self.added = True
            source = code
        return builtins.exec(source, globals, locals, **options)

    def save(self) -> bool:
        """Write the file if this process compiled a text it did not hold."""
        if not self.added:
            return False
        from kernel.user_cache import atomic_write

        data = marshal.dumps(self.codes)
        self.added = False
        return atomic_write(self.path, lambda fh: fh.write(data))


def _read(path: Path) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return {}  # code is only taken from a file nobody else can write
        with os.fdopen(fd, "rb", closefd=False) as fh:
            codes = marshal.loads(fh.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    finally:
        os.close(fd)
    if type(codes) is not dict:
        return {}
    return {k: v for k, v in codes.items() if type(k) is str and type(v) is _CODE}


_CODE = type(compile("", "<string>", "exec"))


def remember_generated_code(path: Path | None = None) -> GeneratedCode | None:
    """Install the cache for the classes this process creates from now on; None if the
    `dataclasses` module already has an `exec` of its own (someone else's)."""
    import dataclasses

    if "exec" in vars(dataclasses):
        return None
    cache = GeneratedCode(path or cache_file())
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]  # shadows the builtin there
    return cache
