"""`mdvdb mcp`: the index as Model Context Protocol tools, for agents that speak MCP.

The protocol side: tool descriptions, argument schemas and bounds, expected failures as tool
errors. What each tool computes is in `mdvdb.mcp_tools`; the index stays open between calls
and follows each published ingest, and the source folders are watched (MDVDB_WATCH).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, Literal

from mcp.types import CallToolResult, TextContent

from kernel import private
from kernel.config import DEFAULT_LIMIT, Config, ConfigError
from kernel.version import JSON_SCHEMA_VERSION
from mdvdb import mcp_tools
from mdvdb.cli.errors import USER_ERRORS, is_user_error
from mdvdb.mcp_transports import AnsweringStream, serve_http
from query import FILE_TYPES

KEYWORD = inspect.Parameter.KEYWORD_ONLY

INSTRUCTIONS = (
    "Tools over a folder of Markdown notes. `search` finds sections by meaning (questions, "
    "topics, other wording); `grep` finds exact text (identifiers, error messages, commands, "
    "quoted phrases, regexes) with line numbers, straight from the files. `schema` lists the "
    "frontmatter fields and values that search filters use; `clusters` gives the topics of an "
    "unfamiliar folder. Read what they point to with `get_document` (a line range saves tokens); "
    "`links` and `backlinks` follow a note to its neighbours. "
    "`status` says whether the index is fresh; `ingest` refreshes it after files changed."
)

SEARCH_DOC = """Find the sections of the notes that best answer a question, by meaning.

Use it for questions and topics ("how do I undo the last commit"), even when the notes use
other words. For an exact string (identifier, error message, command, regex) use grep: search
ranks by meaning and can bury exact text.

Returns {"query", "mode", "total", "results": [{"path", "heading_path", "start_line",
"end_line", "score", "excerpt", "tier"}]}. tier "title": the file's title or an alias holds
every query word (first, one per file); "content": the other sections, best first;
"repeated": a block many files share (a footer, a template), shown once and only when no other
section holds every query word. Lines are 1-based, ready for get_document(path, start_line,
end_line). Scores compare within one answer only. A section repeated nearly word for word in
other files (versioned copies) comes once, with "also_in": [{"path", "start_line",
"end_line"}, ...] (the first 5) and "also_in_count" (collapse=false: every copy); at most
per_file sections of one file (default 3, 0: no cap).
Cheaper or fuller: files_only=true returns {"files": [{"path", "score"}]}, one per file;
max_tokens caps the total excerpt text; full_text=true adds each section's whole "text".

Narrow by metadata (all must hold):
- filters: frontmatter conditions, e.g. ["status=draft", "tags=python,rust" (any of),
  "rating>=4", "date<2024-01-31" (also <=, >), "author!=bob", "reviewed?" (has the field),
  "!archived" (lacks it)]. schema lists the fields and values; a bad filter is an error
  naming the fields there are.
- tag / category: one value each, any case; if no file has it, the answer lists the values.
- cluster: a cluster_id from clusters.
- paths: gitignore-style globs, any of them, e.g. ["docs/", "*.runbook.md", "notes/**/2026-*.md"].
- sources: named sources (MDVDB_SOURCES); each result then has "source", and the answer a
  "sources" object describing each source shown once.
- since / before: a date ("2026-01-31") or a duration back from now ("30d", "12h", "2w",
  "1y") on the file's modified time, or on the frontmatter date named by date_field.
- decay: a recency half-life ("90d": a page that old scores half), after relevance.
With no query, filters/tag/category/paths/sources/since/before list the matching files:
{"results": [{"path", "title"}], "total"}.

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
"snippet"}]}]}: 1-based line numbers and the matching line (a long one cut around the match
with "…"). limit (default 10) caps all matches, per_file_limit (default 5) those of one file;
"more": true says matches were left out, and on a file that it has more.
context=N (up to 10) adds N lines "before" and "after" each hit. file_type: "md" (default,
.md/.markdown), "qmd" or "all"; sources: only these roots ("dir:docs"). A bad regex is an
error saying why."""

GET_DOC = """Read indexed Markdown files: path is a path (as search or grep return it),
a document id ("#abc12345", the "id" of a search result), "PATH:START-END" or
"PATH:START+COUNT" (1-based lines), a glob ("notes/*.md") or a note's name without folder
and extension (an error lists the files when several have it); paths adds more targets.

