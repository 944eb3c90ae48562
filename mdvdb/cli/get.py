"""`mdvdb get` without typer: one indexed document, its content and metadata.

The typer command (`core.get`, for `--help` and usage errors) and `fast_main` (every other
call, `mdvdb.cli.plain_args`) both run `run_get`, so both print the same bytes.
"""

from __future__ import annotations

import sys

from mdvdb.cli.errors import EXIT_OK, load, print_json, user_errors


def fast_main(argv: list[str], one_shot: bool = False) -> int | None:
    """The exit code, or None to have typer parse `argv`. `one_shot`: this process ends after
    the command (not a warm server's call), so the index is mapped without pyarrow."""
    from mdvdb.cli.plain_args import parse

    args = parse(argv, {}, positional="path")
    if args is None or "path" not in args:
        return None  # a missing PATH: typer's usage error
    return run_get(**args, lite=one_shot)


def run_get(path: str, root: str | None = None, as_json: bool = False, lite: bool = False) -> int:
    from kernel.terminal import printable
    from query import open_index

    with user_errors():
        config = load(root)
        index = open_index(config=config, lite=lite)
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
