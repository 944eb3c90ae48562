"""The read side: open a project's index and search it.

from query import open_index
index = open_index("path/to/notes")
for hit in index.search("how do I extract a tar archive", limit=5).results:
    print(hit.score, hit.path, hit.start_line, hit.heading)

The names below load on first use, so `query.grep` (which needs neither NumPy nor Arrow) can be
imported without paying for the index reader.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs mdvdb grep ~3 ms

_LAZY = {
    "Index": "query.index",
    "QueryError": "query.index",
    "open_index": "query.index",
    "Document": "query.results",
    "SearchResponse": "query.results",
    "SearchResult": "query.results",
    "Status": "query.results",
}

__all__ = [
    "Document",
    "Index",
    "QueryError",
    "SearchResponse",
    "SearchResult",
    "Status",
    "open_index",
]

if TYPE_CHECKING:
    from query.index import Index, QueryError, open_index
    from query.results import Document, SearchResponse, SearchResult, Status


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'query' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
