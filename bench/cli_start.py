"""CPU of one `mdvdb` process per command, this checkout against another install, in one run.

The test suite and agents start `mdvdb` for one short command at a time (an ingest of a few
pages, a status, a search, a grep...): their cost is mostly the process's start (imports,
one-time setup), not the work. This runs each command through both installs' `python -m
mdvdb` in turn (ABAB..., then BABA...) on the same small folder and reports the median CPU
(user + sys of the child) and wall per command, and their ratio. Each side has its own copy of
the folder (an ingest writes into it), indexed once by that side before the rounds. A no-op
ingest finds nothing changed; `ingest-4` indexes a fresh 4-page copy each round. No warm
server (MDVDB_NO_WARM=1); the per-user caches are each side's own temp folder, kept for the run.
Compile the bytecode of both installs first (`python -m compileall`).

    python bench/cli_start.py --ref /work/base-s9 [--rounds 7] [--only ingest,status] [--json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import print_table  # noqa: E402

# name -> argv after `mdvdb`, ROOT standing for the side's indexed folder and NEW for a fresh copy
COMMANDS = {
    "version": ["--version"],
    "help": ["--help"],
    "ingest-noop": ["ingest", "--root", "ROOT"],
    "ingest-4": ["ingest", "--root", "NEW"],
    "ingest-json": ["ingest", "--json", "--root", "ROOT"],
    "status": ["status", "--root", "ROOT"],
    "status-check": ["status", "--check", "--root", "ROOT"],
    "status-verify": ["status", "--verify", "--root", "ROOT"],
    "search": ["search", "tar", "--root", "ROOT"],
    "search-json": ["search", "tar", "--json", "--root", "ROOT"],
    "grep": ["grep", "tar", "--root", "ROOT"],
    "get": ["get", "tar.md", "--root", "ROOT"],
    "schema": ["schema", "--root", "ROOT"],
    "clusters": ["clusters", "--root", "ROOT"],
    "serve-status": ["serve", "--status", "--root", "ROOT"],
}


def run_one(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int, bytes]:
    """(wall s, CPU s of the child, exit code, stdout) of one process, started in `cwd` (a
    neutral folder: `python -m mdvdb` imports from the current folder first)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stdout


def _comparable(out: bytes) -> bytes:
    """The output without what differs between two runs of the same command: an ingest's
    timings and the index's write time."""
    import re

    out = re.sub(rb"[0-9]+\.[0-9]+ s\b", b"T s", out)
    keys = rb"seconds|cpu_seconds|written_at|last_update|cpu_per_wall|chunks_per_second"
    out = re.sub(rb'"(' + keys + rb')": [0-9.e-]+', rb'"\1": T', out)
    out = re.sub(rb'"stage_(seconds|cpu_seconds)": \{[^}]*\}', rb'"stage_\1": T', out)
    return re.sub(rb"updated: +[0-9: -]+", b"updated: T", out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True, help="another checkout with a .venv")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default="", help="comma-separated command names")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = [n for n in COMMANDS if not args.only or n in args.only.split(",")]
    work = Path(tempfile.mkdtemp(prefix="mdvdb-cli-start-"))
    sides = {"this": REPO, "ref": args.ref.resolve()}
    envs, roots = {}, {}
    for side, checkout in sides.items():
        env = {**os.environ, "MDVDB_NO_WARM": "1", "MDVDB_CACHE_DIR": str(work / side / "cache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        envs[side] = env
        roots[side] = work / side / "notes"
        shutil.copytree(REPO / "tests" / "fixtures" / "notes", roots[side])
        python = str(checkout / ".venv" / "bin" / "python")
        subprocess.run(
            [python, "-m", "mdvdb", "ingest", "--root", str(roots[side])],
            env=env,
            check=True,
            capture_output=True,
        )
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    outputs: dict[tuple[str, str], bytes] = {}
    fresh = 0
    for r in range(args.rounds):
        order = ["this", "ref"] if r % 2 == 0 else ["ref", "this"]
        for name in names:
            for side in order:
                python = str(sides[side] / ".venv" / "bin" / "python")
                argv = []
                for a in COMMANDS[name]:
                    if a == "ROOT":
                        a = str(roots[side])
                    elif a == "NEW":
                        fresh += 1
                        a = str(work / side / f"new{fresh}")
                        shutil.copytree(REPO / "tests" / "fixtures" / "notes", a)
                    argv.append(a)
                wall, cpu, code, out = run_one([python, "-m", "mdvdb", *argv], envs[side], work)
                samples.setdefault((name, side), []).append((wall, cpu))
                outputs[(name, side)] = _comparable(out.replace(str(work / side).encode(), b"W"))
    rows = []
    for name in names:
        row = {"command": name}
        for side in sides:
            walls, cpus = zip(*samples[(name, side)], strict=True)
            row[f"{side}_cpu_ms"] = round(statistics.median(cpus) * 1000)
            row[f"{side}_wall_ms"] = round(statistics.median(walls) * 1000)
        row["cpu_ratio"] = round(row["this_cpu_ms"] / max(row["ref_cpu_ms"], 1), 2)
        row["same_output"] = outputs[(name, "this")] == outputs[(name, "ref")]
        rows.append(row)
    total = {"command": "TOTAL"}
    for key in ("this_cpu_ms", "ref_cpu_ms", "this_wall_ms", "ref_wall_ms"):
        total[key] = sum(r[key] for r in rows)
    total["cpu_ratio"] = round(total["this_cpu_ms"] / max(total["ref_cpu_ms"], 1), 2)
    total["same_output"] = all(r["same_output"] for r in rows)
    rows.append(total)
    shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    title = f"mdvdb start per command (load {load:.2f}, {args.rounds} rounds, medians)"
    print_table(title, rows, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
