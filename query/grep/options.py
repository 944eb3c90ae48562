"""The options of `mdvdb grep`, declared once (`GrepRequest`, `kernel.options`): the parser and
its `--help` are built from `GREP_OPTIONS`. Imports neither NumPy nor Arrow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernel.config import DEFAULT_LIMIT
from kernel.options import Option, Spec, declared, option
from query.grep.format import COLOR_CHOICES
from query.grep.ripgrep import FILE_TYPES, GrepOptions

HELP = "Exact text search over the source folders with ripgrep (no index needed)."
DESCRIPTION = (
    HELP + " The pattern is literal text (use --regex for rg's regex syntax); smart case as rg:"
    " case-insensitive unless it has an upper-case letter. A pattern starting with `-`"
    " goes after `--` or `-e`."
)
PER_FILE_LIMIT = 50


@dataclass
class GrepRequest:
    """One `mdvdb grep` as its command line gives it."""

    pattern: str | None = option(None, Spec(str, "The text to look for."))
    regexp: str | None = option(
        None,
        Spec(str, "The pattern.", ("-e", "--regexp"), metavar="PATTERN", dash_value=True),
    )
    regex: bool = option(False, Spec(bool, "Treat the pattern as an rg regex.", ("--regex",)))
    source: Sequence[str] = option(
        (),
        Spec(
            str,
            "Only this root (repeatable; ids case-insensitive), e.g. dir:docs.",
            ("--source",),
            repeat="many",
            metavar="TYPE[:ID]",
        ),
    )
    include: Sequence[str] = option(
        (), Spec(str, "Also search PATH.", ("--include",), repeat="many", metavar="PATH")
    )
    exclude: Sequence[str] = option(
        (), Spec(str, "Leave PATH out.", ("--exclude",), repeat="many", metavar="PATH")
    )
    file_type: str = option("md", Spec(str, "Files to search.", ("--type",), choices=FILE_TYPES))
    limit: int = option(DEFAULT_LIMIT, Spec(int, "Matches in all.", ("-n", "--limit"), minimum=1))
    per_file_limit: int = option(
        PER_FILE_LIMIT,
        Spec(int, "Matches a file at most.", ("--per-file-limit",), minimum=1),
    )
    sort: bool = option(False, Spec(bool, "Read all matches, group them by file.", ("--sort",)))
    include_frontmatter: bool = option(
        False, Spec(bool, "Keep matches in YAML frontmatter.", ("--include-frontmatter",))
    )
    exclude_blacklisted: bool = option(
        False,
        Spec(bool, "Leave out the roots in MDVDB_BLACKLISTED_SOURCES.", ("--exclude-blacklisted",)),
    )
    trace: bool = option(False, Spec(bool, "Print the rg command on stderr.", ("--trace",)))
    color: str = option(
        "auto", Spec(str, "Colour the matches.", ("--color",), choices=COLOR_CHOICES)
    )

    def the_pattern(self) -> str:
        """The pattern, given once: as the argument or with -e (ValueError says why not)."""
        if self.pattern is not None and self.regexp is not None:
            raise ValueError("give the pattern once: as an argument or with -e")
        pattern = self.regexp if self.regexp is not None else self.pattern
        if pattern is None:
            raise ValueError("a pattern is required (see `mdvdb grep --help`)")
        return pattern

    def grep_options(self) -> GrepOptions:
        return GrepOptions(
            pattern=self.the_pattern(),
            limit=self.limit,
            per_file_limit=self.per_file_limit,
            file_type=self.file_type,
            regex=self.regex,
            sort=self.sort,
            include_frontmatter=self.include_frontmatter,
        )


GREP_OPTIONS: tuple[Option, ...] = declared(GrepRequest)
