"""`mdvdb backlinks PATH`: the links of other notes that name this one, one line each with
the linking file and line, or `--json`."""

from __future__ import annotations

from kernel.options import declared
from mdvdb.cli.errors import EXIT_OK, print_json, user_errors
from mdvdb.cli.links import LinksOptions, index_of, typed, write_line
from mdvdb.cli.parser import Command

__all__ = ["COMMAND"]


def run_backlinks(path: str, root: str | None = None, as_json: bool = False) -> int:
    with user_errors():
        index = index_of(root)
        target = index.path_of(typed(index, path))
        found = index.backlinks(target)
        if as_json:
            data = [link.to_json() for link in found]
            print_json({"path": target, "id": index.id_of(target), "backlinks": data})
            return EXIT_OK
        for link in found:
            write_line(f"{link.source}:{link.line}  {link.written}")
    return EXIT_OK


COMMAND = Command(
    "backlinks",
    declared(LinksOptions),
    run_backlinks,
    help="The links of other notes that name this one, one a line with its line number.",
)
