"""Ingest on Ray vs the local process pool, per worker count, Ray's start-up apart.

    python bench/scaleout.py ingest [--files 4000] [--workers 1,2] [--rounds 1] [--per-run] [--json]
    python bench/scaleout.py ingest --files 300 --workers 2 --model all-minilm-l6-v2
        # the transformer encoder: locally the embed stage embeds in the one process,
        # on Ray every actor holds the encoder and embeds its batches

A corpus of generated files (bench/generate.py, 2-4 sections each) is copied fresh for every
run and ingested from nothing with `mdvdb ingest --json` (clustering on, as a user runs it):

- `local`: the fork pool of pipeline/workers.py (MDVDB_WORKERS=N; 1: this process);
- `ray paths`: `--executor ray:ADDRESS`, a one-node cluster the bench starts once
  (`ray start --head`, its start-up timed apart; `--per-run`: `--executor ray`, a cluster
  started by each run), N actors (MDVDB_WORKERS=N) that read the files by path (a shared
  filesystem);
- `ray bytes`: the same, the driver shipping each file's bytes in the task
  (MDVDB_EXECUTOR_FILES=bytes, what a cluster without a shared filesystem needs).

`ray_start_s` is Ray's start-up inside the run (connecting to, or starting, the cluster until
every actor holds its model: `executor_start_seconds` of the report); `work_s` is the run
without it. `actors`: what the Ray actors reported (`executor_actors`: how many, their device,
the GPUs they asked for, the batch size they embed with). Every run builds the same index
(tests/test_ray.py checks it byte for byte); the table checks the chunk counts agree. Median
over --rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, print_table  # noqa: E402
from bench.generate import generate  # noqa: E402

QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_PROMPT_ENABLED": "0"}


def start_head(cpus: int) -> tuple[subprocess.Popen, str, float, str]:
    """`ray start --head --block` on a free port: the process, its address, the seconds
    until it said it runs, its temp folder. Stopped by its process group (`stop_head`)."""
    import socket
    import tempfile
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="mdvdb-ray-", dir="/tmp")
    log = Path(temp) / "head.log"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env={**os.environ, **QUIET},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            raise SystemExit("ray start --head failed: " + log.read_text())
        time.sleep(0.2)
    return proc, f"127.0.0.1:{port}", time.perf_counter() - started, temp


def stop_head(proc: subprocess.Popen, temp: str) -> None:
    import signal

    # `ray start` alone: it drains its node and stops what it started (its whole group
    # signalled at once, the raylet dies first and the drain waits its full 30 s).
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.rmtree(temp, ignore_errors=True)


def run_once(corpus: Path, target: Path, workers: int, mode: str, address: str, model: str) -> dict:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(corpus, target)
    env = {**os.environ, **QUIET, "MDVDB_WORKERS": str(workers)}
    if model:
        env["MDVDB_EMBEDDING_MODEL"] = model
    args = [sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(target)]
    if mode != "local":
        args += ["--executor", f"ray:{address}" if address else "ray"]
        env["MDVDB_EXECUTOR_FILES"] = mode.split()[1]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} x{workers}: {done.stderr.strip()}")
    shutil.rmtree(target)
    return json.loads(done.stdout)


def rows(
    corpus: Path,
    scratch: Path,
    counts: list[int],
    rounds: int,
    address: str,
    modes: list[str],
    model: str,
) -> list[dict]:
    out = []
    for workers in counts:
        for mode in modes:
            reports = [
                run_once(corpus, scratch, workers, mode, address, model) for _ in range(rounds)
            ]
            wall = statistics.median(r["seconds"] for r in reports)
            start = statistics.median(r["executor_start_seconds"] for r in reports)
            last = reports[-1]
            out.append(
                {
                    "executor": mode,
                    "workers": workers,
                    "ingest_s": round(wall, 2),
                    "ray_start_s": round(start, 2),
                    "work_s": round(wall - start, 2),
                    "parse_s": round(last["stage_seconds"].get("parse", 0.0), 2),
                    "chunks": last["chunks"],
                    "chunks_per_s": round(last["chunked"] / max(wall - start, 1e-9), 1),
                    "actors_or_procs": last["workers"],
                    "actors": _actors(last.get("executor_actors", [])),
                }
            )
    return out


def _actors(reports: list[dict]) -> str:
    """`2 x cpu, 0 GPU, batch 64`: the actors' own reports, summed up."""
    if not reports:
        return ""
    kinds = sorted({(r["device"], r["num_gpus"], r["batch_size"]) for r in reports})
    return "; ".join(
        f"{sum((r['device'], r['num_gpus'], r['batch_size']) == k for r in reports)} x {k[0]}, "
        f"{k[1]:g} GPU, batch {k[2] or '-'}"
        for k in kinds
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4000, help="generated files")
    parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 1,2")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--per-run",
        action="store_true",
        help="each Ray ingest starts its own local cluster (--executor ray) instead of "
        "connecting to one head started by the bench",
    )
    parser.add_argument(
        "--modes", default="local,ray paths,ray bytes", help="executors to time, comma-separated"
    )
    parser.add_argument("--model", default="", help="MDVDB_EMBEDDING_MODEL (default: WordLlama)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    base = WORK / f"scaleout-ingest-{args.files}"
    corpus = generate(base / "corpus", args.files)
    model = args.model
    counts = [int(n) for n in args.workers.split(",")]
    head = None
    address = ""
    if not args.per_run:
        proc, address, head_s, temp = start_head(max(counts))
        head = (proc, temp)
    try:
        table = rows(corpus, base / "run", counts, args.rounds, address, modes, model)
    finally:
        if head is not None:
            stop_head(*head)
    if head is not None:
        print_table(
            f"Ray start-up: `ray start --head --num-cpus={max(counts)}` on this machine",
            [{"step": "ray start --head", "seconds": round(head_s, 2)}],
            args.json,
        )
    if len({r["chunks"] for r in table}) != 1:
        raise SystemExit(f"the executors built different indexes: {table}")
    print_table(
        f"ingest from nothing, {args.files} generated files, {table[0]['chunks']} chunks, "
        f"model {model or 'wordllama-l2-supercat'} (s; median of {args.rounds})",
        table,
        args.json,
    )
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
