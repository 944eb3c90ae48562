"""What a search that found nothing says: one set of suggestions, whatever caused the miss
(query, filter, facet), on every front end, and one line saying what left nothing when that
can be told cheaply (docs/search.md, "When nothing matches")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from query.request import SearchOutcome
    from query.snapshot import Reader

SUGGESTIONS = (
    "check the spelling of the query and of any filter, tag or category value",
    "try broader or fewer words",
    "drop a filter, tag or category: `mdvdb schema` lists the fields and `mdvdb schema FIELD` "
    "every value of one",
    "for an exact string, `mdvdb grep TEXT` reads the files themselves",
    "if files changed since the last ingest, run `mdvdb ingest` (`mdvdb status` says)",
)


@dataclass
class NoMatch:
    """An empty answer: what left nothing (when known) and what to try."""

    reason: str | None
    suggestions: tuple[str, ...] = SUGGESTIONS
    headline: str = "No matches."  # "No matches. Valid values: ..." for a facet value

    def lines(self) -> list[str]:
        """The human form: the headline, the reason, then the suggestions as a list."""
        out = [self.headline]
        if self.reason:
            out.append(self.reason)
        out.append("Suggestions:")
        out += [f"- {s}" for s in self.suggestions]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "suggestions": list(self.suggestions)}

    def hint(self) -> str:
        """One line (the MCP server's `hint`)."""
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.headline}{reason} Try: " + "; ".join(self.suggestions) + "."


def explain(index: Reader, outcome: SearchOutcome, values_shown: int = 200) -> NoMatch:
    """The NoMatch for an outcome that has no result (`values_shown`: facet values listed)."""
    missing = outcome.no_such_value
    if missing is not None:
        return NoMatch(None, headline=missing.message(values_shown))
    return NoMatch(_reason(index, outcome))


def _reason(index: Reader, outcome: SearchOutcome) -> str | None:
    """Which part left nothing: the query (no real evidence of a match in the index:
    query.rank.evidence), the filters and facets (no file passes them), the keyword rule
    (files pass them, none has the query's words), else None (the query found nothing)."""
    return _scope_reason(outcome) or _filter_reason(index, outcome) or outcome.no_evidence


def _scope_reason(outcome: SearchOutcome) -> str | None:
    """No file is inside `--path`, `--source`, `--since`/`--before` at all."""
    if outcome.in_scope != 0:
        return None
    return f"No file is in {_named(outcome.request, scope_only=True)}."


def _filter_reason(index: Reader, outcome: SearchOutcome) -> str | None:
    """The filters' and facets' part of `_reason`."""
    from query.filters import matching_files

    request = outcome.request
    if not outcome.filters:
        return None
    try:
        _, passing = matching_files(index, outcome.filters, limit=0)
    except Exception:  # the search itself already ran these filters; never fail the message
        return None
    named = _named(request)
    if passing == 0:
        return f"No file passes {named}."
    faceted = request.tag is not None or request.category is not None
    if request.query and faceted:
        pages = "1 file passes" if passing == 1 else f"{passing} files pass"
        return (
            f"{pages} {named}, but none contains every word of {request.query!r} "
            "(with a tag or category, results must contain the query's words)."
        )
    return None


def _named(request, scope_only: bool = False) -> str:
    """The filters, facets and scope as the user gave them."""
    parts = [] if scope_only else [f"--filter {text}" for text in request.filters]
    if request.tag is not None and not scope_only:
        parts.append(f"--tag {request.tag}")
    if request.category is not None and not scope_only:
        parts.append(f"--category {request.category}")
    parts += [f"--path {glob}" for glob in request.paths]
    parts += [f"--source {name}" for name in request.sources]
    for flag, value in (("--since", request.since), ("--before", request.before)):
        if value:
            parts.append(f"{flag} {value}")
    if request.date_field and (request.since or request.before):
        parts.append(f"--date-field {request.date_field}")
    return " ".join(parts)
