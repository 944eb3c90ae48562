"""`mdvdb mcp`: the index as Model Context Protocol tools, for agents that speak MCP.

One process serves one project for as long as the client keeps it: the index stays mapped
and the embedding model loaded between calls, and every call first checks whether a newer
index was published (the `Index` re-maps on an inode/mtime change), so an ingest run by a hook
is picked up without restarting anything.

Results are compact by default (path, heading, line range, score, a short excerpt) because a
model pays for every token it reads; full text is there when asked for. Search options the
library grows (`mode`, `filters`, `facets`...) are forwarded as keyword arguments untouched.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp.types import CallToolResult, TextContent

from mdvdb.config import OFF_FILE, Config

INSTRUCTIONS = (
    "Search a folder of Markdown notes. Use `search` first: it finds sections by meaning, "
    "even when the words differ; ask for `files_only` when you only need which files. Use "
    "`get_document` to read a file (or a line range of it) that a search pointed to. "
    "`status` says whether the index is fresh; `ingest` refreshes it after files changed."
)

SEARCH_DOC = """Find the sections of the Markdown notes that best answer a question.

Semantic search: matches by meaning, so phrase the query as the question or the idea
("how do I undo the last commit"), not as exact text. For an exact string, identifier or
regular expression, a grep tool is the better choice when available.

Returns {"query", "mode", "results": [{"path", "heading", "lines": "start-end", "score",
"excerpt"}]}, best first. `lines` are 1-based line numbers in the file, ready for
get_document(path, start_line, end_line). Compact by default: set full_text=true to get each
section's whole text in "text"; files_only=true returns just {"path", "score"} per file (the
cheapest answer); max_tokens caps the total excerpt size. Scores are relative, not absolute:
compare them within one answer.

Optional: limit (default 10), min_score, mode ("semantic", "lexical", "hybrid" where the
index supports them), filters and facets (metadata conditions, passed to the library as
given), govern (weigh pages by their confidence/updated frontmatter; default: on when pages
have those fields), explain (score components)."""

GET_DOC = """Read one indexed Markdown file by its path (as returned by search).

Returns {"path", "title", "metadata" (frontmatter), "sections": [{"heading", "lines"}],
"content"}. Give start_line/end_line (1-based, inclusive, e.g. from a search result's
"lines") to get only that part of the content and save tokens; content_only=false is the
default and keeps metadata and the section outline."""

STATUS_DOC = """Whether an index exists and is up to date.

Returns {"exists", "fresh", "files", "chunks", "stale_files" (count), "new_files" (count),
"examples" (a few changed paths), "provider", "model", "last_update"}. If not fresh, call
ingest before relying on search results for recently edited files."""

INGEST_DOC = """Bring the index up to date with the files on disk (only what changed is
re-processed; a no-op is fast). Returns counts: {"files", "added", "changed", "removed",
"unchanged", "chunks_embedded", "seconds", "errors"}. Call it after you edited notes and
want search to see the edits."""

CLUSTERS_DOC = """The topics the notes fall into: document clusters built at ingest time.

Returns {"clusters": [{"cluster_id", "label", "keywords", "size", "representative_paths"}]}
(empty when clustering is off or has not run). Useful to get an overview of an unfamiliar
folder before searching."""

SCHEMA_DOC = """The frontmatter fields the notes use, to know what metadata exists.

