"""The walk: the source folders, their ignore rules and what changed."""

__all__: list[str] = []
