"""The code `dataclasses` generates and the programs `re` compiles, once per user instead of
once per process.

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

Regular expressions are the same story: `re.compile` parses a pattern and builds its
program in pure Python (`re._parser`, `re._compiler`), ~60 patterns compiled by the modules
a search imports (NumPy's, the standard library's and ours: ~5% of its instructions).
`remember_regex_programs` keeps, per pattern and flags, the arguments `re._compiler.compile`
hands to `_sre.compile` (the program as a list of integers, the group count and names) in a
second file, `code/re.<python tag>-<hexversion>-<sre magic>.marshal`, and builds the pattern
from them: `_sre.compile` validates a program before it runs it, and a pattern built this
way compares equal (`==` compares the programs) to the one `re` compiles. Only patterns
compiled at module level (by an import) are kept: a query's own patterns (the excerpt's
words) would make the file grow with every new query.
"""

from __future__ import annotations

import builtins
import marshal
import os
import sys
from pathlib import Path
from typing import Any

ENTRIES_MAX = 4096  # source texts kept (then the file starts over)


def cache_file(group: str = "") -> Path:
    """`group`: one file per kind of process (`mdvdb.cli.lean_start` gives the command), so a
    search reads only what a search compiles, not what an ingest added (a few hundred texts
    more: ~2 ms to read); "" is the search's."""
    from kernel.user_cache import cache_dir

    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:x}"
    return cache_dir() / "code" / f"dataclasses.{_group(group)}{tag}.marshal"


def _group(group: str) -> str:
    if group and not (group.isascii() and group.isalpha()):
        raise ValueError(f"not a cache group: {group!r}")
    return f"{group}." if group else ""


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
    codes = _read_private(path)
    return {k: v for k, v in codes.items() if type(k) is str and type(v) is _CODE}


def _read_private(path: Path) -> dict:
    """The dict marshalled in `path`, if the file is the user's own and private; else {}."""
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
    return codes if type(codes) is dict else {}


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


def regex_cache_file(group: str = "") -> Path:
    """`group`: as for `cache_file`."""
    import _sre

    from kernel.user_cache import cache_dir

    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:x}-{_sre.MAGIC}"
    return cache_dir() / "code" / f"re.{_group(group)}{tag}.marshal"


# (pattern, flags) -> the arguments of `_sre.compile` after the pattern: final flags, the
# program (ints), the group count - 1, {name: group}, (name or None per group)
_Program = tuple[int, list[int], int, dict[str, int], tuple[Any, ...]]


class RegexPrograms:
    """`re._compiler.compile` with the programs of module-level patterns kept per user."""

    def __init__(self, path: Path, compile_):
        self.path = path
        self.programs: dict[tuple[Any, int], _Program] = {
            k: v for k, v in _read_private(path).items() if _sound(k, v)
        }
        self.added = False
        self._compile = compile_  # re._compiler.compile, the plain one

    def compile(self, p, flags=0):
        import _sre

        if type(p) not in (str, bytes) or flags & 128:  # a parsed pattern; re.DEBUG prints
            return self._compile(p, flags)
        key = (p, int(flags))
        found = self.programs.get(key)
        if found is not None:
            try:
                return _sre.compile(p, *found)
            except (RuntimeError, TypeError, ValueError, OverflowError):  # not a sound program
                del self.programs[key]
        if not _at_module_level(sys._getframe(1)):
            return self._compile(p, flags)
        from re import _compiler, _parser

        parsed = _parser.parse(p, flags)
        code = [int(op) for op in _compiler._code(parsed, flags)]
        names = dict(parsed.state.groupdict)
        groups = [None] * parsed.state.groups
        for name, i in names.items():
            groups[i] = name
        program = (int(flags | parsed.state.flags), code, parsed.state.groups - 1, names)
        program += (tuple(groups),)
        pattern = _sre.compile(p, *program)
        if len(self.programs) >= ENTRIES_MAX:
            self.programs.clear()
        self.programs[key] = program
        self.added = True
        return pattern

    def save(self) -> bool:
        """Write the file if this process compiled a module-level pattern it did not hold."""
        if not self.added:
            return False
        from kernel.user_cache import atomic_write

        data = marshal.dumps(self.programs)
        self.added = False
        return atomic_write(self.path, lambda fh: fh.write(data))


def _sound(key: Any, value: Any) -> bool:
    """The shapes `RegexPrograms` writes (a damaged entry is dropped, not trusted)."""
    return (
        type(key) is tuple
        and len(key) == 2
        and type(key[0]) in (str, bytes)
        and type(key[1]) is int
        and type(value) is tuple
        and len(value) == 5
        and type(value[0]) is int
        and type(value[1]) is list  # of ints: `_sre.compile` refuses anything else
        and type(value[2]) is int
        and type(value[3]) is dict
        and all(type(k) is str and type(v) is int for k, v in value[3].items())
        and type(value[4]) is tuple
    )


def _at_module_level(frame) -> bool:
    """Whether the code that asked `re` for this pattern runs a module's body (an import),
    directly or through one function (`warnings.filterwarnings(...)` at module level)."""
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "re":
        frame = frame.f_back
    for _ in range(2):
        if frame is None:
            return False
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def remember_regex_programs(path: Path | None = None) -> RegexPrograms | None:
    """Install the cache for the patterns compiled from now on; None if `re._compiler.compile`
    is not the standard library's own (someone else replaced it)."""
    from re import _compiler

    if getattr(_compiler.compile, "__module__", None) != "re._compiler":
        return None
    cache = RegexPrograms(path or regex_cache_file(), _compiler.compile)
    _compiler.compile = cache.compile
    return cache
