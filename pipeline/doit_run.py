"""doit as `mdvdb ingest` runs it: the stage tasks, without what a run of ours never uses.

`doit.api.run_tasks` (what a custom CLI is meant to call) does three things per run that cost
a small ingest ~50 ms and can only change it for the worse:

- it reads `pyproject.toml` and `doit.cfg` from the *current* folder (not the project root):
  any folder a user runs `mdvdb ingest --root X` from could change doit's settings for our
  tasks, and a broken `pyproject.toml` there made the ingest fail with a TOML traceback;
- it looks up doit plugins (entry points `doit.COMMAND`, `doit.LOADER`, `doit.BACKEND`,
  `doit.REPORTER`) four times, each a scan of every installed distribution's metadata
  (~13 ms); a plugin could replace the `run` command, the `sqlite3` backend or the reporter
  of our ingest;
- `doit.plugin` imports `importlib.metadata` for that scan (with `email`, `zipfile`, `csv`...:
  ~30 ms).

`run_stages` is `run_tasks` with no configuration files and doit's core commands, backends and
reporters only (our settings come from `DOIT_CONFIG`, `pipeline.tasks.doit_config`), and
`import_doit` imports doit with `importlib.metadata` deferred: `doit.plugin.entry_points` is a
stand-in that imports the real module on its first call, so plain `doit` (with `dodo.py`) in
another process, or after our run in this one, finds its plugins as before.
"""

from __future__ import annotations

import sys
import types
from typing import Any

METADATA = "importlib.metadata"


def _real_entry_points(**params: Any):
    """`importlib.metadata.entry_points`, imported on the first call."""
    import importlib

    if isinstance(sys.modules.get(METADATA), _DeferredMetadata):
        del sys.modules[METADATA]
    return importlib.import_module(METADATA).entry_points(**params)


class _DeferredMetadata(types.ModuleType):
    """Stands in for `importlib.metadata` while doit imports: `entry_points` is served
    without loading it, any other name loads the real module."""

    entry_points = staticmethod(_real_entry_points)

    def __getattr__(self, name: str):
        import importlib

        if name.startswith("__"):  # the import system asks for `__path__`, `__spec__`...
            raise AttributeError(name)
        if sys.modules.get(METADATA) is self:
            del sys.modules[METADATA]
        return getattr(importlib.import_module(METADATA), name)


def import_doit() -> None:
    """Import doit, with `importlib.metadata` deferred if nothing has imported it yet."""
    if "doit" in sys.modules or METADATA in sys.modules:
        import doit  # noqa: F401 - already there, or the real metadata module is

        return
    stand_in = sys.modules[METADATA] = _DeferredMetadata(METADATA)
    try:
        import doit  # noqa: F401 - doit.plugin: `from importlib.metadata import entry_points`
    finally:
        if sys.modules.get(METADATA) is stand_in:
            del sys.modules[METADATA]


def _no_plugins(**params: Any) -> tuple:
    return ()


def run_stages(loader, tasks: dict[str, dict[str, Any]], extra_config: dict | None = None) -> int:
    """`doit.api.run_tasks(loader, tasks, extra_config)` without configuration files from the
    current folder and without plugins; doit's exit code."""
    import_doit()
    from doit import plugin
    from doit.cmd_base import get_loader
    from doit.doit_cmd import DoitMain

    loader.task_opts = tasks  # the task parameters (`@task_params`), as run_tasks sets them
    main = DoitMain(loader, config_filenames=(), extra_config=extra_config)
    plugins_impl = plugin.entry_points_impl
    plugin.entry_points_impl = lambda: _no_plugins
    try:
        commands = main.get_cmds()
        task_loader = get_loader(main.config, main.task_loader, commands)
        command = commands.get_plugin("run")(
            task_loader=task_loader,
            config=main.config,
            bin_name=main.BIN_NAME,
            cmds=commands,
            opt_vals={},
        )
        return command.parse_execute(list(tasks))
    finally:
        plugin.entry_points_impl = plugins_impl
