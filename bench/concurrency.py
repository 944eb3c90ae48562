"""Readers searching while a writer re-ingests: 0 errors, every answer from one snapshot.

Each file's text names its file number and the writer's round ("file 3 round 7"); the writer
rewrites every file for each round, so a published index holds one round throughout. An
answer whose results carry two rounds, or a file number that does not match its path, read a
torn or mixed index. A reader also checks that the rounds it sees never go backwards.

    python bench/concurrency.py --readers 4 --rounds 20 [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FILES = 12
WORDS = ["river", "mountain", "forest", "desert", "ocean", "glacier", "valley", "canyon"]
PATTERN = re.compile(r"file (\d+) round (\d+)")


def write_round(root: Path, round_no: int) -> None:
    for i in range(FILES):
        word = WORDS[i % len(WORDS)]
        text = (
            f"# Note {i}\n\nThis is file {i} round {round_no}. It talks about the {word} "
            f"and the {WORDS[(i + round_no) % len(WORDS)]} near it.\n"
        )
        (root / f"f{i:02d}.md").write_text(text)


def reader(root: Path, stop_file: Path, fresh_each_query: bool) -> dict:
    from query import open_index

    index = open_index(root)
    queries = errors = mixed = backwards = 0
    rounds_seen: set[int] = set()
    last = -1
    samples: list[str] = []
    deadline = time.time() + 600
    while not stop_file.exists() and time.time() < deadline:
        try:
            if fresh_each_query:
                index = open_index(root)
            # every file, uncollapsed: the notes differ only in numbers and a word, which
            # near-duplicate collapse would otherwise fold into one
            response = index.search(
                WORDS[queries % len(WORDS)], limit=FILES, min_score=-2.0, collapse=False
            )
        except Exception as exc:  # counted, never hidden
            errors += 1
            if len(samples) < 3:
                samples.append(f"{type(exc).__name__}: {exc}")
            continue
        queries += 1
        rounds = set()
        for hit in response.results:
            m = PATTERN.search(hit.excerpt)
            if not m or hit.path != f"f{int(m.group(1)):02d}.md":
                mixed += 1
                continue
            rounds.add(int(m.group(2)))
        if len(rounds) > 1 or len(response.results) != FILES:
            mixed += 1
            if len(samples) < 3:
                samples.append(f"rounds {sorted(rounds)}, {len(response.results)} results")
        if rounds:
            r = rounds.pop()
            if r < last:
                backwards += 1
            last = max(last, r)
            rounds_seen.add(r)
    return {
        "queries": queries,
        "errors": errors,
        "mixed": mixed,
        "backwards": backwards,
        "rounds_seen": len(rounds_seen),
        "samples": samples,
    }


def writer(root: Path, rounds: int) -> dict:
    from kernel.config import load_config
    from kernel.providers import get_provider
    from pipeline import ingest

    config = load_config(root)
    provider = get_provider(config)
    times = []
    for r in range(1, rounds + 1):
        write_round(root, r)
        started = time.perf_counter()
        ingest.ingest_folder(config, provider=provider)
        times.append(time.perf_counter() - started)
    return {"rounds": rounds, "ingest_median_ms": sorted(times)[len(times) // 2] * 1000}


def run(readers: int = 4, rounds: int = 20, root: Path | None = None) -> dict:
    """Start `readers` reader processes and one writer process; return their reports."""
    work = Path(root or tempfile.mkdtemp(prefix="mdvdb-conc-"))
    work.mkdir(parents=True, exist_ok=True)
    write_round(work, 0)
    subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(work)], check=True,
        capture_output=True, cwd=REPO,
    )  # fmt: skip
    stop_file = work.parent / f"{work.name}.stop"
    cmd = [sys.executable, __file__, "--role"]
    procs = [
        subprocess.Popen(
            [*cmd, f"reader:{int(i % 2 == 1)}", "--root", str(work)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )  # fmt: skip
        for i in range(readers)
    ]
    time.sleep(1.0)  # let the readers map the first index
    w = subprocess.run(
        [*cmd, "writer", "--root", str(work), "--rounds", str(rounds)],
        stdout=subprocess.PIPE, text=True, cwd=REPO, check=True,
    )  # fmt: skip
    stop_file.write_text("")
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return {"writer": json.loads(w.stdout.strip().splitlines()[-1]), "readers": reports}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--root", type=Path)
    parser.add_argument("--role")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.role and args.role.startswith("reader"):
        stop_file = args.root.parent / f"{args.root.name}.stop"
        print(json.dumps(reader(args.root, stop_file, args.role.endswith("1"))), flush=True)
        return
    if args.role == "writer":
        print(json.dumps(writer(args.root, args.rounds)), flush=True)
        return
    from bench.common import print_table

    out = run(args.readers, args.rounds, args.root)
    rows = [
        {"process": f"reader {i}", **{k: v for k, v in r.items() if k != "samples"}}
        for i, r in enumerate(out["readers"])
    ]
    rows.append(
        {
            "process": f"writer ({out['writer']['rounds']} ingests, median "
            f"{out['writer']['ingest_median_ms']:.0f} ms)",
        }
    )
    print_table("Readers during re-ingests", rows, args.json)


if __name__ == "__main__":
    main()
