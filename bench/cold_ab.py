"""Cold `mdvdb search` of this checkout against another install, alternating, in one run.

A layout change (the kernel moving out of mdvdb/, the public fronts of pipeline/ and query/)
must not make the cold path slower; absolute times on a shared machine say little, so this
runs the two `mdvdb` executables in turn (ABAB..., then BABA...) on the same index and
reports the medians and their ratio. No warm server is used (MDVDB_NO_WARM=1). Compile the
bytecode of both installs first (`python -m compileall`): with PYTHONDONTWRITEBYTECODE set,
an install without .pyc files pays the compiler on every start (2x here).

    python bench/cold_ab.py --against OTHER/.venv/bin/mdvdb --root NOTES [--runs 20] [--json]

Two reference rows run in the same rotation: this checkout with MDVDB_ARROW_READER=1 (the
index read through pyarrow, as before the lite reader) and `python -c "import numpy"` in this
checkout's interpreter (the floor any NumPy-based search pays). The two readers of this
checkout must print the same bytes, or the run fails; whether the other install answers the
same is reported (an install with other ranking code may legitimately differ).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other install's mdvdb executable")
    parser.add_argument("--root", required=True, help="an ingested project folder")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    here = shutil.which("mdvdb", path=str(Path(sys.executable).parent)) or "mdvdb"
    search = ["search", args.query, "--root", args.root, "-n", "3"]
    env = {**os.environ, "MDVDB_NO_WARM": "1"}
    env.pop("MDVDB_ARROW_READER", None)
    commands = {
        "this checkout": ([here, *search], env),
        "other install": ([args.against, *search], env),
        "this checkout, pyarrow reader": ([here, *search], {**env, "MDVDB_ARROW_READER": "1"}),
        'python -c "import numpy"': ([sys.executable, "-c", "import numpy"], env),
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    answers: dict[str, set[bytes]] = {}  # every distinct stdout of each search command
    for i in range(args.runs):
        order = list(commands) if i % 2 == 0 else list(commands)[::-1]
        for name in order:
            argv, environ = commands[name]
            start = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, env=environ)
            samples[name].append(time.perf_counter() - start)
            if done.returncode != 0:
                sys.exit(f"{name}: {done.stderr.decode(errors='replace').strip()}")
            if argv[1:2] == ["search"]:
                answers.setdefault(name, set()).add(done.stdout)
    ours = answers["this checkout"] | answers["this checkout, pyarrow reader"]
    if len(ours) > 1:
        sys.exit("this checkout's two readers answered differently")
    same = answers["other install"] == ours
    base = statistics.median(samples["other install"])
    rows = [
        {
            "install": name,
            "median ms": round(statistics.median(times) * 1000, 1),
            "min ms": round(min(times) * 1000, 1),
            "vs other": round(statistics.median(times) / base, 3),
        }
        for name, times in samples.items()
    ]
    title = (
        f"cold mdvdb search, {args.runs} alternating runs, load {os.getloadavg()[0]:.1f}; "
        f"the other install's answer is {'the same' if same else 'different'}"
    )
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
