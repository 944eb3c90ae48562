"""Where a cold `mdvdb search` spends its time, and what the warm paths cost, on tldr.

Phases are timed inside a fresh interpreter per run (imports, config, index mapping, model
load: tokenizer and table, query embedding + scoring, CLI formatting); `interpreter` is the
wall time of `python -c pass`. End to end: `mdvdb search` cold (MDVDB_NO_WARM=1), the same
through a warm `mdvdb serve`, and an MCP `search` tool call on a live session. The
`table (safetensors)` row is the fp16 load the float32 `.npy` cache replaces.

    python bench/cold_start.py [--runs 7] [--json]   # needs an ingested tldr (see --root)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import corpus, median_ms, print_table, run  # noqa: E402

QUERY = "extract a tar archive"

PHASES = r"""
import json, sys, time
t = time.perf_counter
marks = {}
s = t(); import typer, typer.main; from mdvdb.cli import core; marks["import typer+cli"] = t() - s
s = t(); import numpy; marks["import numpy"] = t() - s
s = t(); import pyarrow; marks["import pyarrow"] = t() - s
s = t(); from mdvdb.config import load_config; cfg = load_config(sys.argv[1])
marks["config"] = t() - s
s = t(); from query import open_index; ix = open_index(config=cfg); ix.snapshot
marks["map index"] = t() - s
s = t(); from mdvdb.providers import local; tok = local.load_tokenizer()
marks["tokenizer json"] = t() - s
s = t(); local._read_safetensors(local.weights_path()); marks["table (safetensors)"] = t() - s
s = t(); local.load_table(cfg.state_path); marks["table (npy cache)"] = t() - s
s = t(); r = ix.search(sys.argv[2], limit=10); marks["embed+score+results"] = t() - s
s = t(); r = ix.search(sys.argv[2], limit=10); marks["search again (warm)"] = t() - s
print(json.dumps(marks))
"""


def cli(root: Path, warm: bool) -> float:
    env = {**os.environ, "MDVDB_NO_WARM": "" if warm else "1"}
    start = time.perf_counter()
    done = run(["mdvdb", "search", QUERY, "--root", str(root)], env=env)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - start


async def mcp_calls(root: Path, runs: int) -> list[float]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(root)]
    )
    samples = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("search", {"query": QUERY})
        for _ in range(runs):
            start = time.perf_counter()
            await session.call_tool("search", {"query": QUERY})
            samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=None, help="an ingested tldr folder")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = args.root or corpus("tldr")
    if not (root / ".markdownvdb.index").exists():
        subprocess.run(["mdvdb", "ingest", "--quiet", "--root", str(root)], check=True)

    phases: dict[str, list[float]] = {}
    interp = []
    for _ in range(args.runs):
        start = time.perf_counter()
        run([sys.executable, "-c", "pass"])
        interp.append(time.perf_counter() - start)
        done = run([sys.executable, "-c", PHASES, str(root), QUERY])
        assert done.returncode == 0, done.stderr
        for name, seconds in json.loads(done.stdout).items():
            phases.setdefault(name, []).append(seconds)
    rows = [{"phase": "interpreter (python -c pass)", "median_ms": median_ms(interp)}]
    rows += [{"phase": k, "median_ms": median_ms(v)} for k, v in phases.items()]
    print_table("cold search, by phase (fresh interpreter each run)", rows, args.json)

    cold = [cli(root, warm=False) for _ in range(args.runs)]
    server = subprocess.Popen(
        ["mdvdb", "serve", "--idle-timeout", "60", "--root", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        sock = root / ".markdownvdb.state" / "serve.sock"
        while not sock.exists():
            time.sleep(0.05)
        cli(root, warm=True)
        warm = [cli(root, warm=True) for _ in range(args.runs)]
    finally:
        server.terminate()
        server.wait()
    mcp = asyncio.run(mcp_calls(root, args.runs * 3))
    ends = [
        {"path": "mdvdb search, cold (MDVDB_NO_WARM=1)", "median_ms": median_ms(cold)},
        {"path": "mdvdb search via warm mdvdb serve", "median_ms": median_ms(warm)},
        {"path": "python -c pass (floor for any CLI call)", "median_ms": median_ms(interp)},
        {"path": "MCP search tool call (live session)", "median_ms": median_ms(mcp)},
    ]
    print_table("end to end, tldr", ends, args.json)


if __name__ == "__main__":
    main()
