"""The `mdvdb` command: a thin typer layer over the `pipeline` and `query` libraries.

Each command group lives in its own module that registers on `app`; this module only imports
them. Commands import heavy libraries inside their bodies, so `mdvdb --help` and `mdvdb grep`
never pay for NumPy, Arrow or the model. A query forwarded to a warm `mdvdb serve` process
does not even import typer (see `mdvdb.cli.warm`).
"""

from __future__ import annotations

import importlib
import sys

# Modules that register commands on `app`, in help order.
COMMAND_MODULES = ("mdvdb.cli.core", "mdvdb.cli.agents", "mdvdb.cli.watch")


def main() -> None:
    from mdvdb.cli.warm import forward

    code = forward(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from mdvdb.cli.app import app

    for name in COMMAND_MODULES:
        importlib.import_module(name)
    app()
