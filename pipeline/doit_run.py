"""doit as `mdvdb ingest` runs it: `doit.api.run_tasks` without configuration files and
with doit's own commands.

`run_tasks` reads `pyproject.toml` and `doit.cfg` from the *current* folder, not the project
root: any folder a user runs `mdvdb ingest --root X` from could change doit's settings for
our tasks (a broken `pyproject.toml` there would fail the ingest with a TOML traceback). Our
settings come from `DOIT_CONFIG` (`pipeline.tasks.doit_config`) alone, and the `run` command
is doit's (`DoitMain.DOIT_CMDS`), not one a plugin registers: an ingest never scans the
installed distributions for command plugins.
"""

from __future__ import annotations

from typing import Any


def run_stages(loader, tasks: dict[str, dict[str, Any]], extra_config: dict | None = None) -> int:
    """`doit.api.run_tasks(loader, tasks, extra_config)` without configuration files from the
    current folder; doit's exit code."""
    from doit.cmd_base import get_loader
    from doit.doit_cmd import DoitMain
    from doit.plugin import PluginDict

    loader.task_opts = tasks  # the task parameters (`@task_params`), as run_tasks sets them
    main = DoitMain(loader, config_filenames=(), extra_config=extra_config)
    commands = PluginDict({command.get_name(): command for command in main.DOIT_CMDS})
    task_loader = get_loader(main.config, main.task_loader, commands)
    command = commands.get_plugin("run")(
        task_loader=task_loader,
        config=main.config,
        bin_name=main.BIN_NAME,
        cmds=commands,
        opt_vals={},
    )
    return command.parse_execute(list(tasks))
