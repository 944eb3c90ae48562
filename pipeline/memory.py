"""Giving freed heap memory back to the system between a big run's steps.

CPython frees a batch of decoded records (millions of small strings and dicts) into the C
heap, which glibc keeps for later `malloc` calls; the steps after it allocate mostly through
NumPy's large blocks and Arrow's own pool, so those pages would stay resident for nothing
(docs/benchmarks.md, "Ingest memory (issue 37)"). `malloc_trim` returns them; elsewhere than
glibc this does nothing.
"""

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
