"""`mdvdb mcp`: the index as Model Context Protocol tools, for agents that speak MCP.

One process serves one project for as long as the client keeps it: the index stays mapped
and the embedding model loaded between calls, and every call first checks whether a newer
index was published (the `Index` re-maps on an inode/mtime change), so an ingest run by a hook
is picked up without restarting anything. It also watches the source folders by default
(`pipeline.watch.start_background`, off with MDVDB_WATCH=false): an edited file is re-indexed
after the debounce, under the writer lock, and the next call answers from that index.

This module is the protocol side: the tool descriptions (written for a model: what each tool
returns and when to use it), argument schemas, and the mapping of expected failures to tool
errors with their one-line message. What each tool computes is in `mdvdb.mcp_tools`, on the
same libraries as the CLI commands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, Literal

from mcp.types import CallToolResult, TextContent

from mdvdb import mcp_tools
from mdvdb.cli.errors import USER_ERRORS, is_user_error
from mdvdb.config import Config

INSTRUCTIONS = (
    "Tools over a folder of Markdown notes. `search` finds sections by meaning (questions, "
    "topics, other wording); `grep` finds exact text (identifiers, error messages, commands, "
    "quoted phrases, regexes) with line numbers, straight from the files. `schema` lists the "
    "frontmatter fields and values that search filters use; `clusters` gives the topics of an "
    "unfamiliar folder. Read what they point to with `get_document` (a line range saves tokens). "
    "`status` says whether the index is fresh; `ingest` refreshes it after files changed."
)

SEARCH_DOC = """Find the sections of the notes that best answer a question, by meaning.

Use it for questions and topics ("how do I undo the last commit"), even when the notes use
other words. For an exact string (identifier, error message, command, regex) use grep: search
ranks by meaning and can bury exact text.

Returns {"query", "mode", "total", "results": [{"path", "heading", "lines": "start-end",
"score", "excerpt", "tier"}]}. tier "title": the file's title or a heading holds every query
word (first, one per file); "content": the other sections, best first. lines are 1-based,
ready for get_document(path, start_line, end_line). Scores compare within one answer only.
Cheaper or fuller: files_only=true returns {"files": [{"path", "score"}]}, one per file;
max_tokens caps the total excerpt text; full_text=true adds each section's whole "text".

Narrow by metadata (all must hold):
- filters: frontmatter conditions, e.g. ["status=draft", "tags=python,rust" (any of),
  "rating>=4", "date<2024-01-31" (also <=, >), "author!=bob", "reviewed?" (has the field),
  "!archived" (lacks it)]. schema lists the fields and values; a bad filter is an error
  naming the fields there are.
- tag / category: one value each, any case; if no file has it, the answer lists the values.
- cluster: a cluster_id from clusters.
With no query, filters/tag/category list the matching files: {"results": [{"path",
"title"}], "total"}.

Also: limit (default 10), min_score, mode ("hybrid", the default: keywords and meaning;
"semantic"; "lexical": keywords only), govern (weigh pages by confidence/updated
frontmatter; default: on when pages have those fields), explain (score components)."""

GREP_DOC = """Find exact text in the notes, with line numbers: ripgrep over the Markdown
files themselves (needs no index, always current).

Use it for identifiers, function or command names, error messages, quoted phrases, file names,
URLs, or anything a regex describes; use search for questions and topics.

pattern is literal text; regex=true takes ripgrep (Rust) regex syntax, e.g. "def \\w+_cache"
or "TODO|FIXME". Smart case: case-insensitive unless the pattern has an upper-case letter.
Frontmatter lines are skipped unless include_frontmatter=true.

Returns {"pattern", "matches", "more", "files": [{"path", "title", "hits": [{"line",
"text"}]}]}: 1-based line numbers and the matching line (a long one cut around the match with
"…"). limit (default 20) caps all matches, per_file_limit (default 5) those of one file;
"more": true says matches were left out, and on a file that it has more.
context=N (up to 10) adds N lines "before" and "after" each hit. file_type: "md" (default,
.md/.markdown), "qmd" or "all"; sources: only these roots ("dir:docs"). A bad regex is an
error saying why."""

GET_DOC = """Read one indexed Markdown file by its path (as returned by search or grep).

Returns {"path", "title", "metadata" (frontmatter), "sections": [{"heading", "lines"}],
"content"}. Give start_line/end_line (1-based, inclusive, e.g. from a search result's
"lines" or around a grep hit) to get only that part of the content and save tokens;
content_only=true drops the metadata and the section outline."""

STATUS_DOC = """Whether an index exists and is up to date.

Returns {"exists", "fresh", "files", "chunks", "stale_files" (count), "new_files" (count),
"examples" (a few changed paths), "provider", "model", "last_update"}. If not fresh, call
ingest before relying on search results for recently edited files (grep reads the files and
is always current)."""

INGEST_DOC = """Bring the index up to date with the files on disk (only what changed is
re-processed; a no-op is fast). Returns counts: {"files", "added", "changed", "removed",
"unchanged", "chunks_embedded", "seconds", "errors"}. Call it after you edited notes and
want search to see the edits."""

CLUSTERS_DOC = """The topics the notes fall into (document clusters built at ingest): an
overview of an unfamiliar folder before searching.

Returns {"documents", "unclustered", "k", "clusters": [{"cluster_id", "label", "size",
"keywords", "representatives": [{"path", "title"}]}]}. cluster_id=N returns that cluster's
documents instead: {"cluster_id", "label", "keywords", "size", "files": [{"path", "title"}]}
(at most limit, default 100). search(cluster=N) searches one topic."""

SCHEMA_DOC = """The frontmatter fields the notes use: what metadata there is to filter on.