Returns {"path", "id", "title", "metadata" (frontmatter), "sections": [{"heading_path",
"start_line", "end_line"}], "content", "start_line", "end_line", "total_lines"} for one
document, {"documents": [...]} for several. start_line/end_line keep only those lines (e.g.
from a search result or around a grep hit) to save tokens; max_tokens cuts each content at
a line's end, and "next_offset" then says where the rest starts: call again with
offset=next_offset. content_only=true drops the metadata and the section outline."""

LINKS_DOC = """The links one note holds (wikilinks, embeds, Markdown links), in line order:
{"path", "id", "links": [{"line", "kind" (wikilink, embed, markdown, image), "target",
"anchor", "label", "resolved" (the indexed path it names), "broken"}]}. path: a path, id
or note name. Use it to follow a note to its neighbours."""

BACKLINKS_DOC = """The links of other notes that name this one: {"path", "id", "backlinks":
[{"source", "line", "kind", "target", "anchor", "label"}]}. path: a path, id or note name."""

ORPHANS_DOC = """The notes no other note links to and that link to no other note:
{"orphans": [path, ...] (at most limit, default 100), "total"}."""

STATUS_DOC = """Whether an index exists and is up to date.

Returns {"exists", "fresh", "root", "files", "chunks", "stale_files" and "new_files" (the
first 5 paths changed or added since the last ingest; "stale_total", "new_total" count
them), "errors" (the first 20 files with a problem, {"path", "problem"}; "errors_total"),
"provider", "model", "last_update", "upgrade" (null, or how far the upgrade to a contextual
model is: {"model", "chunks", "done", "left", "share", "eta_seconds"}; search uses the
static model until it is done)}. If not fresh, call ingest before relying on search
results for recently edited files (grep reads the files and is always current)."""

INGEST_DOC = """Bring the index up to date with the files on disk (only what changed is
re-processed; a no-op is fast). Returns counts: {"files", "added", "changed", "removed",
"unchanged", "chunks_embedded", "seconds", "errors" (the first 20), "errors_total"}. Call it
after you edited notes and want search to see the edits."""

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

# The CLI's expected library failures, and those only a tool call meets.
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
    SDK hides any other exception's text from the client)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except Exception as exc:
        if is_user_error(exc, TOOL_ERRORS):
            raise ToolError(str(exc)) from None
        raise


def reply(data: dict[str, Any]) -> CallToolResult:
    """Structured content, and the same JSON as text without indentation, which costs tokens
    (docs/benchmarks.md, "MCP tools after the CLI-parity rework")."""
    data = {"schema_version": JSON_SCHEMA_VERSION, **data}  # docs/json.md
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


async def call(function, *args: Any, bounds: dict | None = None, **kwargs: Any) -> CallToolResult:
    """Check `bounds`, then run a tool body off the event loop; expected failures: tool errors."""
    with tool_errors():
        check_bounds(**(bounds or {}))
        return reply(await asyncio.to_thread(function, *args, **kwargs))


# the caps check_bounds applies
BOUNDED = ("query", "filters", "paths", "sources", "limit", "max_tokens")


def search_parameters() -> list[inspect.Parameter]:
    """The search tool's arguments, from the one declaration of the search options
    (`query.search_options`), then `full_text`, which only the tool has."""
    from query import OPTIONS

    parameters = []
    for option in OPTIONS:
        spec = option.spec
        if spec.choices is not None:
            kind: Any = Literal[spec.choices] | None
        elif spec.repeat == "many":
            kind = list[spec.value] | None
        elif option.default is None:
            kind = spec.value | None
        else:
            kind = spec.value
        default = list(option.default) if isinstance(option.default, tuple) else option.default
        parameters.append(
            inspect.Parameter(option.mcp_name, KEYWORD, default=default, annotation=kind)
        )
    parameters.append(inspect.Parameter("full_text", KEYWORD, default=False, annotation=bool))
    return parameters


def request_fields(arguments: dict[str, Any]) -> dict[str, Any]:
    """The tool's arguments as `SearchRequest` fields (`files_only` is `files`)."""
    from query import OPTIONS

    fields = {}
    for option in OPTIONS:
        value = arguments.get(option.mcp_name, option.default)
        fields[option.name] = [] if option.spec.repeat == "many" and value is None else value
    return fields


