"""What the MCP tools do: plain functions from arguments to compact JSON-ready dicts.

Each runs the library the matching CLI command runs; only the answer is shorter (a model pays
for every token). Expected failures raise `ToolProblem` or the libraries' own errors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.config import DEFAULT_LIMIT, OFF_FILE, Config

if TYPE_CHECKING:
    from query import Index, SearchOutcome, SearchRequest

GREP_LINE_CHARS = 240  # a matching line longer than this is cut around the match
VALUES_SHOWN = 100  # facet values listed when a tag/category matches no file
FIELD_VALUES_SHOWN = 200  # values listed by schema(field=...)
MAX_CONTEXT = 10  # grep context lines either side, at most
PATHS_SHOWN = 5  # stale and new files status lists
PROBLEMS_SHOWN = 20  # problems status, ingest and schema list
MCP_ALSO_IN_SHOWN = 5  # copies a search result lists (also_in_count has them all)


class ToolProblem(ValueError):
    """A call that cannot be answered as asked; the message says what to do instead."""


def search(index: Index, request: SearchRequest, full_text: bool = False) -> dict[str, Any]:
    """`mdvdb search --json` semantics (tiers, filters, facets, shaping), compact output."""
    from query import run_request

    if index.config.switched_off:
        raise ToolProblem(f"search is switched off here ({index.config.root / OFF_FILE} exists)")
    with index.pinned():  # one snapshot for the whole request, even if an ingest publishes
        outcome = run_request(index, request)
        data = _search_data(index, outcome, full_text)
        if outcome.sources is not None and (data.get("results") or data.get("files")):
            data["sources"] = outcome.sources_json()  # each named source's description, once
        if not (data.get("results") or data.get("files")):  # the CLI's suggestions
            from query import explain_no_match as explain

            missed = explain(index, outcome, VALUES_SHOWN)
            data["no_match"] = missed.to_json()  # the CLI's `--json` no_match
            data["hint"] = missed.hint()
        return data


def _search_data(index: Index, outcome: SearchOutcome, full_text: bool) -> dict[str, Any]:
    query = outcome.request.query
    if outcome.no_such_value is not None:
        missing = outcome.no_such_value
        return {
            "query": query,
            "results": [],
            "total": 0,
            "facet": missing.facet.flag.lstrip("-"),
            "message": missing.message(VALUES_SHOWN),
            "valid_values": missing.values[:VALUES_SHOWN],
        }
    if outcome.listed is not None:
        return {
            "query": None,
            "results": [
                _sourced({"path": f.path, "id": f.id, "title": f.title}, f) for f in outcome.listed
            ],
            "total": outcome.total,
        }
    if outcome.files is not None:
        files = [
            _sourced(
                {
                    "path": hit.path,
                    "id": hit.id,
                    "score": round(hit.score, 4),
                    "confidence": hit.confidence,
                },
                hit,
            )
            for hit in outcome.files
        ]
        return {"query": query, "files": files}
    tiers = outcome.tiers
    assert tiers is not None
    explain = outcome.request.explain
    return {
        "query": query,
        "mode": tiers.mode,
        "total": outcome.total,
        "results": [
            compact_hit(index, tier, hit, full_text, explain) for tier, hit in tiers.results
        ],
    }


def compact_hit(index: Index, tier: str, hit, full_text: bool, explain: bool) -> dict[str, Any]:
    """A search result as `mdvdb search --json` gives it, less the fields a model rarely
    needs (metadata, title, cluster_id, excerpt_lines): the names are the CLI's."""
    out: dict[str, Any] = {
        "path": hit.path,
        "id": hit.id,
        "heading_path": hit.heading_path or [hit.heading],
        "start_line": hit.start_line,
        "end_line": hit.end_line,
        "score": round(hit.score, 4),
        "confidence": hit.confidence,
        "excerpt": hit.excerpt,
        "tier": tier,
    }
    _sourced(out, hit)
    if hit.also_in_count:
        # a model needs the count, and a few copies to open: never a footer's thousands
        if tier != "repeated":
            out["also_in"] = hit.also_in[:MCP_ALSO_IN_SHOWN]
        out["also_in_count"] = hit.also_in_count
    if full_text and hit.chunk_id >= 0:
        out["text"] = index.snapshot.table("chunks").column("text")[hit.chunk_id].as_py()
    if explain and hit.explain:
        out["explain"] = hit.explain
    return out


