"""The options of one search, declared once: `SearchRequest`, each field carrying how the CLI,
the MCP tool and the library spell it (a test checks they agree). It imports only the kernel,
so the front ends read it without the index reader."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernel.config import SEARCH_MODES
from kernel.options import Option, Spec, declared
from kernel.options import option as _option

MODES = (
    SEARCH_MODES  # the one list of search modes, kept with the settings (MDVDB_SEARCH_DEFAULT_MODE)
)


@dataclass
class SearchRequest:
    """One search as `mdvdb search` defines it; every field is an option of every front end."""

    query: str | None = _option(
        None, Spec(str, "What to look for (optional with a filter, tag, path, source or date).")
    )
    limit: int | None = _option(
        None,
        Spec(
            int,
            "Results (default MDVDB_SEARCH_DEFAULT_LIMIT, 10).",
            ("-n", "--limit"),
            minimum=1,
            setting="MDVDB_SEARCH_DEFAULT_LIMIT",
        ),
    )
    min_score: float | None = _option(
        None,
        Spec(
            float,
            "Leave out lower scores (default MDVDB_SEARCH_MIN_SCORE, 0).",
            ("--min-score",),
            setting="MDVDB_SEARCH_MIN_SCORE",
        ),
    )
    min_confidence: float | None = _option(
        None,
        Spec(
            float,
            "Leave out results less likely to be relevant (0-1; default "
            "MDVDB_SEARCH_MIN_CONFIDENCE, 0).",
            ("--min-confidence",),
            minimum=0.0,
            maximum=1.0,
            setting="MDVDB_SEARCH_MIN_CONFIDENCE",
        ),
    )
    files: bool = _option(
        False,
        Spec(bool, "One line per file: score and path (cheapest).", ("--files",), "files_only"),
    )
    max_tokens: int | None = _option(
        None,
        Spec(int, "Budget on the total excerpt size (≈4 chars).", ("--max-tokens",), minimum=1),
    )
    govern: bool | None = _option(
        None,
        Spec(bool, "Weigh pages by confidence/updated fields.", ("--govern", "--no-govern")),
    )
    mode: str | None = _option(
        None,
        Spec(
            str,
            "hybrid (default: MDVDB_SEARCH_DEFAULT_MODE), semantic, or lexical "
            "(keywords only; never loads the embedding model).",
            ("--mode",),
            choices=MODES,
            setting="MDVDB_SEARCH_DEFAULT_MODE",
        ),
    )
    explain: bool = _option(False, Spec(bool, "Show score components.", ("--explain",)))
    filters: Sequence[str] = _option(
        (),
        Spec(
            str,
            "Frontmatter filter, repeatable (AND): field=v, field=a,b, field!=v, "
            "field>=n (<, <=, >), field? (present), !field (missing).",
            ("--filter",),
            repeat="many",
        ),
    )
    tag: str | None = _option(
        None, Spec(str, "Files with this tag (any case).", ("--tag",), repeat="once")
    )
    category: str | None = _option(
        None, Spec(str, "Files in this category (any case).", ("--category",), repeat="once")
    )
    paths: Sequence[str] = _option(
        (),
        Spec(
            str,
            "Only files matching this glob, repeatable (any of them): gitignore syntax, "
            "e.g. docs/, *.md, notes/**/2026-*.md, /README.md.",
            ("--path",),
            repeat="many",
            metavar="GLOB",
        ),
    )
    sources: Sequence[str] = _option(
        (),
        Spec(
            str,
            "Only files of this source, repeatable (MDVDB_SOURCES' names; else a "
            "MDVDB_SOURCE_DIRS folder as written).",
            ("--source",),
            repeat="many",
            metavar="NAME",
        ),
    )
    since: str | None = _option(
        None,
        Spec(
            str,
            "Only files modified at or after this date (2026-01-31, 2026-01-31T09:30) or "
            "within this long (30d, 12h, 2w, 1y); --date-field: that field's date.",
            ("--since",),
            repeat="once",
            metavar="WHEN",
        ),
    )
    before: str | None = _option(
        None,
        Spec(
            str,
            "Only files modified before this date, or longer ago than this (30d).",
            ("--before",),
            repeat="once",
            metavar="WHEN",
        ),
    )
    date_field: str | None = _option(
        None,
        Spec(
            str,
            "The frontmatter date --since, --before and --decay read instead of the "
            "modified time (e.g. updated).",
            ("--date-field",),
            repeat="once",
            metavar="FIELD",
        ),
    )
    decay: str | None = _option(
        None,
        Spec(
            str,
            "Recency decay: a page this old scores half (90d; off: none; default "
            "MDVDB_SEARCH_DECAY, off).",
            ("--decay",),
            repeat="once",
            setting="MDVDB_SEARCH_DECAY",
            metavar="HALF_LIFE",
        ),
    )
    cluster: int | None = _option(
        None, Spec(int, "Only this cluster (see `mdvdb clusters`).", ("--cluster",))
    )
    per_file: int | None = _option(
        None,
        Spec(
            int,
            "Most sections of one file (default MDVDB_SEARCH_PER_FILE, 3; 0: no cap).",
            ("--per-file",),
            minimum=0,
            setting="MDVDB_SEARCH_PER_FILE",
        ),
    )
    collapse: bool = _option(
        True,
        Spec(
            bool, "Show every copy of a repeated section, not one with also_in.", ("--no-collapse",)
        ),
    )

    @property
    def restricted(self) -> bool:
        """Something other than a query chooses files (filters, facets, scope, dates)."""
        scoped = (self.paths, self.sources, self.since, self.before)
        return bool(self.filters or self.tag or self.category or any(scoped))

    def search_options(self) -> dict:
        options = {
            "mode": self.mode,
            "min_score": self.min_score,
            "govern": self.govern,
            "cluster": self.cluster,
            # `files`: one section per file, so N results are N distinct files
            "per_file": 1 if self.files else self.per_file,
        }
        options = {k: v for k, v in options.items() if v is not None}
        if self.explain:
            options["explain"] = True
        if not self.collapse:
            options["collapse"] = False
        return options


OPTIONS: tuple[Option, ...] = declared(SearchRequest)
