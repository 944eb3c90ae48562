"""MCP tool calls on a live session against the same command run cold on the CLI, on tldr.

    python bench/mcp_tools.py [--root <ingested tldr>] [--runs 7] [--json]

One `mdvdb mcp` session answers every call (after one warm-up call per case); the CLI column
is the equivalent `mdvdb ... --json` in a fresh process with the warm path off
(MDVDB_NO_WARM=1), the alternative an agent without MCP pays per call. The two are
interleaved case by case so machine load hits both alike. `reply_bytes` is the size of the
MCP answer's text, what a model reads, against the CLI's JSON output.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import ingested_tldr_args, mcp_session, median_ms, print_table, run  # noqa: E402

# (case, tool, arguments, the same on the command line)
CASES = [
    (
        "search",
        "search",
        {"query": "extract a tar archive", "limit": 10},
        ["search", "extract a tar archive", "-n", "10"],
    ),
    (
        "search, title tier",
        "search",
        {"query": "tar", "limit": 10},
        ["search", "tar", "-n", "10"],
    ),
    (
        "search --files",
        "search",
        {"query": "extract a tar archive", "limit": 10, "files_only": True},
        ["search", "extract a tar archive", "-n", "10", "--files"],
    ),
    (
        "grep literal, common (tar)",
        "grep",
        {"pattern": "tar", "limit": 20},
        ["grep", "tar", "-n", "20"],
    ),
    (
        "grep regex, rare (9 lines)",
        "grep",
        {"pattern": r"\bchroot --userspec", "regex": True, "limit": 20},
        ["grep", r"\bchroot --userspec", "--regex", "-n", "20"],
    ),
    ("schema", "schema", {}, ["schema"]),
    ("clusters", "clusters", {}, ["clusters"]),
]


def cli(root: Path, argv: list[str]) -> tuple[float, int]:
    env = {**os.environ, "MDVDB_NO_WARM": "1"}
    start = time.perf_counter()
    done = run(["mdvdb", *argv, "--json", "--root", str(root)], env=env)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    return elapsed, len(done.stdout.encode())


async def measure(root: Path, runs: int) -> list[dict]:
    rows = []
    async with mcp_session(root) as session:
        for case, tool, arguments, argv in CASES:
            first = await session.call_tool(tool, arguments)
            assert not first.is_error, first.content
            mcp, shell, cli_bytes = [], [], 0
            for _ in range(runs):
                start = time.perf_counter()
                await session.call_tool(tool, arguments)
                mcp.append(time.perf_counter() - start)
                seconds, cli_bytes = await asyncio.to_thread(cli, root, argv)
                shell.append(seconds)
            rows.append(
                {
                    "case": case,
                    "mcp_ms": round(median_ms(mcp), 2),
                    "cli_cold_ms": round(median_ms(shell), 1),
                    "ratio": round(median_ms(shell) / median_ms(mcp), 1),
                    "reply_bytes": len(first.content[0].text.encode()),
                    "cli_json_bytes": cli_bytes,
                }
            )
    return rows


def main() -> None:
    args, root = ingested_tldr_args()
    rows = asyncio.run(measure(root, args.runs))
    print_table("MCP tool call (live session) vs the CLI command cold, tldr", rows, args.json)


if __name__ == "__main__":
    main()
