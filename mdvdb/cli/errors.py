"""Exit codes, and the one place user errors become them (a `SystemExit`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
# `status --check` and the `.mdvdb-off` switch: codes a harness can branch on.
EXIT_STALE, EXIT_NO_INDEX, EXIT_OFF = 3, 4, 5
EXIT_INTERRUPTED = 130

# Set by `mdvdb.cli.main`: this process ends after its one command, so readers skip pyarrow
# (kernel.arrow_lite; docs/benchmarks.md, "Cold `mdvdb search` without pyarrow").
ONE_SHOT = False


# The library's expected failures, by class name so that none of them is imported to be caught.
USER_ERRORS = frozenset(
    {
        "IndexFormatError",
        "ProviderError",
        "QueryError",
        "IngestError",
        "LockBusy",
        "FilterError",
        "UnsafePath",
        "Refused",
        "ShardsError",
    }
)


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_ERROR) -> None:
    from kernel.terminal import printable

    sys.stdout.flush()
    sys.stderr.write(f"mdvdb: {printable(message, one_line=True)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """The library's expected failures as one line and an exit code; a bug keeps its traceback."""
    from kernel.config import ConfigError

    try:
        yield
    except CliError as exc:
        fail(str(exc), exc.code)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    except Exception as exc:
        if is_user_error(exc):
            fail(str(exc), EXIT_ERROR)
        # an open index that fails its checksums: damaged bytes, not a bug
        index_format = sys.modules.get("kernel.index_format")
        damaged = index_format.damage_message() if index_format else None
        if damaged:
            fail(damaged, EXIT_ERROR)
        problem = environment_problem(exc)
        if problem:
            fail(problem, EXIT_ERROR)
        raise


# What the machine refuses (a full disk, a read-only folder, a file-size limit): one line.
_FULL = ("ENOSPC", "EDQUOT", "EFBIG")
_DENIED = ("EACCES", "EPERM", "EROFS")
_SQLITE_FULL, _SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_PERM, _SQLITE_IOERR = 13, 8, 14, 3, 10


def environment_problem(exc: BaseException) -> str | None:
    """The one line for an OSError (or SQLite's) of a full disk or a read-only folder, or None."""
    import errno

    def named(*names: str) -> set[int]:
        return {getattr(errno, n) for n in names if hasattr(errno, n)}

    full = "free some space (or raise the file-size limit) and run it again"
    denied = (
        "the folder is read-only for you; to keep the index elsewhere, set MDVDB_INDEX_FILE "
        "and MDVDB_STATE_DIR in your environment"
    )
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f" {exc.filename}" if exc.filename else ""
        if exc.errno in named(*_FULL):
            return f"cannot write{where}: {exc.strerror}; {full}"
        if exc.errno in named(*_DENIED):
            return f"cannot write{where}: {exc.strerror}; {denied}"
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and type(exc).__name__ == "OperationalError":
        primary = code & 0xFF  # an extended code's primary one
        if primary == _SQLITE_FULL:
            return f"cannot write the state cache: {exc}; {full}"
        if primary == _SQLITE_IOERR:  # SQLite's word for EFBIG too (a file-size limit)
            return f"cannot write the state cache: {exc} (a full disk or a limit?); {full}"
        if primary in (_SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_PERM):
            return f"cannot write the state cache: {exc}; {denied}"
    return None


def is_user_error(exc: BaseException, names: frozenset[str] = USER_ERRORS) -> bool:
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def load(root: Path | str | None):
    from pathlib import Path

    from kernel.config import load_config, unknown_keys

    if root is not None:
        root = Path(root)
        if not root.is_dir():
            raise CliError(f"--root {root}: not a folder", EXIT_USAGE)
    config = load_config(root)
    # misspelt keys of `.markdownvdb` (not the environment's: a shell holds other tools' too)
    for key, suggestion in unknown_keys(config):
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        echo(f"mdvdb: warning: {config.root / '.markdownvdb'}: unknown key {key}{hint}", err=True)
    return config


def refuse_if_off(config) -> None:
    """A `.mdvdb-off` file in the root switches search off (exit 5)."""
    from kernel.config import OFF_FILE

    if config.switched_off:
        raise CliError(f"search is switched off here ({config.root / OFF_FILE} exists)", EXIT_OFF)


def print_json(data: Any) -> None:
    sys.stdout.write(json_text(data))


def json_text(data: Any) -> str:
    """One `--json` document: `schema_version` first (docs/json.md), then the result."""
    import json

    from kernel.version import JSON_SCHEMA_VERSION

    if isinstance(data, dict):
        data = {"schema_version": JSON_SCHEMA_VERSION, **data}
    return json.dumps(data, ensure_ascii=False, default=str) + "\n"


def echo(text: str = "", err: bool = False) -> None:
    """One line to stdout (or stderr), control characters escaped (`kernel.terminal`)."""
    from kernel.terminal import printable

    (sys.stderr if err else sys.stdout).write(f"{printable(text)}\n")


def line(text: str = "", err: bool = False) -> None:
    """A line as given, flushed (stdout and stderr lines keep their order in one file)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}\n")
    stream.flush()