Returns {"files", "fields": [{"name", "type" (string, number, boolean, date, list, object or
mixed), "files" (how many have it), "distinct" (how many values), "values" ([value, files]
pairs, when there are few), and from the .markdownvdb.schema.yml overlay when it declares
them: "description", "allowed", "required"}]}. field="NAME" returns that one field with every
value and its file count, most common first (up to 200)."""

# The CLI's list of expected library failures, and those only a tool call can meet (the CLI
# reports them its own way: configuration is a usage error, grep and requests parse first).
TOOL_ERRORS = USER_ERRORS | {
    "ConfigError",
    "GrepError",
    "RequestError",
    "SourceError",
    "ToolProblem",
}


@contextlib.contextmanager
def tool_errors() -> Iterator[None]:
    """The libraries' expected failures as tool errors carrying their one-line message (the
    SDK hides the text of any other exception from the client, as it should for a crash)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except Exception as exc:
        if is_user_error(exc, TOOL_ERRORS):
            raise ToolError(str(exc)) from None
        raise


def reply(data: dict[str, Any]) -> CallToolResult:
    """Structured content for clients that read it, and the same JSON without indentation
    as text for those that read text: indentation alone is ~30% of the tokens."""
    import json

    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


async def call(function, *args: Any, **kwargs: Any) -> CallToolResult:
    """Run a tool body off the event loop; expected failures become tool errors."""
    with tool_errors():
        return reply(await asyncio.to_thread(function, *args, **kwargs))


def build_server(config: Config):
    """An MCPServer with the tools bound to one project's index."""
    from mcp.server.mcpserver import MCPServer

    from query import open_index

    index = open_index(config=config)
    server = MCPServer(name="mdvdb", instructions=INSTRUCTIONS, log_level="WARNING")

    async def search(
        query: str | None = None,
        filters: list[str] | None = None,
        tag: str | None = None,
        category: str | None = None,
        limit: int | None = None,
        min_score: float | None = None,
        mode: Literal["hybrid", "semantic", "lexical"] | None = None,
        cluster: int | None = None,
        files_only: bool = False,
        max_tokens: int | None = None,
        full_text: bool = False,
        govern: bool | None = None,
        explain: bool = False,
    ) -> CallToolResult:
        from query.request import SearchRequest

        request = SearchRequest(
            query=query,
            filters=filters or [],
            tag=tag,
            category=category,
            limit=limit,
            files=files_only,
            max_tokens=max_tokens,
            mode=mode,
            min_score=min_score,
            govern=govern,
            explain=explain,
            cluster=cluster,
        )
        return await call(mcp_tools.search, index, request, full_text)

    async def grep(
        pattern: str,
        regex: bool = False,
        limit: int = 20,
        per_file_limit: int = 5,
        context: int = 0,
        file_type: Literal["md", "qmd", "all"] = "md",
        sources: list[str] | None = None,
        include_frontmatter: bool = False,
    ) -> CallToolResult:
        return await call(
            mcp_tools.grep,
            config,
            pattern,
            regex=regex,
            limit=limit,
            per_file_limit=per_file_limit,
            context=context,
            sources=sources,
            file_type=file_type,
            include_frontmatter=include_frontmatter,
        )

    async def get_document(
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        content_only: bool = False,
    ) -> CallToolResult:
        with tool_errors():
            doc = await index.aget_document(path)
        content = doc.content
        if start_line is not None or end_line is not None:
            lines = content.split("\n")
            first = max(1, start_line or 1)
            last = min(len(lines), end_line or len(lines))
            content = "\n".join(lines[first - 1 : last])
        if content_only:
            return reply({"path": doc.path, "content": content})
        data = {
            "path": doc.path,
            "title": doc.title,
            "metadata": doc.metadata,
            "sections": [
                {"heading": " > ".join(s.heading_path), "lines": f"{s.start_line}-{s.end_line}"}
                for s in doc.sections
            ],
            "content": content,
        }
        return reply(data)

    async def status() -> CallToolResult:
        return await call(mcp_tools.status, config, index)

    async def ingest() -> CallToolResult:
        return await call(mcp_tools.ingest, config)

    async def clusters(cluster_id: int | None = None, limit: int = 100) -> CallToolResult:
        return await call(mcp_tools.clusters, index, cluster_id, limit)

    async def schema(field: str | None = None) -> CallToolResult:
        return await call(mcp_tools.schema, index, field)

    server.add_tool(search, description=SEARCH_DOC)
    server.add_tool(grep, description=GREP_DOC)
    server.add_tool(get_document, description=GET_DOC)
    server.add_tool(schema, description=SCHEMA_DOC)
    server.add_tool(clusters, description=CLUSTERS_DOC)
    server.add_tool(status, description=STATUS_DOC)
    server.add_tool(ingest, description=INGEST_DOC)
    return server


def run(config: Config, http_port: int | None = None) -> None:
    """Serve over stdio (the default) or streamable HTTP bound to 127.0.0.1 only, watching
    the source folders meanwhile (unless MDVDB_WATCH=false) so that answers follow edits
    without an `ingest` call; the watcher logs one line per batch on stderr."""
    from pipeline.watch import start_background

    server = build_server(config)
    watcher = start_background(config)
    try:
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=http_port)
    finally:
        if watcher is not None:
            watcher.stop()