def _sourced(out: dict[str, Any], hit) -> dict[str, Any]:
    """`out` with the hit's named source, when the project names its sources."""
    if hit.source is not None:
        out["source"] = hit.source
    return out


def grep(
    config: Config,
    pattern: str,
    regex: bool = False,
    limit: int = DEFAULT_LIMIT,
    per_file_limit: int = 5,
    context: int = 0,
    sources: list[str] | None = None,
    file_type: str = "md",
    include_frontmatter: bool = False,
) -> dict[str, Any]:
    """`mdvdb grep --json` over the source folders, grouped by file, lines cut to size."""
    import tempfile

    from query import GrepOptions, Registry, rg_complaint, select_roots, start_grep

    if not pattern:
        raise ToolProblem("pattern is empty: give the text (or regex) to look for")
    if not 0 <= context <= MAX_CONTEXT:
        raise ToolProblem(f"context must be between 0 and {MAX_CONTEXT} lines")
    selection = select_roots(config, Registry.load(), sources=sources or ())
    # One match more than shown, per file and in all, says whether there are more (the
    # per-file count is of body matches: frontmatter ones are dropped before counting).
    options = GrepOptions(
        pattern=pattern,
        limit=sys.maxsize,  # `take` stops reading (and rg) one match past the limit
        per_file_limit=per_file_limit + 1,
        file_type=file_type,
        regex=regex,
        include_frontmatter=include_frontmatter,
    )
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: rg can never block on it
        run = start_grep(options, selection, config.root, config.page_id_field, stderr=errors)
        matches = iter(run)
        try:
            shown, more, fuller = take(matches, limit, per_file_limit)
        finally:
            matches.close()  # terminates rg if it is still running, and reaps it
        if run.failure is not None:  # rg killed: not an empty answer
            raise ToolProblem(run.failure)
        if run.returncode == 2 and not shown:
            errors.seek(0)
            said = errors.read().decode("utf-8", "replace")
            literal = "regex=false searches for the literal text"
            raise ToolProblem(rg_complaint(said, pattern, regex, literal))
    reply = grep_reply(config.root, pattern, shown, more, fuller, context, config.max_file_bytes)
    warnings = [*selection.warnings, *run.warnings]  # as ingest reports them
    warnings += [f"{path}: a matching line too long to show, left out" for path in run.long_lines]
    if warnings:  # source folders skipped or always-ignored, .gitignore files not read
        reply["warnings"] = warnings
    return reply


def take(matches, limit: int, per_file_limit: int) -> tuple[list, bool, set[str]]:
    """(up to `limit` matches, at most `per_file_limit` a file; whether any match is left out;
    the files that have more). Matches arrive grouped by file; reading stops at the first
    match past `limit`."""
    shown: list = []
    counts: dict[str, int] = {}
    fuller: set[str] = set()
    for match in matches:
        if counts.get(match.path, 0) >= per_file_limit:
            fuller.add(match.path)
            continue
        if len(shown) >= limit:
            return shown, True, fuller
        shown.append(match)
        counts[match.path] = counts.get(match.path, 0) + 1
    return shown, bool(fuller), fuller


def grep_reply(
    root: Path,
    pattern: str,
    matches: list,
    more: bool,
    fuller: set[str],
    context: int,
    max_bytes: int,
) -> dict[str, Any]:
    """The tool's answer; `context` lines are read from each matched file (`file_lines`)."""
    from query import grep_snippet as snippet

    files: list[dict[str, Any]] = []
    lines_of: dict[str, list[str]] = {}
    for match in matches:
        if not files or files[-1]["path"] != match.path:
            entry: dict[str, Any] = {"path": match.path, "title": match.head.title, "hits": []}
            if match.head.page_id:
                entry["page_id"] = match.head.page_id
            files.append(entry)
        hit: dict[str, Any] = {
            "line": match.line,
            "snippet": snippet(match.text, match.spans, False, GREP_LINE_CHARS),
        }
        if context:
            lines = lines_of.get(match.path)
            if lines is None:
                lines = lines_of[match.path] = file_lines(root, match.path, max_bytes)
            first = max(0, match.line - 1 - context)
            hit["before"] = [_cut(t) for t in lines[first : match.line - 1]]
            hit["after"] = [_cut(t) for t in lines[match.line : match.line + context]]
        files[-1]["hits"].append(hit)
    for entry in files:
        if entry["path"] in fuller:
            entry["more"] = True
    return {"pattern": pattern, "matches": len(matches), "more": more, "files": files}


