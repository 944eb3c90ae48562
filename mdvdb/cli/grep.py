"""`mdvdb grep PATTERN`: exact text search over the source roots with ripgrep.

This command has a budget of about 100 ms over raw rg, Python start-up included, and typer alone
costs more than half of that. So `mdvdb.cli.main` hands `grep` straight to `fast_main()` below,
which parses with the hand parser (`mdvdb.cli.hand_parser`) and never imports typer, NumPy or
Arrow. `register(app)` puts the typer command on the app, built from the same declaration
(`query.grep.options`): it lists the command in `mdvdb --help` and prints `mdvdb grep --help`.
A usage error is one line from the hand parser, exit 2.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mdvdb.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from mdvdb.cli.hand_parser import HandParser, Problem
from query import GREP_OPTIONS, GrepRequest

# A repeated option takes its last value, as typer does.
PARSER = HandParser(GREP_OPTIONS, last_wins=True)
HELP_FLAGS = ("-h", "--help")


def fast_main(argv: list[str]) -> int | None:
    """Parse, search, print; the exit code, or None for `--help` (typer prints it)."""
    args = PARSER.parse(argv)
    if isinstance(args, Problem):
        before_dashes = argv[: argv.index("--")] if "--" in argv else argv
        if any(flag in before_dashes for flag in HELP_FLAGS):
            return None
        sys.stderr.write(f"mdvdb grep: {args.message} (see `mdvdb grep --help`)\n")
        return EXIT_USAGE
    return run_grep(args.pop("root", None), args.pop("as_json", False), args)


def run_grep(root: str | None, as_json: bool, fields: dict[str, Any]) -> int:
    """Run one grep (`fields`: `GrepRequest` fields, as either parser gives them) and print
    its matches; the exit code."""
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
        search = start_grep(args.grep_options(), selection, config.root, config.page_id_field)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SourceError as exc:
        return _fail(str(exc), EXIT_USAGE if exc.usage else EXIT_ERROR)
    except GrepError as exc:
        return _fail(str(exc), EXIT_ERROR)

    for warning in selection.warnings:
        sys.stderr.write(f"mdvdb: warning: {warning}\n")
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
    if search.returncode == 2 and search.emitted == 0:
        return EXIT_ERROR  # rg said why on stderr (a bad --regex, an unreadable root)
    if search.emitted == 0 and not as_json:
        sys.stdout.write("No matches.\n")
    return EXIT_OK


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"mdvdb: {message}\n")
    return code


def register(app) -> None:
    """Put `grep` on the typer app: its signature from the declaration, its body `run_grep`."""
    import typer

    from mdvdb.cli.declared import declare_command, field_values
    from query import GREP_DESCRIPTION, GREP_HELP

    def grep(ctx: typer.Context, **values: Any) -> None:
        root, as_json = values.pop("root"), values.pop("as_json")
        raise typer.Exit(run_grep(root, as_json, field_values(GREP_OPTIONS, values)))

    grep.__doc__ = GREP_DESCRIPTION
    app.command(
        "grep", short_help=GREP_HELP, context_settings={"help_option_names": list(HELP_FLAGS)}
    )(declare_command(grep, GREP_OPTIONS))
