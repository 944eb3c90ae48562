"""`mdvdb grep PATTERN`: exact text search over the source roots with ripgrep.

This command has a budget of about 100 ms over raw rg, Python start-up included, and typer alone
costs more than half of that. So `mdvdb.cli.main` hands `grep` straight to `fast_main()` below,
which parses with argparse and never imports typer, NumPy or Arrow; `register(app)` only puts a
pass-through entry on the typer app so that `mdvdb --help` lists the command.
"""

from __future__ import annotations

import argparse
import os
import sys

from mdvdb.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

HELP = "Exact text search over the source folders with ripgrep (no index needed)."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other usage error
        self.exit(EXIT_USAGE, f"mdvdb grep: {message} (see `mdvdb grep --help`)\n")


def _positive(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    from kernel.config import DEFAULT_LIMIT
    from query import COLOR_CHOICES, FILE_TYPES

    p = _Parser(
        prog="mdvdb grep",
        description=HELP
        + " The pattern is literal text (use --regex for rg's regex syntax); smart case as rg:"
        " case-insensitive unless it has an upper-case letter. A pattern starting with `-`"
        " goes after `--` or `-e`.",
    )
    p.add_argument("pattern", nargs="?", help="The text to look for.")
    p.add_argument("-e", "--regexp", dest="pattern_opt", metavar="PATTERN", help="The pattern.")
    p.add_argument("--regex", action="store_true", help="Treat the pattern as an rg regex.")
    p.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="TYPE[:ID]",
        help="Only this root (repeatable; ids case-insensitive), e.g. dir:docs.",
    )
    p.add_argument(
        "--include", action="append", default=[], metavar="PATH", help="Also search PATH."
    )
    p.add_argument("--exclude", action="append", default=[], metavar="PATH", help="Leave PATH out.")
    p.add_argument("--type", dest="file_type", choices=FILE_TYPES, default="md")
    p.add_argument(
        "-n",
        "--limit",
        type=_positive,
        default=DEFAULT_LIMIT,
        help=f"Matches in all ({DEFAULT_LIMIT}).",
    )
    p.add_argument(
        "--per-file-limit", type=_positive, default=50, help="Matches a file at most (50)."
    )
    p.add_argument("--sort", action="store_true", help="Read all matches, group them by file.")
    p.add_argument(
        "--include-frontmatter", action="store_true", help="Keep matches in YAML frontmatter."
    )
    p.add_argument(
        "--exclude-blacklisted",
        action="store_true",
        help="Leave out the roots in MDVDB_BLACKLISTED_SOURCES.",
    )
    p.add_argument("--trace", action="store_true", help="Print the rg command on stderr.")
    p.add_argument("--color", choices=COLOR_CHOICES, default="auto")
    p.add_argument("--json", dest="as_json", action="store_true", help="One JSON record a line.")
    p.add_argument("--root", help="Project root (default: nearest folder with .markdownvdb).")
    return p


def fast_main(argv: list[str]) -> int:
    """Parse, search, print; returns the exit code."""
    args = parser().parse_args(_glue_pattern(argv))
    if args.pattern is not None and args.pattern_opt is not None:
        return _fail("give the pattern once: as an argument or with -e", EXIT_USAGE)
    pattern = args.pattern_opt if args.pattern_opt is not None else args.pattern
    if pattern is None:
        return _fail("a pattern is required (see `mdvdb grep --help`)", EXIT_USAGE)
    try:
        return _search(args, pattern)
    except KeyboardInterrupt:
        sys.stderr.write("mdvdb: interrupted\n")
        return EXIT_INTERRUPTED


def _search(args: argparse.Namespace, pattern: str) -> int:
    from pathlib import Path

    from kernel.config import ConfigError, load_config
    from query import (
        GrepError,
        GrepOptions,
        HumanWriter,
        JsonWriter,
        Registry,
        SourceError,
        select_roots,
        start_grep,
        use_color,
    )

    if args.root is not None and not os.path.isdir(args.root):
        return _fail(f"--root {args.root}: not a folder", EXIT_USAGE)
    try:
        config = load_config(Path(args.root) if args.root else None)
        selection = select_roots(
            config,
            Registry.load(),
            sources=args.source,
            include=args.include,
            exclude=args.exclude,
            drop_blacklisted=args.exclude_blacklisted,
        )
        options = GrepOptions(
            pattern=pattern,
            limit=args.limit,
            per_file_limit=args.per_file_limit,
            file_type=args.file_type,
            regex=args.regex,
            sort=args.sort,
            include_frontmatter=args.include_frontmatter,
        )
        search = start_grep(options, selection, config.root, config.page_id_field)
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
    if args.as_json:
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
    if search.emitted == 0 and not args.as_json:
        sys.stdout.write("No matches.\n")
    return EXIT_OK


def _glue_pattern(argv: list[str]) -> list[str]:
    """`-e -x` → `--regexp=-x`: argparse would refuse a value that looks like an option."""
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--":
            out.append(arg)
            out.extend(args)
            break
        if arg in ("-e", "--regexp"):
            value = next(args, None)
            out.append(arg if value is None else f"--regexp={value}")
        else:
            out.append(arg)
    return out


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"mdvdb: {message}\n")
    return code


def register(app) -> None:
    """List `grep` on the typer app; it forwards its raw arguments to `fast_main`."""
    import typer

    def grep_command(ctx) -> None:
        raise typer.Exit(fast_main(list(ctx.args)))

    # A real annotation object: this module's annotations are strings typer cannot resolve.
    grep_command.__annotations__ = {"ctx": typer.Context, "return": None}
    app.command(
        "grep",
        help=HELP + " See `mdvdb grep --help`.",
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(grep_command)