def file_lines(root: Path, path: str, max_bytes: int) -> list[str]:
    """A matched file's lines as rg numbers them (split on newline only); none when it is
    no longer a regular file or is over `max_bytes` (never a FIFO, never unbounded)."""
    from kernel.safe_open import MAX_FILE_SETTING, open_regular, read_bounded

    target = Path(path) if Path(path).is_absolute() else root / path
    try:
        raw = read_bounded(open_regular(target, follow=True), max_bytes, MAX_FILE_SETTING)
    except OSError:
        return []
    return [line.rstrip("\r") for line in raw.decode("utf-8", "replace").split("\n")]


def _cut(text: str) -> str:
    return text if len(text) <= GREP_LINE_CHARS else text[: GREP_LINE_CHARS - 1] + "…"


def schema(index: Index, field: str | None = None) -> dict[str, Any]:
    """`mdvdb schema --json` (inferred fields merged with the overlay), compact; with `field`,
    that field and every value with its file count, as `mdvdb schema FIELD`."""
    from query import load_schema, overlay_is_stale, value_counts

    with index.pinned() as snapshot:
        merged = load_schema(snapshot)
        if not merged.present:
            raise ToolProblem("this index has no frontmatter schema yet: run ingest")
        data: dict[str, Any] = {}
        if overlay_is_stale(index):
            data["warning"] = (  # `mdvdb schema --json`'s, in the tool's words
                ".markdownvdb.schema.yml changed since the last ingest; run ingest to merge it"
            )
        if field is not None:
            info = merged.get(field)
            if info is None:
                known = ", ".join(merged.field_names()) or "(none)"
                raise ToolProblem(f"unknown field {field!r}; known: {known}")
            counts = value_counts(snapshot, info)
            data.update(compact_field(info))
            data["values"] = [[value, n] for value, n in counts[:FIELD_VALUES_SHOWN]]
            data["values_total"] = len(counts)
            return data
        data["files"] = int(snapshot.meta.get("files", 0))
        data["fields"] = [compact_field(info) for info in merged.fields.values()]
        if merged.overlay_error:
            data["overlay"] = {"error": merged.overlay_error}
        if merged.problems:
            data["problems"] = [
                {"path": p.path, "field": p.field, "problem": p.problem}
                for p in merged.problems[:PROBLEMS_SHOWN]
            ]
            data["problems_total"] = len(merged.problems)
        return data


def compact_field(info) -> dict[str, Any]:
    """A FieldInfo without the internal column name and without empty or default entries."""
    out: dict[str, Any] = {"name": info.name, "type": info.type, "files": info.files}
    out["distinct"] = info.distinct
    if info.type == "mixed" or info.type != info.inferred_type:
        out["type_counts"] = info.type_counts
    if info.values is not None:
        out["values"] = [[value, n] for value, n in info.values]
    if info.description:
        out["description"] = info.description
    if info.allowed is not None:
        out["allowed"] = info.allowed
    if info.required:
        out["required"] = True
    if info.declared:
        out["declared"] = True
    return out


def clusters(index: Index, cluster_id: int | None = None, limit: int = 100) -> dict[str, Any]:
    """`mdvdb clusters --json`; with `cluster_id`, that cluster's documents."""
    from query import cluster_members as members
    from query import list_clusters

    with index.pinned():
        listing = list_clusters(index)
        if cluster_id is None:
            data = listing.to_json()
            return {k: v for k, v in data.items() if v is not None}
        docs = members(index, cluster_id)
    cluster = next(c for c in listing.clusters if c.cluster_id == cluster_id)
    data = {
        "cluster_id": cluster.cluster_id,
        "label": cluster.label,
        "keywords": cluster.keywords,
        "size": len(docs),
        "files": [{"path": d.path, "title": d.title} for d in docs[:limit]],
    }
    if len(docs) > limit:
        data["shown"] = limit
    return data


