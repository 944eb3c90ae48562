"""`mdvdb grep PATTERN`: exact text search over the source roots with ripgrep.

It never imports NumPy or Arrow (docs/benchmarks.md, "`mdvdb grep` vs raw ripgrep (issue 7)").
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mdvdb.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from mdvdb.cli.parser import Command
from query import GREP_DESCRIPTION, GREP_OPTIONS, GrepRequest


def grep(root: str | None, as_json: bool, **fields: Any) -> int:
    """Run one grep (`fields`: `GrepRequest` fields) and print its matches; the exit code."""
    request = GrepRequest(**fields)
    try:
        request.the_pattern()
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    try:
        return _search(request, root, as_json)
    except KeyboardInterrupt:
        sys.stderr.write("mdvdb: interrupted\n")
        return EXIT_INTERRUPTED


def _search(args: GrepRequest, root: str | None, as_json: bool) -> int:
    from pathlib import Path

    from kernel.config import ConfigError, load_config
    from query import (
        GrepError,
        HumanWriter,
        JsonWriter,
        Registry,
        SourceError,
        rg_complaint,
        select_roots,
        start_grep,
        use_color,
    )

    if root is not None and not os.path.isdir(root):
        return _fail(f"--root {root}: not a folder", EXIT_USAGE)
    try:
        config = load_config(Path(root) if root else None)
        selection = select_roots(
            config,
            Registry.load(),
            sources=list(args.source),
            include=list(args.include),
            exclude=list(args.exclude),
            drop_blacklisted=args.exclude_blacklisted,
        )
        said = _unnamed_file()  # rg's stderr, read back to say what went wrong in one line
        options = args.grep_options()
        search = start_grep(options, selection, config.root, config.page_id_field, stderr=said)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SourceError as exc:
        return _fail(str(exc), EXIT_USAGE if exc.usage else EXIT_ERROR)
    except GrepError as exc:
        return _fail(str(exc), EXIT_ERROR)

    for warning in (*selection.warnings, *search.warnings):
        from kernel.terminal import printable  # a name from the folder: escaped

        sys.stderr.write(f"mdvdb: warning: {printable(warning, one_line=True)}\n")
    if args.trace:
        import shlex

        where = shlex.quote(str(search.cwd or os.getcwd()))
        sys.stderr.write(f"[mdvdb grep] cd {where} && {shlex.join(search.argv)}\n")
        for line in search.ignore_lines:  # what rg reads through the --ignore-file descriptor
            sys.stderr.write(f"[mdvdb grep] ignore-file line: {line}\n")
        sys.stderr.flush()
    if as_json:
        writer = JsonWriter(sys.stdout)
    else:
        writer = HumanWriter(sys.stdout, use_color(args.color, sys.stdout, os.environ))
    try:
        for match in search:
            writer.write(match)
    except BrokenPipeError:  # `mdvdb grep ... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    for path in search.long_lines:
        from kernel.terminal import printable

        sys.stderr.write(
            f"mdvdb: warning: {printable(path, one_line=True)}: a matching line too long "
            "to show, left out\n"
        )
    said.seek(0)
    complaint = said.read().decode("utf-8", "replace")
    said.close()
    if search.failure is not None:  # rg killed (out of memory...): not "No matches."
        return _fail(search.failure, EXIT_ERROR)
    if search.returncode == 2 and search.emitted == 0:  # a bad --regex, an unreadable root
        literal = "without --regex the pattern is literal text"
        return _fail(rg_complaint(complaint, options.pattern, options.regex, literal), EXIT_ERROR)
    for line in complaint.splitlines():  # an unreadable file among matches: rg went on
        if line.strip():
            sys.stderr.write(f"mdvdb: warning: {line.strip().removeprefix('rg: ')}\n")
    if search.emitted == 0 and not as_json:
        sys.stdout.write("No matches.\n")
    return EXIT_OK


def _unnamed_file():
    """A file without a name for rg's stderr (a pipe could fill up and stop rg): memfd on
    Linux (tempfile's import would add to the start-up), a temp file elsewhere."""
    make = getattr(os, "memfd_create", None)
    if make is not None:
        return open(make("rg-stderr", os.MFD_CLOEXEC), "w+b")  # noqa: SIM115 - closed by the caller
    import tempfile

    return tempfile.TemporaryFile()


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"mdvdb: {message}\n")
    return code


COMMAND = Command(
    "grep",
    GREP_OPTIONS,
    grep,
    help=GREP_DESCRIPTION,
    help_flags=("-h", "--help"),
)
