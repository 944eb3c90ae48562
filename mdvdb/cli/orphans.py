"""`mdvdb orphans`: the notes with no link to or from another indexed note, one path a
line, or `--json`."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.options import declared
from mdvdb.cli.errors import EXIT_OK, print_json, user_errors
from mdvdb.cli.links import index_of, write_line
from mdvdb.cli.parser import Command

__all__ = ["COMMAND"]


@dataclass(frozen=True)
class OrphansOptions:
    pass


def run_orphans(root: str | None = None, as_json: bool = False) -> int:
    with user_errors():
        found = index_of(root).orphans()
        if as_json:
            print_json({"orphans": found, "total": len(found)})
            return EXIT_OK
        for path in found:
            write_line(path)
    return EXIT_OK


COMMAND = Command(
    "orphans",
    declared(OrphansOptions),
    run_orphans,
    help="The notes no other note links to and that link to no other note.",
)
