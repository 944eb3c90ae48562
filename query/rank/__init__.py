"""A search's ranking: the modes, titles, tiers, collapse and excerpts."""

__all__: list[str] = []
