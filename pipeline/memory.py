"""Giving freed heap memory back to the system between a big run's steps: glibc keeps the
pages of freed records that later NumPy and Arrow allocations never reuse (docs/benchmarks.md,
"Ingest memory (issue 37)"). Elsewhere than glibc this does nothing."""

from __future__ import annotations

from functools import cache


@cache
def _trim():
    """glibc's `malloc_trim`, or None where there is none."""
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed() -> None:
    """`malloc_trim(0)` where glibc offers it (a few ms), else nothing."""
    trim = _trim()
    if trim is not None:
        trim(0)
