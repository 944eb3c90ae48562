"""`mdvdb get` without typer: one indexed document, its content and metadata.

The typer command (`core.get`, for `--help` and usage errors) and `fast_main` (every other
call, `mdvdb.cli.plain_args`) both run `run_get`, so both print the same bytes.
"""

from __future__ import annotations

import sys

from mdvdb.cli.errors import EXIT_OK, load, print_json, user_errors


def fast_main(argv: list[str]) -> int | None:
    """The exit code, or None to have typer parse `argv`."""
    from mdvdb.cli.plain_args import parse

    args = parse(argv, {}, positional="path")
    if args is None or "path" not in args:
        return None  # a missing PATH: typer's usage error
    return run_get(**args)


def run_get(path: str, root: str | None = None, as_json: bool = False) -> int:
    from kernel.terminal import printable
    from query import open_index

    with user_errors():
        config = load(root)
        doc = open_index(config=config).get_document(path)
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