def build_server(config: Config):
    """An MCPServer with the tools bound to one project's index."""
    from mcp.server.mcpserver import MCPServer

    from query import open_index

    index = open_index(config=config)
    # A local encoder's fast session, loaded in the background: the first call is not held up.
    index.warm_up(wait=False)
    server = MCPServer(name="mdvdb", instructions=INSTRUCTIONS, log_level="WARNING")

    async def search(full_text: bool = False, **arguments: Any) -> CallToolResult:
        from query import SearchRequest

        fields = request_fields(arguments)
        with tool_errors():  # before the request is built
            check_bounds(**{name: fields[name] for name in BOUNDED})
        return await call(mcp_tools.search, index, SearchRequest(**fields), full_text)

    # the SDK builds the input schema from the signature: the declared arguments
    signature = inspect.Signature(search_parameters(), return_annotation=CallToolResult)
    search.__signature__ = signature
    search.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    search.__annotations__["return"] = CallToolResult

    async def grep(
        pattern: str,
        regex: bool = False,
        limit: int = DEFAULT_LIMIT,
        per_file_limit: int = 5,
        context: int = 0,
        file_type: Literal[FILE_TYPES] = "md",
        sources: list[str] | None = None,
        include_frontmatter: bool = False,
    ) -> CallToolResult:
        return await call(
            mcp_tools.grep,
            config,
            pattern,
            bounds={"pattern": pattern, "limit": limit, "per_file_limit": per_file_limit},
            regex=regex,
            limit=limit,
            per_file_limit=per_file_limit,
            context=context,
            sources=sources,
            file_type=file_type,
            include_frontmatter=include_frontmatter,
        )

    async def status() -> CallToolResult:
        return await call(mcp_tools.status, config, index)

    async def ingest() -> CallToolResult:
        return await call(mcp_tools.ingest, config)

    async def clusters(cluster_id: int | None = None, limit: int = 100) -> CallToolResult:
        return await call(mcp_tools.clusters, index, cluster_id, limit, bounds={"limit": limit})

    async def schema(field: str | None = None) -> CallToolResult:
        return await call(mcp_tools.schema, index, field)

    server.add_tool(search, description=SEARCH_DOC)
    server.add_tool(grep, description=GREP_DOC)
    add_document_tools(server, index)
    server.add_tool(schema, description=SCHEMA_DOC)
    server.add_tool(clusters, description=CLUSTERS_DOC)
    server.add_tool(status, description=STATUS_DOC)
    server.add_tool(ingest, description=INGEST_DOC)
    return server


def add_document_tools(server, index) -> None:
    """get_document, links, backlinks and orphans, bound to one project's index."""

    async def get_document(
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        content_only: bool = False,
        max_tokens: int | None = None,
        offset: int = 0,
        paths: list[str] | None = None,
    ) -> CallToolResult:
        with tool_errors():
            check_bounds(max_tokens=max_tokens)
            if len(paths or ()) > MAX_LIMIT:
                raise mcp_tools.ToolProblem(f"{len(paths)} paths; the cap is {MAX_LIMIT}")
        return await call(
            mcp_tools.documents,
            index,
            [path, *(paths or ())],
            start_line,
            end_line,
            max_tokens,
            offset,
            content_only,
        )

    async def links(path: str) -> CallToolResult:
        return await call(mcp_tools.links, index, path, "links")

    async def backlinks(path: str) -> CallToolResult:
        return await call(mcp_tools.links, index, path, "backlinks")

    async def orphans(limit: int = 100) -> CallToolResult:
        return await call(mcp_tools.orphans, index, limit, bounds={"limit": limit})

    server.add_tool(get_document, description=GET_DOC)
    server.add_tool(links, description=LINKS_DOC)
    server.add_tool(backlinks, description=BACKLINKS_DOC)
    server.add_tool(orphans, description=ORPHANS_DOC)