def documents(
    index: Index,
    targets: list[str],
    start_line: int | None = None,
    end_line: int | None = None,
    max_tokens: int | None = None,
    offset: int = 0,
    content_only: bool = False,
) -> dict[str, Any]:
    """`mdvdb get --json`, compact: one document, or {"documents": [...]} for several."""
    ranged = start_line is not None or end_line is not None or offset > 0
    if ranged and len(targets) > 1:
        raise ToolProblem("start_line, end_line and offset read one document: give one")
    with index.pinned():
        if ranged:
            docs = [index.get_document(targets[0], start_line, end_line, max_tokens, offset)]
        else:
            docs = index.get_documents(targets, max_tokens)
    shown = [_document(doc, content_only) for doc in docs]
    return shown[0] if len(targets) == 1 and len(shown) == 1 else {"documents": shown}


def _document(doc, content_only: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"path": doc.path, "id": doc.id}
    if not content_only:
        data["title"] = doc.title
        data["metadata"] = doc.metadata
        data["sections"] = [  # `mdvdb get --json`'s, less each one's own heading
            {"heading_path": s.heading_path, "start_line": s.start_line, "end_line": s.end_line}
            for s in doc.sections
        ]
    data["content"] = doc.content
    data["start_line"], data["end_line"] = doc.start_line, doc.end_line
    data["total_lines"] = doc.total_lines
    if doc.next_offset is not None:
        data["next_offset"] = doc.next_offset
    return data


def links(index: Index, path: str, direction: str) -> dict[str, Any]:
    """`mdvdb links --json` or `mdvdb backlinks --json` (`direction`), empty fields left out."""
    with index.pinned():
        target = index.path_of(path)
        found = index.links(target) if direction == "links" else index.backlinks(target)
        data = [{k: v for k, v in link.to_json().items() if v not in ("", None)} for link in found]
        return {"path": target, "id": index.id_of(target), direction: data}


def orphans(index: Index, limit: int = 100) -> dict[str, Any]:
    """`mdvdb orphans --json`, at most `limit` paths (`total` counts them all)."""
    found = index.orphans()
    return {"orphans": found[:limit], "total": len(found)}


def status(config: Config, index: Index) -> dict[str, Any]:
    from pipeline import upgrade_progress, walk_files

    st = index.status()
    if st.exists:
        from query import new_files

        st.new_files = new_files(index.snapshot, config.root, walk_files(config, []))
    data = st.to_json()  # `mdvdb status --json`, its lists cut short (the *_total say how long)
    for name in ("stale_files", "new_files"):
        data[name] = data[name][:PATHS_SHOWN]
    data["errors"] = data["errors"][:PROBLEMS_SHOWN]
    if data["broken_links"] is not None:
        data["broken_links"] = data["broken_links"][:PROBLEMS_SHOWN]
    keep = ("exists", "fresh", "root", "files", "chunks", "provider", "model", "last_update")
    more = ("provider_mismatch", "stale_files", "stale_total", "new_files", "new_total")
    links = ("broken_links", "broken_links_total")
    shown = {k: data[k] for k in (*keep, *more, "errors", "errors_total", *links)}
    return {**shown, "upgrade": upgrade_progress(config) if st.exists else None}


def ingest(config: Config) -> dict[str, Any]:
    from pipeline import ingest_folder

    # The server's own watcher may be mid-ingest: wait for it rather than fail.
    data = ingest_folder(config, None).to_json()  # `mdvdb ingest --json`, fewer fields
    keep = ("files", "added", "changed", "removed", "unchanged", "chunks_embedded", "seconds")
    shown = {k: data[k] for k in (*keep, "errors", "errors_total")}
    return {**shown, "errors": data["errors"][:PROBLEMS_SHOWN]}
