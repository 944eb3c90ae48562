"""No-op and one-file edit of two installs, interleaved on two copies of one ingested folder.

A busy machine moves wall times by seconds; running the two installs one after the other,
round by round, and quoting the median of each and their ratio (and the CPU seconds, which
load inflates far less) is what makes a comparison honest there.

    python bench/incremental_ab.py --a /work/base-s5/.venv/bin/python --root-a COPY_A \\
        --b .venv/bin/python --root-b COPY_B [--rounds 5] [--json]

Each root must be an ingested folder (`cp -a` one after `mdvdb ingest`: the copies need the
same mtimes). The edit appends a line to the same file in both copies.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402


def ingest(python: str, root: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one `mdvdb ingest` process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "mdvdb", "ingest", "--root", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # Not this checkout: `python -m mdvdb` puts the working folder first on sys.path, so
        # run from a repository, install A would run that repository's code.
        cwd="/",
    )
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{python} ingest {root} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def pick_file(root: Path) -> Path:
    for path in sorted(root.rglob("*.md")):
        if ".markdownvdb" not in str(path):
            return path
    raise SystemExit(f"{root}: no Markdown file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="python of install A (the reference)")
    parser.add_argument("--b", required=True, help="python of install B")
    parser.add_argument("--root-a", type=Path, required=True)
    parser.add_argument("--root-b", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # The children run from `/`: a relative interpreter path is taken from here.
    a, b = (os.path.abspath(p) if os.sep in p else p for p in (args.a, args.b))
    sides = {"A": (a, args.root_a.resolve()), "B": (b, args.root_b.resolve())}
    for python, root in sides.values():
        ingest(python, root)  # settle (a copy's first run may republish)
    rel = pick_file(args.root_a).relative_to(args.root_a)
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    loads = []
    for step in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for name, (python, root) in sides.items():
            samples.setdefault((name, "no-op"), []).append(ingest(python, root))
        for name, (python, root) in sides.items():
            with open(root / rel, "a") as fh:
                fh.write(f"\nEdited line {step}.\n")
            samples.setdefault((name, "1-file edit"), []).append(ingest(python, root))
    rows = []
    for run in ("no-op", "1-file edit"):
        a = samples[("A", run)]
        b = samples[("B", run)]
        wall_a, wall_b = (statistics.median(w for w, _ in s) for s in (a, b))
        cpu_a, cpu_b = (statistics.median(c for _, c in s) for s in (a, b))
        rows.append(
            {
                "run": run,
                "A wall s": wall_a,
                "B wall s": wall_b,
                "B/A wall": wall_b / wall_a,
                "A CPU s": cpu_a,
                "B CPU s": cpu_b,
                "B/A CPU": cpu_b / cpu_a,
                "load": round(statistics.median(loads), 1),
            }
        )
    title = f"incremental ingest A/B, {args.rounds} rounds, {args.root_a.name}"
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