TOKEN_NAME = "mcp-http.token"
# Caps on what one tool call may ask for (a 5 MB query or limit=2**63 would only cost memory).
MAX_QUERY_CHARS = 2000
MAX_PATTERN_CHARS = 1000
MAX_LIMIT = 1000
MAX_FILTERS = 50
MAX_FILTER_CHARS = 500
MAX_MAX_TOKENS = 1_000_000


def check_bounds(**values: Any) -> None:
    """A tool error naming the argument and its cap, before any work is done."""
    from mdvdb.mcp_tools import ToolProblem

    for name, value in values.items():
        if value is None:
            continue
        if name in ("query", "pattern"):
            cap = MAX_QUERY_CHARS if name == "query" else MAX_PATTERN_CHARS
            if len(value) > cap:
                raise ToolProblem(f"{name} is {len(value)} characters; the cap is {cap}")
        elif name in ("filters", "paths", "sources"):  # lists of short strings
            if len(value) > MAX_FILTERS:
                raise ToolProblem(f"{len(value)} {name}; the cap is {MAX_FILTERS}")
            for item in value:
                if len(item) > MAX_FILTER_CHARS:
                    raise ToolProblem(f"one of {name} is {len(item)} characters; the cap is 500")
        else:
            cap = MAX_MAX_TOKENS if name == "max_tokens" else MAX_LIMIT
            if not 1 <= value <= cap:
                raise ToolProblem(f"{name} must be between 1 and {cap}, got {value}")


class BearerAuth:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        import hmac

        if scope["type"] in ("http", "websocket"):
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error":"missing or wrong bearer token (see mdvdb mcp --help)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="mdvdb"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_token(
    config: Config, token_file: str | None = None, name: str = TOKEN_NAME
) -> tuple[str, str]:
    """The bearer token and where it is: `--token-file` (refused when other users can read
    it, as ssh refuses such keys), else the state folder's token `name`, made once with
    `secrets` (0600, never through a symlink) and kept across restarts."""
    if token_file is not None:
        path = Path(token_file)
        try:
            info = path.stat()
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--token-file {path}: cannot read it ({exc})") from None
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ConfigError(f"--token-file {path}: other users can read it (chmod 600 it)")
        if len(token) < 16 or any(c.isspace() for c in token):
            raise ConfigError(f"--token-file {path}: the token must be 16+ characters, no spaces")
        return token, str(path)
    private.state_folder(config.state_path)
    path = config.state_path / name
    try:
        token = path.read_text(encoding="utf-8").strip() if not path.is_symlink() else ""
    except (OSError, UnicodeDecodeError):
        token = ""
    if len(token) < 16 or stat.S_IMODE(path.stat().st_mode) & 0o077:
        if path.exists() or path.is_symlink():
            os.unlink(path)
        token = secrets.token_urlsafe(32)
        private.write_file(path, (token + "\n").encode(), exclusive=True)
    return token, str(path)


def serve(config: Config, http_port: int | None = None, token_file: str | None = None) -> None:
    """Serve over stdio (the default) or streamable HTTP bound to 127.0.0.1 only, where every
    request needs the bearer token (any local user can reach a loopback port), while the
    source folders are watched (unless MDVDB_WATCH=false)."""
    import anyio

    from pipeline import start_background

    if http_port is None:
        server = build_server(config)
        serving = partial(anyio.run, _serve_stdio, server)
    else:
        token, where = http_token(config, token_file)
        app = BearerAuth(build_server(config).streamable_http_app(host="127.0.0.1"), token)
        sys.stderr.write(
            f"mdvdb mcp: http://127.0.0.1:{http_port}/mcp; send 'Authorization: Bearer {token}' "
            f"(token in {where})\n"
        )
        sys.stderr.flush()
        serving = partial(serve_http, app, http_port)  # header timeout, connection cap
    watcher = start_background(config)
    try:
        serving()
    finally:
        if watcher is not None:
            watcher.stop()


async def _serve_stdio(server: Any) -> None:
    """The SDK's `run_stdio_async`, with each malformed line answered by a JSON-RPC error
    (`mdvdb.mcp_transports.AnsweringStream`) instead of dropped: the SDK has no hook for it."""
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        answering = AnsweringStream(read_stream, write_stream)
        await low.run(answering, write_stream, low.create_initialization_options())
