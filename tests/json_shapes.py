"""The documented JSON (docs/json.md, docs/json-schema/mdvdb.schema.json) checked against
what the commands and tools print: `tests.conftest.run_cli` checks every `--json` output a
test produces, the MCP tests check every tool result, and tests/test_json_schema.py runs each
command once on purpose. jsonschema (a test dependency) is imported on first use only.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "docs" / "json-schema" / "mdvdb.schema.json"

# Options that take a value: what follows them is no positional argument.
VALUED = {
    "--root",
    "-n",
    "--limit",
    "--min-score",
    "--max-tokens",
    "--mode",
    "--filter",
    "--tag",
    "--category",
    "--cluster",
    "--per-file",
    "--path",
    "--since",
    "--before",
    "--date-field",
    "--decay",
    "--plot",
    "--executor",
    "--source",
    "--include",
    "--exclude",
    "--context",
    "-C",
    "--type",
    "--color",
    "--per-file-limit",
    "--idle-timeout",
    "--offset",
}


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@cache
def validator(name: str):
    from jsonschema import Draft202012Validator

    document = schema()
    assert name in document["$defs"], f"docs/json-schema has no {name!r}"
    return Draft202012Validator({"$defs": document["$defs"], "$ref": f"#/$defs/{name}"})


def check(data: Any, name: str) -> None:
    """Fail naming every place where `data` is not the documented shape `name`."""
    errors = sorted(validator(name).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [line for e in errors for line in _why(e)]
        raise AssertionError(f"not the documented {name!r} (docs/json.md):\n" + "\n".join(lines))


def _why(error) -> list[str]:
    """An error's lines: for a document that fits none of a oneOf's shapes, why it fails the
    shape it comes closest to (the one with the fewest errors)."""
    where = "/".join(map(str, error.absolute_path)) or "(top)"
    if not error.context:
        return [f"  at {where}: {error.message[:300]}"]
    branches: dict[int, list] = {}
    for sub in error.context:
        branches.setdefault(sub.schema_path[0], []).append(sub)
    closest = min(branches.values(), key=len)
    return [line for sub in closest for line in _why(sub)][:20]


def cli_shape(args: tuple[str, ...]) -> str | None:
    """The schema's name for what `mdvdb ARGS --json` prints; None when it prints no JSON
    document (no --json, --help, a command without JSON output)."""
    if "--json" not in args or "--help" in args or not args or args[0].startswith("-"):
        return None
    command, rest = args[0], list(args[1:])
    positional = [
        a
        for i, a in enumerate(rest)
        if not a.startswith("-") and (i == 0 or rest[i - 1] not in VALUED)
    ]
    if command == "status":
        return (
            "status_check"
            if "--check" in rest
            else "status_verify"
            if "--verify" in rest
            else "status"
        )
    if command == "schema":
        return "schema_check" if "--check" in rest else "schema_field" if positional else "schema"
    if command == "serve":
        return "serve_status" if "--status" in rest else None
    if command == "ingest" and "--dry-run" in rest:
        return "ingest_dry_run"
    if command == "models":
        action = positional[0] if positional else "list"
        return {"install": "models_install", "verify": "models_verify"}.get(action, "models")
    return {
        "search": "search",
        "get": "get",
        "links": "links",
        "backlinks": "backlinks",
        "orphans": "orphans",
        "clusters": "clusters",
        "grep": "grep_line",
        "ingest": "ingest",
        "doctor": "doctor",
    }.get(command)


def check_cli(args: tuple[str, ...], returncode: int, stdout: str) -> None:
    """What run_cli saw: a command that printed its JSON is checked against the schema (an
    error, said on stderr with nothing on stdout, is not JSON)."""
    name = cli_shape(args)
    if name is None or not stdout.strip():
        return
    if name == "grep_line":
        for line in stdout.splitlines():
            if line.strip():
                record = json.loads(line)
                check(record, name)
        return
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        if returncode == 0:
            raise AssertionError(
                f"mdvdb {' '.join(args)} printed no JSON:\n{stdout[:500]}"
            ) from None
        return
    check(data, name)


def check_tool(tool: str, result: Any) -> Any:
    """An MCP tool's result (a CallToolResult) against the schema: its structured content
    is the documented shape and its text the same JSON. Tool errors carry no JSON."""
    if getattr(result, "is_error", False) or getattr(result, "isError", False):
        return result
    data = result.structured_content
    check(data, f"mcp_{tool}")
    assert json.loads(result.content[0].text) == data
    return result


async def call_tool(session: Any, tool: str, arguments: dict[str, Any]) -> Any:
    """`session.call_tool`, its result checked (`check_tool`): what the MCP tests call."""
    return check_tool(tool, await session.call_tool(tool, arguments))
