"""`mdvdb links PATH`, `mdvdb backlinks PATH` and `mdvdb orphans`: the link graph the index
holds (`query.links`), one line each, or `--json`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial

from kernel.options import REQUIRED, Spec, declared, option
from kernel.terminal import printable
from mdvdb.cli import errors
from mdvdb.cli.errors import EXIT_OK, load, print_json, user_errors
from mdvdb.cli.parser import Command

__all__ = ["BACKLINKS", "COMMAND", "ORPHANS", "index_of", "write_line"]

_TARGET = Spec(str, "A path (relative to the project root), a document id or a note name.")


@dataclass(frozen=True)
class LinksOptions:
    path: str = option(REQUIRED, _TARGET)


def index_of(root: str | None):
    from query import open_index

    return open_index(config=load(root), lite=errors.ONE_SHOT)


def write_line(text: str) -> None:
    sys.stdout.write(printable(text, one_line=True) + "\n")


def _where(link) -> str:
    if link.resolved is not None:
        return link.resolved
    return "(broken)" if link.broken else "(not indexed)"


def run_links(path: str, root: str | None = None, as_json: bool = False, *, back=False) -> int:
    from mdvdb.cli.get import typed_path

    with user_errors():
        index = index_of(root)
        target = index.path_of(typed_path(index, path))
        found = index.backlinks(target) if back else index.links(target)
        if as_json:
            data = [link.to_json() for link in found]
            key = "backlinks" if back else "links"
            print_json({"path": target, "id": index.id_of(target), key: data})
            return EXIT_OK
        for link in found:
            shown = "" if back else f"  -> {_where(link)}"
            write_line(f"{link.source}:{link.line}  {link.written}{shown}")
    return EXIT_OK


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
    "links",
    declared(LinksOptions),
    run_links,
    help="The links a note holds, one a line with its line number and the file it names.",
)
BACKLINKS = Command(
    "backlinks",
    declared(LinksOptions),
    partial(run_links, back=True),
    help="The links of other notes that name this one, one a line with its line number.",
)
ORPHANS = Command(
    "orphans",
    (),
    run_orphans,
    help="The notes no other note links to and that link to no other note.",
)
