"""Dates and durations as a user writes them for search (`2026-01-01`, `30d`): one reader for
`--since`/`--before`, `--decay` and `MDVDB_SEARCH_DECAY` (docs/architecture.md, "Dates and
durations").
"""

from __future__ import annotations

__all__ = ["DateError", "duration_seconds", "half_life", "moment", "timestamp_of"]

UNITS = {"h": 3600.0, "d": 86_400.0, "w": 7 * 86_400.0, "y": 365 * 86_400.0}
# A century: a longer duration (or half-life) is a typo, not a wish.
MAX_SECONDS = 100 * 365 * 86_400.0


class DateError(ValueError):
    """A date or a duration that cannot be read; the message shows the forms that work."""


def duration_seconds(text: str) -> float:
    """`30d` -> 2,592,000.0; DateError for anything else."""
    raw = text.strip().lower()
    number, unit = raw[:-1], raw[-1:]
    if unit not in UNITS or not number.isdigit() or len(number) > 6:
        raise DateError(
            f"{text!r} is not a duration: a whole number and h, d, w or y (90d, 12w, 1y)"
        )
    seconds = int(number) * UNITS[unit]
    if seconds <= 0 or seconds > MAX_SECONDS:
        raise DateError(f"{text!r}: a duration must be more than 0 and at most 100y")
    return seconds


def half_life(text: str) -> float:
    """A recency half-life in seconds (`90d`); `off`, `none`, `0` or nothing: 0, no decay."""
    if text.strip().lower() in ("", "off", "none", "0"):
        return 0.0
    return duration_seconds(text)


def timestamp_of(text: str) -> float | None:
    """An ISO date or datetime as epoch seconds (UTC unless it says otherwise); None if not."""
    import datetime as dt

    raw = text.strip()
    if len(raw) < 10 or len(raw) > 40:
        return None
    try:
        parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def moment(text: str, now: float) -> float:
    """`--since`/`--before`'s value as epoch seconds: an ISO date or datetime, or a duration
    counted back from `now` (`30d`: 30 days ago)."""
    when = timestamp_of(text)
    if when is not None:
        return when
    try:
        return now - duration_seconds(text)
    except DateError:
        raise DateError(
            f"{text!r} is neither a date (2026-01-31, 2026-01-31T09:30) nor a duration "
            "(30d, 12h, 2w, 1y)"
        ) from None
