"""Scoring a query's rows: the dense side, BM25F and their fusion."""

__all__: list[str] = []
