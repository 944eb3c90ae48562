"""`mdvdb grep` against raw ripgrep with the same flags, side by side in one run.

    python bench/grep.py [--corpus /work/corpora/tldr] [--runs 9] [--json]

For each case the three commands run interleaved (so machine load hits them alike), `--runs`
times each; the table gives medians. `rg` is the command a user would type (plain output, the
same search flags mdvdb passes); `rg --json` is mdvdb's exact argv, so the gap between the two rg
rows is rg's own cost of JSON output, and the gap to mdvdb is Python start-up plus our work.
The overhead and ratio columns compare mdvdb with plain `rg` (wall time). On a shared machine the
CPU columns (user + sys of the process and its children, rg included) are the steadier measure
of what mdvdb adds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402
from kernel.project_files import BUILTIN_IGNORES, RG_FLAGS  # noqa: E402
from query.grep.ripgrep import TYPE_GLOBS, find_rg  # noqa: E402

# (name, pattern, extra mdvdb flags). Rare patterns make rg scan everything (no early stop);
# common ones let mdvdb stop rg after --limit matches.
CASES = [
    ("no match (full scan)", "zzqqxxw", []),
    ("rare: chroot (230 lines)", "chroot", ["--limit", "1000"]),
    ("common: tar, --limit 10", "tar", []),
    ("common: docker, --limit 200", "docker", ["--limit", "200"]),
    ("--sort: chroot", "chroot", ["--sort", "--limit", "1000"]),
]


def mdvdb_cmd() -> list[str]:
    script = Path(sys.executable).with_name("mdvdb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mdvdb"]


def rg_argv(rg: str, pattern: str, corpus: Path, as_json: bool) -> list[str]:
    """What `mdvdb grep` runs (see query.grep.ripgrep.build_argv), optionally without --json."""
    argv = [rg] + (["--json"] if as_json else []) + ["--no-config", "--smart-case"]
    argv += ["--fixed-strings", "--max-count", "1050"]  # 50 body matches + frontmatter lines
    for glob in TYPE_GLOBS["md"]:
        argv += ["--type-add", f"mdvdb:{glob}"]
    argv += ["--type", "mdvdb"]
    argv += RG_FLAGS  # the project's rules (kernel.project_files): what ingest would index
    for name in sorted(BUILTIN_IGNORES):
        argv += ["--glob", f"!{name}/"]
    return argv + ["-e", pattern, "--", str(corpus)]


def once(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and everything it waited for, rg included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=Path("/work/corpora/tldr"))
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    corpus = args.corpus.resolve()
    rg = find_rg()
    env_note = os.getloadavg()[0]

    rows = []
    python = [sys.executable, "-c", "pass"]
    for name, pattern, extra in CASES:
        commands = {
            "rg": rg_argv(rg, pattern, corpus, as_json=False),
            "rg_json": rg_argv(rg, pattern, corpus, as_json=True),
            "mdvdb": [*mdvdb_cmd(), "grep", "--root", str(corpus), *extra, "-e", pattern],
            "python": python,
        }
        for cmd in commands.values():  # warm the page cache and the interpreter's files
            once(cmd)
        samples: dict[str, list[float]] = {k: [] for k in commands}
        cpu: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.runs):
            for key, cmd in commands.items():
                wall, used = once(cmd)
                samples[key].append(wall)
                cpu[key].append(used)
        med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
        med_cpu = {k: statistics.median(v) * 1000 for k, v in cpu.items()}
        rows.append(
            {
                "case": name,
                "rg_ms": med["rg"],
                "rg_json_ms": med["rg_json"],
                "mdvdb_ms": med["mdvdb"],
                "python_start_ms": med["python"],
                "overhead_ms": med["mdvdb"] - med["rg"],
                "ratio": med["mdvdb"] / med["rg"],
                "rg_cpu_ms": med_cpu["rg"],
                "mdvdb_cpu_ms": med_cpu["mdvdb"],
                "cpu_overhead_ms": med_cpu["mdvdb"] - med_cpu["rg"],
            }
        )
    title = (
        f"mdvdb grep vs rg over {corpus} (median of {args.runs} interleaved runs; "
        f"load average {env_note:.1f} at start)"
    )
    print_table(title, rows, as_json=args.json)


if __name__ == "__main__":
    main()
