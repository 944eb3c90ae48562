"""doit as `mdvdb ingest` runs it: `doit.api.run_tasks` without the current folder's
`pyproject.toml` and `doit.cfg` (any folder a user runs from could change or break our tasks'
settings), and with doit's own `run` command, never a plugin's."""

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
