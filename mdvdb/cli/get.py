"""`mdvdb get PATH`: one indexed document, its content and metadata."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kernel.options import REQUIRED, Spec, declared, option
from mdvdb.cli import errors
from mdvdb.cli.errors import EXIT_OK, load, print_json, user_errors
from mdvdb.cli.parser import Command


@dataclass(frozen=True)
class GetOptions:
    path: str = option(REQUIRED, Spec(str, "A file path, relative to the project root."))


def run_get(path: str, root: str | None = None, as_json: bool = False) -> int:
    from kernel.terminal import printable
    from query import open_index

    with user_errors():
        config = load(root)
        index = open_index(config=config, lite=errors.ONE_SHOT)
        doc = index.get_document(typed_path(index, path))
        if as_json:
            print_json(doc.to_json())
            return EXIT_OK
        out = sys.stdout
        out.write(printable(f"# {doc.path}  ({doc.title})", one_line=True) + "\n")
        for key, value in doc.metadata.items():
            out.write(printable(f"{key}: {value}", one_line=True) + "\n")
        out.write("\n")
        content = printable(doc.content)
        out.write(content if doc.content.endswith("\n") else content + "\n")
        out.flush()
    return EXIT_OK


def typed_path(index, path: str) -> str:
    """The file a path typed in a subfolder of the project names: relative to the current
    folder first (as a shell completes it), else relative to the root (as search, grep and
    status print paths)."""
    import os

    here = os.path.realpath(os.getcwd())
    root = str(index.config.root)
    if os.path.isabs(path) or here == root or not here.startswith(root + os.sep):
        return path
    from_here = os.path.join(here, path)
    rel = os.path.relpath(os.path.normpath(from_here), root).replace(os.sep, "/")
    if not rel.startswith("../") and index.path_id(rel) is not None:
        return from_here
    return path


COMMAND = Command(
    "get",
    declared(GetOptions),
    run_get,
    help="Print one indexed document: its content and metadata.",
)