Returns {"documents", "fields": [{"name", "documents" (how many have it), "types",
"examples" (up to 5 distinct values)}]}, most common first."""


def reply(data: dict[str, Any]) -> CallToolResult:
    """Structured content for clients that read it, and the same JSON without indentation
    as text for those that read text: indentation alone is ~30% of the tokens."""
    import json

    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def build_server(config: Config):
    """An MCPServer with the tools bound to one project's index."""
    from mcp.server.mcpserver import MCPServer

    from query import open_index

    index = open_index(config=config)
    server = MCPServer(name="mdvdb", instructions=INSTRUCTIONS, log_level="WARNING")

    async def search(
        query: str,
        limit: int = 10,
        min_score: float | None = None,
        mode: str | None = None,
        filters: list[str] | None = None,
        facets: list[str] | None = None,
        govern: bool | None = None,
        full_text: bool = False,
        files_only: bool = False,
        max_tokens: int | None = None,
        explain: bool = False,
    ) -> CallToolResult:
        from query import shaping

        if config.switched_off:
            raise ValueError(f"search is switched off here ({config.root / OFF_FILE} exists)")
        options: dict[str, Any] = {"limit": limit * 4 if files_only else limit}
        extra = {"mode": mode, "filters": filters, "facets": facets, "govern": govern}
        options.update({k: v for k, v in extra.items() if v is not None})
        if min_score is not None:
            options["min_score"] = min_score
        if explain:
            options["explain"] = True
        try:
            response = await index.asearch(query, **options)
        except TypeError as exc:
            raise ValueError(f"this index does not support that option: {exc}") from None
        results = response.results
        if max_tokens is not None:
            results = shaping.within_budget(results, max_tokens)
        if files_only:
            hits = shaping.by_file(results, limit)
            return reply({"query": query, "files": [h.to_json() for h in hits]})
        return reply(
            {
                "query": query,
                "mode": response.mode,
                "results": [compact(index, hit, full_text, explain) for hit in results],
            }
        )

    async def get_document(
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        content_only: bool = False,
    ) -> CallToolResult:
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
        return reply(await asyncio.to_thread(status_summary, config, index))

    async def ingest() -> CallToolResult:
        return reply(await asyncio.to_thread(run_ingest, config))

    async def clusters() -> CallToolResult:
        return reply(await asyncio.to_thread(cluster_summary, index))

    async def schema() -> CallToolResult:
        return reply(await asyncio.to_thread(schema_summary, index))

    server.add_tool(search, description=SEARCH_DOC)
    server.add_tool(get_document, description=GET_DOC)
    server.add_tool(status, description=STATUS_DOC)
    server.add_tool(ingest, description=INGEST_DOC)
    server.add_tool(clusters, description=CLUSTERS_DOC)
    server.add_tool(schema, description=SCHEMA_DOC)
    return server


def compact(index, hit, full_text: bool, explain: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": hit.path,
        "heading": " > ".join(hit.heading_path) or hit.heading,
        "lines": f"{hit.start_line}-{hit.end_line}",
        "score": round(hit.score, 4),
        "excerpt": hit.excerpt,
    }
    if full_text and hit.chunk_id >= 0:
        out["text"] = index.snapshot.table("chunks").column("text")[hit.chunk_id].as_py()
    if explain and hit.explain:
        out["explain"] = hit.explain
    return out


def status_summary(config: Config, index) -> dict[str, Any]:
    from pipeline.discover import walk

    st = index.status()
    if st.exists:
        indexed = set(index.snapshot.paths)
        st.new_files = sorted(p for p in walk(config, []) if p not in indexed)
    return {
        "exists": st.exists,
        "fresh": st.fresh,
        "files": st.files,
        "chunks": st.chunks,
        "stale_files": len(st.stale_files),
        "new_files": len(st.new_files),
        "examples": (st.stale_files + st.new_files)[:5],
        "provider": st.provider,
        "model": st.model,
        "last_update": st.last_update,
        "provider_mismatch": st.provider_mismatch,
    }


def run_ingest(config: Config) -> dict[str, Any]:
    from pipeline import ingest as pipeline_ingest

    report = pipeline_ingest.run(config, None, wait=False)
    return {
        "files": report.files,
        "added": report.added,
        "changed": report.changed,
        "removed": report.removed,
        "unchanged": report.unchanged,
        "chunks_embedded": report.chunks_embedded,
        "seconds": round(report.seconds, 3),
        "errors": [{"path": p, "problem": m} for p, m in report.errors[:20]],
    }


def cluster_summary(index) -> dict[str, Any]:
    table = index.snapshot.table("clusters")
    if table is None or table.num_rows == 0:
        return {"clusters": []}
    wanted = ["cluster_id", "label", "keywords", "size", "representative_paths"]
    rows = table.select([c for c in wanted if c in table.column_names]).to_pylist()
    return {"clusters": rows}


def schema_summary(index) -> dict[str, Any]:
    import json

    column = index.snapshot.table("files").column("frontmatter").to_pylist()
    fields: dict[str, dict[str, Any]] = {}
    for raw in column:
        for name, value in json.loads(raw or "{}").items():
            info = fields.setdefault(name, {"name": name, "documents": 0, "types": set(), "ex": []})
            info["documents"] += 1
            info["types"].add(type(value).__name__)
            shown = json.dumps(value, default=str)[:60]
            if len(info["ex"]) < 5 and shown not in info["ex"]:
                info["ex"].append(shown)
    ordered = sorted(fields.values(), key=lambda f: (-f["documents"], f["name"]))
    return {
        "documents": len(column),
        "fields": [
            {
                "name": f["name"],
                "documents": f["documents"],
                "types": sorted(f["types"]),
                "examples": f["ex"],
            }
            for f in ordered
        ],
    }


def run(config: Config, http_port: int | None = None) -> None:
    """Serve over stdio (the default) or streamable HTTP bound to 127.0.0.1 only."""
    server = build_server(config)
    if http_port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=http_port)
