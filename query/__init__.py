"""The read side: open a project's index and search it.

from query import open_index
index = open_index("path/to/notes")
for hit in index.search("how do I extract a tar archive", limit=5).results:
    print(hit.score, hit.path, hit.start_line, hit.heading)
"""

from query.index import Index, QueryError, open_index
from query.results import Document, SearchResponse, SearchResult, Status

__all__ = [
    "Document",
    "Index",
    "QueryError",
    "SearchResponse",
    "SearchResult",
    "Status",
    "open_index",
]
