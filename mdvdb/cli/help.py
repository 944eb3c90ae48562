"""`mdvdb --help` and `mdvdb COMMAND --help`, printed from the declarations the parser reads.

Each command's help lists its `Command` options (`kernel.options` fields, then `--root` and
`--json`) with their help, value type or choices and bounds: the options `mdvdb.cli.parser`
takes, from the same objects.
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections.abc import Sequence

from kernel.options import Option, Spec
from mdvdb.cli.parser import Command, is_switch

__all__ = ["show"]

TITLE = "Markdown VDB: search folders of Markdown by meaning, keywords or exact text."
LEFT_MOST = 32  # a longer left column puts its help on the next line


def _value(spec: Spec) -> str:
    if spec.metavar:
        return spec.metavar
    if spec.choices:
        return f"<{'|'.join(spec.choices)}>"
    return f"<{spec.value.__name__}>"


def _bounds(spec: Spec) -> str:
    low, high = spec.minimum, spec.maximum
    if low is not None and high is not None:
        return f"  [{low:g}<=x<={high:g}]"
    if low is not None:
        return f"  [x>={low:g}]"
    return f"  [x<={high:g}]" if high is not None else ""


def _left(option: Option) -> str:
    spec = option.spec
    if not spec.flags:
        return f"{option.name} {_value(spec)}"
    if is_switch(spec):
        return " / ".join(spec.flags)
    flags = ", ".join(spec.flags)
    return flags if spec.value is bool else f"{flags} {_value(spec)}"


def _rows(rows: Sequence[tuple[str, str]], width: int) -> list[str]:
    """Two columns: each left text, then its help wrapped beside it (or below a long one)."""
    column = min(max((len(left) for left, _ in rows), default=0), LEFT_MOST) + 4
    out = []
    for left, text in rows:
        wrapped = textwrap.wrap(text, max(20, width - column)) or [""]
        if len(left) + 4 > column:
            out.append(f"  {left}")
        else:
            out.append(f"  {left.ljust(column - 2)}{wrapped.pop(0)}".rstrip())
        out.extend(" " * column + line for line in wrapped)
    return out


def _positional(option: Option) -> str:
    shown = option.name if option.required else f"[{option.name}]"
    return f"{shown}..." if option.spec.repeat else shown


def _command_help(command: Command, width: int) -> list[str]:
    options = command.every_option
    positionals = [o for o in options if not o.spec.flags]
    usage = " ".join(["Usage: mdvdb", command.name, "[OPTIONS]", *map(_positional, positionals)])
    out = [usage, "", *("  " + line for line in textwrap.wrap(command.help, width - 2)), ""]
    if positionals:
        out += ["Arguments:", *_rows([(_left(o), o.spec.help) for o in positionals], width), ""]
    flagged = [(_left(o), o.spec.help + _bounds(o.spec)) for o in options if o.spec.flags]
    flagged.append((", ".join(command.help_flags), "Show this message and exit."))
    return [*out, "Options:", *_rows(flagged, width)]


def _main_help(commands: Sequence[Command], width: int) -> list[str]:
    listed = []
    for command in commands:
        first = re.split(r"\.\s", command.help, maxsplit=1)[0].rstrip(".") + "."
        room = width - 4 - max(len(c.name) for c in commands) - 2
        listed.append((command.name, first if len(first) <= room else first[: room - 3] + "..."))
    options = [("--version", "Print the version."), ("--help", "Show this message and exit.")]
    return [
        *("Usage: mdvdb [OPTIONS] COMMAND [ARGS]...", "", f"  {TITLE}", "", "Options:"),
        *_rows(options, width),
        *("", "Commands:"),
        *_rows(listed, width),
    ]


def show(commands: Sequence[Command], name: str | None = None, bare: bool = False) -> int:
    """Print the help of the command `name` (None: of `mdvdb`, listing `commands`); its exit
    code. `bare` (`mdvdb` alone): the same help on stderr, exit 2 (a usage error)."""
    width = min(shutil.get_terminal_size((80, 24)).columns, 100)
    if name is None:
        lines = _main_help(commands, width)
    else:
        [command] = [c for c in commands if c.name == name]
        lines = _command_help(command, width)
    (sys.stderr if bare else sys.stdout).write("\n".join(lines) + "\n")
    return 2 if bare else 0
