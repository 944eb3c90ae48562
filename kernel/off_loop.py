"""The `a…` twin of a blocking library call, written once: run on a worker thread, the same
typed signature. asyncio is imported on the first await only (the cold search path).
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import Any


def async_twin(call: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """`call` off the event loop: the same arguments, awaited."""

    @functools.wraps(call)
    async def twin(*args: Any, **kwargs: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(call, *args, **kwargs)

    twin.__doc__ = f"`{call.__name__}` off the event loop, for agent loops built on asyncio."
    twin.__name__ = twin.__qualname__ = f"a{call.__name__}"
    return twin
