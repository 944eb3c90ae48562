"""Cold `mdvdb search` of this checkout against another install, alternating, in one run.

Absolute times on a shared machine say little, so this runs the `mdvdb` executables in turn
(ABAB..., then BABA...) on the same index and reports the medians (wall and CPU: user + sys
of the child) and their ratio to the other install. No warm server is used
(MDVDB_NO_WARM=1). Compile the bytecode of both installs first (`python -m compileall`):
with PYTHONDONTWRITEBYTECODE set, an install without .pyc files pays the compiler on every
start (2x here).

    python bench/cold_ab.py --against OTHER/.venv/bin/mdvdb --root TLDR [--runs 20] [--json]
    python bench/cold_ab.py --against OTHER/.venv/bin/mdvdb --root TLDR --mix --runs 40
    python bench/cold_ab.py --against OTHER/.venv/bin/mdvdb --root TLDR --against-root TLDR2

`--against-root`: the other install reads its own ingested copy of the folder (an install
that reads an older index format); its answers then differ at least by the root's name.

`--mix`: the query mix of `bench/query.py`'s cold rows, as a user meets it: run i searches
`bench.query.QUERIES[i % 12]` with `--json` and the default limit (10 results), a fresh
`mdvdb search` process each time; the goal of issue 18 (<= 200 ms on tldr) is the median
of the first row. Without it: one query (`--query`, default "extract a tar archive", `-n 3`).

Reference rows run in the same rotation: this checkout through `python -m mdvdb` (what
bench/query.py runs), and `python -c "import numpy"` and `python -c "import numpy, pyarrow"`
in this checkout's interpreter (the floors a NumPy-based search pays). Every
command of this checkout must print the same bytes for the same query, or the run fails;
whether the other install answers the same is reported (an install with other ranking code
may legitimately differ).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import print_table  # noqa: E402

QUERY = "extract a tar archive"


def run_one(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, bytes, bytes]:
    """(wall s, CPU s: user + sys of the child, exit code, stdout, stderr) of one process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stdout, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other install's mdvdb executable")
    parser.add_argument("--root", required=True, help="an ingested project folder")
    parser.add_argument(
        "--against-root",
        help="the other install's copy of the folder, ingested by it (an older index format)",
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--mix", action="store_true", help="bench/query.py's cold query mix")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    here = shutil.which("mdvdb", path=str(Path(sys.executable).parent)) or "mdvdb"
    if args.mix:
        from bench.query import QUERIES

        queries = list(QUERIES)
    else:
        queries = [args.query]

    def search(q: str, root: str = args.root) -> list[str]:
        tail = ["--json"] if args.mix else ["-n", "3"]
        return ["search", q, "--root", root, *tail]

    env = {**os.environ, "MDVDB_NO_WARM": "1"}
    commands = {
        "this checkout": (lambda q: [here, *search(q)], env),
        "other install": (
            lambda q: [args.against, *search(q, args.against_root or args.root)],
            env,
        ),
        "this checkout, python -m mdvdb": (
            lambda q: [sys.executable, "-m", "mdvdb", *search(q)],
            env,
        ),
        'python -c "import numpy"': (lambda q: [sys.executable, "-c", "import numpy"], env),
        'python -c "import numpy, pyarrow"': (
            lambda q: [sys.executable, "-c", "import numpy, pyarrow"],
            env,
        ),
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    answers: dict[tuple[str, str], set[bytes]] = {}  # (command, query) -> distinct stdouts
    loads = [os.getloadavg()[0]]
    for i in range(args.runs):
        q = queries[i % len(queries)]
        order = list(commands) if i % 2 == 0 else list(commands)[::-1]
        for name in order:
            make, environ = commands[name]
            argv = make(q)
            wall, cpu, code, out, err = run_one(argv, environ)
            walls[name].append(wall)
            cpus[name].append(cpu)
            if code != 0:
                sys.exit(f"{name}: {err.decode(errors='replace').strip()}")
            if "search" in argv:
                answers.setdefault((name, q), set()).add(out)
        loads.append(os.getloadavg()[0])
    ours = [n for n in commands if n.startswith("this checkout")]
    for q in queries:
        seen = set().union(*(answers.get((n, q), set()) for n in ours))
        if len(seen) > 1:
            sys.exit(f"this checkout's commands answered {q!r} differently")
    same = all(
        answers.get(("other install", q)) == answers.get(("this checkout", q)) for q in queries
    )
    base = statistics.median(walls["other install"])
    base_cpu = statistics.median(cpus["other install"])
    rows = [
        {
            "command": name,
            "median ms": round(statistics.median(walls[name]) * 1000, 1),
            "min ms": round(min(walls[name]) * 1000, 1),
            "vs other": round(statistics.median(walls[name]) / base, 3),
            "CPU ms": round(statistics.median(cpus[name]) * 1000, 1),
            "CPU vs other": round(statistics.median(cpus[name]) / base_cpu, 3),
        }
        for name in commands
    ]
    what = f"{len(queries)} queries of bench/query.py, --json" if args.mix else repr(args.query)
    title = (
        f"cold mdvdb search ({what}), {args.runs} alternating runs, load "
        f"{min(loads):.1f}-{max(loads):.1f}; the other install's answers are "
        f"{'the same' if same else 'different'}"
    )
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
