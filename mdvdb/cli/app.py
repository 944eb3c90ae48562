"""The typer app, shared options and the one place user errors become exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    name="mdvdb",
    help="Markdown VDB: search folders of Markdown by meaning, keywords or exact text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

RootOption = Annotated[
    Path | None,
    typer.Option("--root", help="Project root (default: nearest folder with .markdownvdb)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
# `status --check` and the `.mdvdb-off` switch: codes a harness can branch on.
EXIT_STALE, EXIT_NO_INDEX, EXIT_OFF = 3, 4, 5


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_ERROR) -> None:
    typer.echo(f"mdvdb: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the library's expected failures into one line on stderr and an exit code."""
    from mdvdb.config import ConfigError

    try:
        yield
    except typer.Exit:
        raise
    except CliError as exc:
        fail(str(exc), exc.code)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        typer.echo("mdvdb: interrupted", err=True)
        raise typer.Exit(130) from None
    except Exception as exc:
        if _is_user_error(exc):
            fail(str(exc), EXIT_ERROR)
        raise


def _is_user_error(exc: Exception) -> bool:
    names = {
        "IndexFormatError",
        "ProviderError",
        "QueryError",
        "IngestError",
        "LockBusy",
        "FilterError",
    }
    return type(exc).__name__ in names or any(c.__name__ in names for c in type(exc).__mro__)


def load(root: Path | None):
    from mdvdb.config import load_config

    if root is not None and not root.is_dir():
        raise CliError(f"--root {root}: not a folder", EXIT_USAGE)
    return load_config(root)


def refuse_if_off(config) -> None:
    """A `.mdvdb-off` file in the root switches search off (exit 5), for users who want an
    agent to stop using mdvdb without uninstalling it."""
    from mdvdb.config import OFF_FILE

    if config.switched_off:
        raise CliError(f"search is switched off here ({config.root / OFF_FILE} exists)", EXIT_OFF)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
