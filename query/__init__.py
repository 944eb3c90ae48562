"""The read side: open a project's index and search it.

from query import open_index
index = open_index("path/to/notes")
for hit in index.search("how do I extract a tar archive", limit=5).results:
    print(hit.score, hit.path, hit.start_line, hit.heading)

`__all__` is the public surface (docs/architecture.md); each name loads on first use."""

from __future__ import annotations

from kernel.lazy_exports import lazy_exports

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `mdvdb grep` does not import typing

# public name -> (module, name in that module)
_PUBLIC = {
    "AmbiguousName": ("query.documents", "AmbiguousName"),
    "COLOR_CHOICES": ("query.grep.format", "COLOR_CHOICES"),
    "ClusterList": ("query.clusters", "ClusterList"),
    "Document": ("query.results", "Document"),
    "FILE_TYPES": ("query.grep.ripgrep", "FILE_TYPES"),
    "FilterError": ("query.filters", "FilterError"),
    "GrepError": ("query.grep.ripgrep", "GrepError"),
    "GREP_OPTIONS": ("query.grep.options", "GREP_OPTIONS"),
    "GREP_DESCRIPTION": ("query.grep.options", "DESCRIPTION"),
    "GrepOptions": ("query.grep.ripgrep", "GrepOptions"),
    "GrepRequest": ("query.grep.options", "GrepRequest"),
    "HumanWriter": ("query.grep.format", "HumanWriter"),
    "Index": ("query.index", "Index"),
    "JsonWriter": ("query.grep.format", "JsonWriter"),
    "Link": ("query.results", "Link"),
    "MODES": ("query.search_options", "MODES"),
    "Match": ("query.grep.ripgrep", "Match"),
    "OPTIONS": ("query.search_options", "OPTIONS"),
    "QueryError": ("query.snapshot", "QueryError"),
    "Registry": ("query.grep.sources", "Registry"),
    "RequestError": ("query.request", "RequestError"),
    "Schema": ("query.schema", "Schema"),
    "SearchOutcome": ("query.request", "SearchOutcome"),
    "SearchRequest": ("query.request", "SearchRequest"),
    "SearchResponse": ("query.results", "SearchResponse"),
    "SearchResult": ("query.results", "SearchResult"),
    "ShardGroup": ("query.shards.serve", "ShardGroup"),
    "SourceError": ("query.grep.sources", "SourceError"),
    "Status": ("query.results", "Status"),
    "cluster_members": ("query.clusters", "members"),
    "explain_no_match": ("query.no_match", "explain"),
    "grep_snippet": ("query.grep.format", "snippet"),
    "list_clusters": ("query.clusters", "list_clusters"),
    "load_schema": ("query.schema", "load_schema"),
    "new_files": ("query.verify", "new_files"),
    "open_index": ("query.index", "open_index"),
    "other_files": ("query.rank.collapse", "other_files"),
    "overlay_is_stale": ("query.schema", "overlay_is_stale"),
    "query_vector": ("query.rank.search", "query_vector"),
    "find_rg": ("query.grep.ripgrep", "find_rg"),
    "rg_complaint": ("query.grep.ripgrep", "rg_complaint"),
    "run_request": ("query.request", "run_request"),
    "select_roots": ("query.grep.sources", "select_roots"),
    "shard_group_name": ("query.shards.serve", "group_name"),
    "shard_groups": ("query.shards.serve", "groups_of"),
    "start_grep": ("query.grep.ripgrep", "start"),
    "use_color": ("query.grep.format", "use_color"),
    "value_counts": ("query.schema", "value_counts"),
    "verify_index": ("query.verify", "verify"),
    "write_cluster_map": ("query.clusters", "write_map"),
}

__all__ = [
    "AmbiguousName",
    "COLOR_CHOICES",
    "ClusterList",
    "Document",
    "FILE_TYPES",
    "FilterError",
    "GREP_DESCRIPTION",
    "GREP_OPTIONS",
    "GrepError",
    "GrepOptions",
    "GrepRequest",
    "HumanWriter",
    "Index",
    "JsonWriter",
    "Link",
    "MODES",
    "Match",
    "OPTIONS",
    "QueryError",
    "Registry",
    "RequestError",
    "Schema",
    "SearchOutcome",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "ShardGroup",
    "SourceError",
    "Status",
    "cluster_members",
    "explain_no_match",
    "find_rg",
    "grep_snippet",
    "list_clusters",
    "load_schema",
    "new_files",
    "open_index",
    "other_files",
    "overlay_is_stale",
    "query_vector",
    "rg_complaint",
    "run_request",
    "select_roots",
    "shard_group_name",
    "shard_groups",
    "start_grep",
    "use_color",
    "value_counts",
    "verify_index",
    "write_cluster_map",
]

if TYPE_CHECKING:
    from query.clusters import ClusterList, list_clusters
    from query.clusters import members as cluster_members
    from query.clusters import write_map as write_cluster_map
    from query.documents import AmbiguousName
    from query.filters import FilterError
    from query.grep.format import COLOR_CHOICES, HumanWriter, JsonWriter, use_color
    from query.grep.format import snippet as grep_snippet
    from query.grep.options import DESCRIPTION as GREP_DESCRIPTION
    from query.grep.options import GREP_OPTIONS, GrepRequest
    from query.grep.ripgrep import FILE_TYPES, GrepError, GrepOptions, Match, find_rg, rg_complaint
    from query.grep.ripgrep import start as start_grep
    from query.grep.sources import Registry, SourceError, select_roots
    from query.index import Index, open_index
    from query.no_match import explain as explain_no_match
    from query.rank.collapse import other_files
    from query.rank.search import query_vector
    from query.request import RequestError, SearchOutcome, SearchRequest, run_request
    from query.results import Document, Link, SearchResponse, SearchResult, Status
    from query.schema import Schema, load_schema, overlay_is_stale, value_counts
    from query.search_options import MODES, OPTIONS
    from query.shards.serve import ShardGroup
    from query.shards.serve import group_name as shard_group_name
    from query.shards.serve import groups_of as shard_groups
    from query.snapshot import QueryError
    from query.verify import new_files
    from query.verify import verify as verify_index


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, __all__)
