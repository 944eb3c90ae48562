"""The `mdvdb` command: a thin typer layer over the `pipeline` and `query` libraries.

Each command group lives in its own module that registers on `app`; this module only imports
them. Commands import heavy libraries inside their bodies, so `mdvdb --help` and `mdvdb grep`
never pay for NumPy, Arrow or the model.
"""

from __future__ import annotations

import importlib

from mdvdb.cli.app import app

# Modules that register commands on `app`, in help order.
COMMAND_MODULES = ("mdvdb.cli.core",)


def main() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name)
    app()
