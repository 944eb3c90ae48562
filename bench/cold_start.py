"""Where a cold `mdvdb search` spends its time, and what the warm paths cost, on tldr.

Phases are timed inside a fresh interpreter per run (imports, config, index mapping, model
load, title tiers, scoring); `interpreter` is the wall time of `python -c pass`. End to end:
`mdvdb search` cold (MDVDB_NO_WARM=1), the same command through typer (the path before the
hand parser), through a warm `mdvdb serve`, and an MCP `search` tool call on a live session.
Figures depend on the install: an editable install adds ~13 ms to every interpreter start
(its import hook), so quote a regular `pip install .`.

    python bench/cold_start.py [--runs 7] [--json]   # needs an ingested tldr (see --root)
    python bench/cold_start.py --root TLDR_MINILM     # a tldr copy whose .markdownvdb says
                                                      # MDVDB_EMBEDDING_MODEL=all-minilm-l6-v2
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import ingested_tldr_args, mcp_session, median_ms, print_table, run  # noqa: E402

QUERY = "extract a tar archive"

PHASES = r"""
import io, json, sys, time
from contextlib import redirect_stdout
t = time.perf_counter
marks = {}
root, query = sys.argv[1], sys.argv[2]
s = t(); from mdvdb.cli import search as cli; marks["import CLI (hand parser, no typer)"] = t() - s
s = t(); import numpy; marks["import numpy"] = t() - s
s = t(); import pyarrow; marks["import pyarrow"] = t() - s
s = t(); from mdvdb.cli.errors import load; cfg = load(root); marks["config"] = t() - s
s = t(); from query import open_index; ix = open_index(config=cfg); ix.snapshot
marks["import query + map index"] = t() - s
s = t(); from query.rank import tiers, titles; titles._lowered(ix.snapshot)
marks["title tier: lower titles + headings"] = t() - s
s = t(); from query.score.lexical import lexical_index; lexical_index(ix)
marks["lexical postings (views)"] = t() - s
s = t(); from query.rank.search import query_vector; query_vector(ix, query)
marks["model (BPE lookup, table / encoder weights) + embed"] = t() - s
s = t(); tiers.tiered_search(ix, query, limit=20); marks["score + rank (hybrid, 2 tiers)"] = t() - s
s = t()
with redirect_stdout(io.StringIO()):
    cli.run_search(cfg, False, {"query": query})
marks["whole search again, warm"] = t() - s
print(json.dumps(marks))
"""

# The typer path a cold search took before it got its own parser (and still takes for
# `--help` and usage errors): import typer, register every command, parse, run.
TYPER = r"""
import sys
from mdvdb.cli import COMMAND_MODULES
import importlib
from mdvdb.cli.app import app
for name in COMMAND_MODULES:
    module = importlib.import_module(name)
    if hasattr(module, "register"):
        module.register(app)
app(["search", *sys.argv[1:]])
"""


def cli(root: Path, warm: bool) -> float:
    env = {**os.environ, "MDVDB_NO_WARM": "" if warm else "1"}
    start = time.perf_counter()
    done = run(["mdvdb", "search", QUERY, "--root", str(root)], env=env)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - start


async def mcp_calls(root: Path, runs: int) -> list[float]:
    samples = []
    async with mcp_session(root) as session:
        await session.call_tool("search", {"query": QUERY})
        for _ in range(runs):
            start = time.perf_counter()
            await session.call_tool("search", {"query": QUERY})
            samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    args, root = ingested_tldr_args()

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
    typer_path = []
    for _ in range(args.runs):
        start = time.perf_counter()
        done = run([sys.executable, "-c", TYPER, QUERY, "--root", str(root)])
        assert done.returncode == 0, done.stderr
        typer_path.append(time.perf_counter() - start)
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
        {"path": "the same through typer (the path before)", "median_ms": median_ms(typer_path)},
        {"path": "mdvdb search via warm mdvdb serve", "median_ms": median_ms(warm)},
        {"path": "python -c pass (floor for any CLI call)", "median_ms": median_ms(interp)},
        {"path": "MCP search tool call (live session)", "median_ms": median_ms(mcp)},
    ]
    print_table("end to end, tldr", ends, args.json)


if __name__ == "__main__":
    main()
