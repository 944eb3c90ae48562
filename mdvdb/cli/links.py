"""`mdvdb links PATH`: the links a note holds, one line each with its line number and the
indexed file it names, or `--json`. The helpers here serve `backlinks` and `orphans` too
(the link graph the index holds: `query.links`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kernel.options import REQUIRED, Spec, declared, option
from mdvdb.cli import errors
from mdvdb.cli.errors import EXIT_OK, load, print_json, user_errors
from mdvdb.cli.parser import Command

__all__ = ["COMMAND", "LinksOptions", "index_of", "typed", "write_line"]

_TARGET = Spec(str, "A path (relative to the project root), a document id or a note name.")


@dataclass(frozen=True)
class LinksOptions:
    path: str = option(REQUIRED, _TARGET)


def index_of(root: str | None):
    from query import open_index

    return open_index(config=load(root), lite=errors.ONE_SHOT)


def write_line(text: str) -> None:
    from kernel.terminal import printable

    sys.stdout.write(printable(text, one_line=True) + "\n")


def _where(link) -> str:
    if link.resolved is not None:
        return link.resolved
    return "(broken)" if link.broken else "(not indexed)"


def run_links(path: str, root: str | None = None, as_json: bool = False) -> int:
    with user_errors():
        index = index_of(root)
        source = index.path_of(typed(index, path))
        found = index.links(source)
        if as_json:
            data = [link.to_json() for link in found]
            print_json({"path": source, "id": index.id_of(source), "links": data})
            return EXIT_OK
        for link in found:
            write_line(f"{link.source}:{link.line}  {link.written}  -> {_where(link)}")
    return EXIT_OK


def typed(index, path: str) -> str:
    from mdvdb.cli.get import typed_path

    return typed_path(index, path)


COMMAND = Command(
    "links",
    declared(LinksOptions),
    run_links,
    help="The links a note holds, one a line with its line number and the file it names.",
)
