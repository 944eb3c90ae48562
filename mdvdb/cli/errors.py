"""Exit codes and the one place user errors become them, without typer.

`mdvdb search` answers most calls without importing typer (see `mdvdb.cli.search`), so what
both paths need lives here: the codes, `CliError`, `user_errors()`, loading the configuration
and printing JSON. An error leaves through `SystemExit`, which typer, click's test runner and
the warm process all pass through unchanged.
"""

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

# The options every command shares, declared once for typer (`app.RootOption`, `JsonOption`)
# and for the hand parsers of the hot path.
ROOT_FLAG, ROOT_HELP = (
    "--root",
    "Project root (default: the nearest folder upward with .markdownvdb or an index).",
)
JSON_FLAG, JSON_HELP = "--json", "One JSON document on stdout."

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
    """Turn the library's expected failures into one line on stderr and an exit code; anything
    else is a bug and keeps its traceback."""
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
        damaged = damage_of(exc)
        if damaged:
            fail(damaged, EXIT_ERROR)
        raise


def damage_of(exc: BaseException) -> str | None:
    """When an unexpected error happened while an index was open and that index fails its
    checksums, the one-line damage message (the error came from damaged bytes, not a bug)."""
    index_format = sys.modules.get("kernel.index_format")
    if index_format is None or isinstance(exc, SystemExit | KeyboardInterrupt):
        return None
    return index_format.damage_message()


def is_user_error(exc: BaseException, names: frozenset[str] = USER_ERRORS) -> bool:
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def load(root: Path | str | None):
    from pathlib import Path

    from kernel.config import load_config

    if root is not None:
        root = Path(root)
        if not root.is_dir():
            raise CliError(f"--root {root}: not a folder", EXIT_USAGE)
    config = load_config(root)
    warn_unknown_keys(config)
    return config


def warn_unknown_keys(config) -> None:
    """A misspelt MDVDB_* key in `.markdownvdb` is otherwise silently ignored: say so, one
    line on stderr per key, with the closest setting. (Unknown MDVDB_* variables in the
    environment are left alone: a shell holds variables for other tools and versions.)"""
    from kernel.config import unknown_keys

    for key, suggestion in unknown_keys(config):
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        echo(f"mdvdb: warning: {config.root / '.markdownvdb'}: unknown key {key}{hint}", err=True)


def refuse_if_off(config) -> None:
    """A `.mdvdb-off` file in the root switches search off (exit 5), for users who want an
    agent to stop using mdvdb without uninstalling it."""
    from kernel.config import OFF_FILE

    if config.switched_off:
        raise CliError(f"search is switched off here ({config.root / OFF_FILE} exists)", EXIT_OFF)


def print_json(data: Any) -> None:
    """One `--json` document: `schema_version` first (docs/json.md), then the result."""
    import json

    from kernel.version import JSON_SCHEMA_VERSION

    if isinstance(data, dict):
        data = {"schema_version": JSON_SCHEMA_VERSION, **data}
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")


def echo(text: str = "", err: bool = False) -> None:
    """typer.echo's job for plain text: one line to stdout (or stderr), control characters
    escaped (the text comes from the notes; `kernel.terminal`)."""
    from kernel.terminal import printable

    (sys.stderr if err else sys.stdout).write(f"{printable(text)}\n")
