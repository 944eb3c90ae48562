"""The inner test loop's cost: wall, CPU-seconds (pytest, its workers and every `mdvdb` process
they waited for) and each xdist worker's share, for this checkout and, in the same run, for
another checkout of the project (`--ref`, e.g. main before a change) with its own venv.

    python bench/inner_loop.py [--workers 2] [--ref /path/to/other/checkout] [--rounds 2] [--json]
    python bench/inner_loop.py tests/test_config.py     # the same for some files only
    python bench/inner_loop.py --files 20               # and the 20 costliest test files

`--files N` adds a table of the test files that cost the most CPU-seconds (their tests' own
and their subprocesses', from the CPU list tests/conftest.py prints at the end of a run),
per checkout and round: where the loop's time goes, and what to cut next.

With --ref and --rounds N, the two checkouts alternate (this one first in odd rounds, the
other first in even ones), so a load that changes during the run falls on both; a last row
per checkout gives its median, and "ratio" is this checkout's CPU-s over the other's in the
same round (the figure a loaded machine still gives). "workers_end" is when each worker's last
test ended, counted from the first test's start (tests/conftest.py prints it): a worker that
ends seconds before the other left a core idle that long.

The goal (README, "Tests"): under 60 s wall with two workers on an idle 2-core machine. On a
loaded machine the wall says little; the CPU-seconds say what the loop costs (<= ~95 CPU-s, no
worker over ~50 s, is under 60 s when nothing else runs). Each checkout runs once after an
untimed collection, so that pytest's cache of rewritten test modules is warm as in daily use.
Every run loads the machine for a minute or more: run it rarely.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MARK = "not slow and not corpus"


def _python(checkout: Path) -> str:
    venv = checkout / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def measure(checkout: Path, workers: int, files: list[str], by_file: int = 0) -> dict:
    python = _python(checkout)
    base = [python, "-m", "pytest", "-q", "-m", MARK, "-p", "no:cacheprovider", *files]
    subprocess.run([*base, "--collect-only"], cwd=checkout, capture_output=True, check=False)
    env = {**os.environ, "MDVDB_TEST_CPU_SHOWN": "100000"} if by_file else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(
        [*base, "-n", str(workers)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    out = done.stdout
    summary = re.findall(r"(\d+) (passed|failed|error)", out)
    workers_cpu = re.search(r"^by worker: (.*)$", out, re.M)
    workers_end = re.search(r"^last test ended \(after the first began\): (.*)$", out, re.M)
    costliest = per_file(out)[:by_file] if by_file else []
    return {
        "checkout": str(checkout),
        "exit": done.returncode,
        "tests": ", ".join(f"{n} {what}" for n, what in summary),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "tests_cpu_s": _number(re.search(r"CPU: (\d+) s in all", out)),
        "by_worker": workers_cpu.group(1) if workers_cpu else "",
        "workers_end": workers_end.group(1) if workers_end else "",
        "load_before": round(load, 1),
        "load_after": round(os.getloadavg()[0], 1),
        **({"files": costliest} if by_file else {}),
    }


def per_file(out: str) -> list[tuple[str, int, float]]:
    """(file, tests, CPU-s) from the end-of-run CPU list, costliest first."""
    listed = out.split(" s in all, the ", 1)[-1].split("\n=", 1)[0]
    found: dict[str, list[float]] = {}
    for cpu, nodeid in re.findall(r"^\s*([\d.]+) s  (tests/\S+)", listed, re.M):
        found.setdefault(nodeid.split("::", 1)[0], []).append(float(cpu))
    rows = [(name, len(cpus), round(sum(cpus), 1)) for name, cpus in found.items()]
    return sorted(rows, key=lambda row: -row[2])


def _number(found: re.Match | None) -> float | None:
    return float(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ref", type=Path, help="another checkout, measured in the same run")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds with --ref")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--files", type=int, default=0, help="list the N costliest test files")
    parser.add_argument("paths", nargs="*", help="test files (default: the whole inner loop)")
    args = parser.parse_args()
    if not args.ref:
        rows = [measure(REPO, args.workers, args.paths, args.files) for _ in range(args.rounds)]
    else:
        rows = []
        for round_ in range(1, args.rounds + 1):
            order = [REPO, args.ref.resolve()] if round_ % 2 else [args.ref.resolve(), REPO]
            done = {c: measure(c, args.workers, args.paths, args.files) for c in order}
            ours, theirs = done[REPO], done[args.ref.resolve()]
            ours["ratio"] = round(ours["cpu_s"] / theirs["cpu_s"], 3) if theirs["cpu_s"] else None
            rows += [{"round": round_, **ours}, {"round": round_, **theirs}]
        if args.rounds > 1:
            for checkout in (str(REPO), str(args.ref.resolve())):
                mine = [r for r in rows if r["checkout"] == checkout and "wall_s" in r]
                rows.append(
                    {
                        "round": "median",
                        "checkout": checkout,
                        **{k: statistics.median(r[k] for r in mine) for k in ("wall_s", "cpu_s")},
                        **(
                            {"ratio": statistics.median(r["ratio"] for r in mine)}
                            if checkout == str(REPO)
                            else {}
                        ),
                    }
                )
    listed = [(r.pop("files"), r) for r in rows if "files" in r]
    print_table(f'pytest -m "{MARK}" -n {args.workers}', rows, as_json=args.json)
    for files, row in listed:
        table = [{"file": name, "tests": n, "cpu_s": cpu} for name, n, cpu in files]
        title = f"costliest files: {row['checkout']} (round {row.get('round', 1)})"
        print_table(title, table, as_json=args.json)


if __name__ == "__main__":
    main()
