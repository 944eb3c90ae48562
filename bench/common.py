"""Shared bits of the benchmark scripts: corpora, timing, machine info, table/JSON output."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MDVDB_SHARED_CORPORA", REPO.parent / "shared" / "corpora"))
WORK = Path(os.environ.get("MDVDB_BENCH_DIR", "/tmp/mdvdb-bench"))

ARCHIVES = {
    "tldr": "tldr.tar.gz",
    "leetcode": "leetcode.tar.gz",
    "powershell-docs": "powershell-docs.tar.gz",
    "edge-cases": "edge-cases.tar.gz",
    "nfcorpus": "beir-nfcorpus.tar.gz",
    "cranfield": "beir-cranfield.tar.gz",
}


def corpus(name: str) -> Path:
    """Unpack a shared corpus under WORK once; return its folder."""
    target = WORK / "corpora" / name
    if not target.exists():
        (WORK / "corpora").mkdir(parents=True, exist_ok=True)
        with tarfile.open(SHARED / ARCHIVES[name]) as tar:
            tar.extractall(WORK / "corpora", filter="data")
    return target


def ingested_tldr_args() -> tuple[argparse.Namespace, Path]:
    """`--root` (an ingested tldr; default: unpack and ingest one), `--runs`, `--json`: the
    arguments of the benches that time calls against a ready index."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=None, help="an ingested tldr folder")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = args.root or corpus("tldr")
    if not (root / ".markdownvdb.index").exists():
        subprocess.run(["mdvdb", "ingest", "--quiet", "--root", str(root)], check=True)
    return args, root


@contextlib.asynccontextmanager
async def mcp_session(root: Path):
    """An initialised MCP client session on a spawned `mdvdb mcp` serving `root`."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(root)]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def today() -> str:
    return time.strftime("%Y-%m-%d")


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p95_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))] * 1000


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)


def print_table(title: str, rows: list[dict], as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"title": title, "machine": machine(), "date": today(), "rows": rows}))
        return
    if not rows:
        print(f"{title}: no rows")
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in cols}
    print(f"\n{title}  ({machine()}, {today()})")
    print("| " + " | ".join(c.ljust(widths[c]) for c in cols) + " |")
    print("|" + "|".join("-" * (widths[c] + 2) for c in cols) + "|")
    for r in rows:
        print("| " + " | ".join(_fmt(r.get(c)).ljust(widths[c]) for c in cols) + " |")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return "" if value is None else str(value)
