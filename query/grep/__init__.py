"""Exact text search over the source roots (`mdvdb grep`)."""

__all__: list[str] = []
