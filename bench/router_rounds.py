"""A router over shard servers: latency, round trips and bytes per query, and its answers
against the one-file index.

    python bench/router_rounds.py --root SHARDED_ROOT --shards 20 --servers 4 [--rounds 5]
        [--fresh] [--per-chunk] [--json]

SHARDED_ROOT holds a sharded index (`MDVDB_SHARDS=N mdvdb ingest`) and, as a reference, the
one-file index of the same folder (`.markdownvdb.index`, e.g. a copy of an ingested folder
sharded afterwards). K real shard servers (`mdvdb serve --shards`, on 127.0.0.1) share the
shards; the router (`MDVDB_SHARD_SERVERS`, the library in this process) runs
bench/scaleout.py's ten queries per mode, `--rounds` times, after one untimed pass that
checks every answer (paths, lines, scores) against the one-file index.

The script imports `query` from the installed package, so the same file times another
checkout: run it with that checkout's interpreter (`/work/base/.venv/bin/python
bench/router_rounds.py ...`); its shard servers run that interpreter too.

Per query it reports (`cpu_ms`: CPU time of the router and the shard servers together,
which on a loaded machine decides the latency as much as the round trips do):
- `round_trips`: the router's sequential waves of requests (calls that overlap in time are
  one wave: a round sent to every server at once costs one round trip);
- `messages`: requests sent (to all servers);
- `kb`: bytes both ways; `median_ms` / `p95_ms`.
`--fresh`: the router forgets the terms' document frequencies before each query (as if
every query brought new words), which the router otherwise keeps per generation.
`--per-chunk`: the staged rounds off (each scoring chunk's numbers cross the wire, the
protocol before them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# bench/ holds a `query.py` of its own: `query` is the installed package's
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

# bench/scaleout.py's QUERIES, copied: importing bench/ would put this checkout's `query`
# first on the path, and the script must time the installed one (another checkout's).
QUERIES = [
    "extract a tar archive",
    "merge a branch and push to the remote",
    "bake bread with yeast and flour",
    "database index for a join query",
    "firewall port and dns route",
    "prune the garden and compost the soil",
    "invoice tax audit",
    "python package import test",
    "compress folder",
    "replica backup schedule",
]


class Wire:
    """Every request the router sends and the answer it reads, timed: bytes, messages,
    and the waves of overlapping requests (round trips on the critical path)."""

    def __init__(self):
        from query.shards import wire as shard_wire

        self.wire = shard_wire
        # a round to every server at once (`exchange_all`), or one request (`exchange`)
        self.send = "exchange_all" if hasattr(shard_wire, "exchange_all") else "exchange"
        self.saved = shard_wire.encode, shard_wire.decode, getattr(shard_wire, self.send)
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.bytes = 0
        self.messages = 0
        self.spans: list[tuple[float, float]] = []

    def __enter__(self):
        encode, decode, exchange = self.saved
        many = self.send == "exchange_all"

        def counted_encode(value):
            data = encode(value)
            with self.lock:
                self.bytes += len(data)
            return data

        def counted_decode(data):
            with self.lock:
                self.bytes += len(data)
            return decode(data)

        def counted_exchange(*args, **kwargs):
            started = time.perf_counter()
            try:
                return exchange(*args, **kwargs)
            finally:
                with self.lock:
                    self.spans.append((started, time.perf_counter()))
                    self.messages += len(args[0]) if many else 1

        self.wire.encode, self.wire.decode = counted_encode, counted_decode
        setattr(self.wire, self.send, counted_exchange)
        return self

    def __exit__(self, *exc):
        self.wire.encode, self.wire.decode = self.saved[:2]
        setattr(self.wire, self.send, self.saved[2])

    def waves(self) -> int:
        count, end = 0, -1.0
        for start, stop in sorted(self.spans):
            if start > end:
                count += 1
                end = stop
            else:
                end = max(end, stop)
        return count


def _open(root: Path, env: dict):
    from kernel.config import load_config
    from query import open_index

    return open_index(config=load_config(root, {**os.environ, **env}))


def _answers(index, query: str, mode: str) -> list:
    response = index.search(query, limit=10, mode=mode)
    return [(r.path, r.start_line, r.end_line, r.score) for r in response.results]


def _forget_df(index) -> None:
    """The router's per-generation document frequencies, dropped (`--fresh`)."""
    from query.score.lexical import lexical_index

    found = lexical_index(index)
    for name in ("df_cache", "page_df_cache"):
        cache = getattr(found, name, None)
        if cache is not None:
            cache.clear()
    with index.pinned() as snap:
        for key, value in list(snap.cache.items()):
            if isinstance(key, tuple) and key and key[0] == "lexical_rescored":
                for name in ("df_cache", "page_df_cache"):
                    cache = getattr(value, name, None)
                    if cache is not None:
                        cache.clear()


def _servers(root: Path, shards: int, count: int, env: dict):
    owned = [list(range(shards))[i::count] for i in range(count)]
    procs, addresses = [], []
    for mine in owned:
        # -P: the servers import the package this interpreter has, not one in the cwd
        argv = [sys.executable, "-P", "-m", "mdvdb", "serve", "--shards", ",".join(map(str, mine))]
        proc = subprocess.Popen(
            [*argv, "--root", str(root)], env=env, stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        addresses.append(proc.stdout.readline().split()[-1])
    return procs, addresses


class Router:
    """K shard servers and a router over them, in this process; `ask` times one search."""

    def __init__(self, args):
        self.args = args
        env = {**os.environ, "MDVDB_SHARDS": str(args.shards)}
        self.procs, addresses = _servers(args.root, args.shards, args.servers, env)
        self.router = _open(
            args.root,
            {"MDVDB_SHARDS": str(args.shards), "MDVDB_SHARD_SERVERS": ",".join(addresses)},
        )
        if args.per_chunk:
            from query.rank import shard_search as shard_query

            shard_query.staged_scores = lambda *a, **k: None
        self.wire = Wire().__enter__()

    def same_answers(self, mode: str) -> bool:
        reference = _open(self.args.root, {"MDVDB_SHARDS": "1"})
        return all(_answers(self.router, q, mode) == _answers(reference, q, mode) for q in QUERIES)

    def _server_cpu(self) -> float:
        """CPU seconds the shard servers have used (Linux /proc; 0 elsewhere)."""
        total = 0.0
        for proc in self.procs:
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return 0.0
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def ask(self, query: str, mode: str) -> dict:
        if self.args.fresh:
            _forget_df(self.router)
        wire = self.wire
        wire.reset()
        servers = self._server_cpu()
        cpu = time.process_time()
        started = time.perf_counter()
        self.router.search(query, limit=10, mode=mode)
        took = time.perf_counter() - started
        cpu = time.process_time() - cpu + self._server_cpu() - servers
        return {
            "s": took,
            "cpu": cpu,
            "trips": wire.waves(),
            "messages": wire.messages,
            "bytes": wire.bytes,
        }

    def close(self) -> None:
        self.wire.__exit__()
        for proc in self.procs:
            proc.terminate()
            proc.wait(timeout=60)


def _row(label: str, mode: str, args, asked: list[dict], same) -> dict:
    samples = sorted(a["s"] for a in asked)
    return {
        "label": label,
        "mode": mode,
        "shards": args.shards,
        "servers": args.servers,
        "round_trips": round(statistics.mean(a["trips"] for a in asked), 1),
        "messages": round(statistics.mean(a["messages"] for a in asked), 1),
        "kb": round(statistics.mean(a["bytes"] for a in asked) / 1e3, 1),
        "median_ms": round(statistics.median(samples) * 1e3, 1),
        "p95_ms": round(samples[int(0.95 * (len(samples) - 1))] * 1e3, 1),
        # router + shard servers (the servers' clock counts in ticks: a mean over queries)
        "cpu_ms": round(statistics.mean(a["cpu"] for a in asked) * 1e3, 1),
        "same_answers": same,
    }


def run(args) -> list[dict]:
    router = Router(args)
    try:
        rows = []
        for mode in args.modes.split(","):
            same = router.same_answers(mode)
            asked = [router.ask(q, mode) for _ in range(args.rounds) for q in QUERIES]
            rows.append(_row(args.label, mode, args, asked, same))
        return rows
    finally:
        router.close()


def worker(args) -> None:
    """`--worker`: a Router answering "MODE\tQUERY" lines on stdin with one JSON line."""
    router = Router(args)
    try:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            mode, _, query = line.rstrip("\n").partition("\t")
            if mode == "same":
                print(json.dumps({"same": router.same_answers(query)}), flush=True)
            else:
                print(json.dumps(router.ask(query, mode)), flush=True)
    finally:
        router.close()


def interleaved(args) -> list[dict]:
    """`--ab LABEL=PYTHON[:PYTHONPATH],...`: one worker per checkout (its interpreter, its
    shard servers), each query asked of every worker in turn (the order rotating), so
    the machine's load falls on all of them alike."""
    workers = []
    script = str(Path(__file__).resolve())
    common = ["--root", str(args.root), "--shards", str(args.shards)]
    common += ["--servers", str(args.servers)] + (["--fresh"] if args.fresh else [])
    for spec in args.ab.split(","):
        label, _, rest = spec.partition("=")
        python, _, path = rest.partition(":")
        env = {**os.environ}
        if path:
            env["PYTHONPATH"] = path
        extra = ["--per-chunk"] if label.endswith("per-chunk") else []
        proc = subprocess.Popen(
            [python, script, "--worker", *common, *extra],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tempfile.gettempdir(),
        )
        assert json.loads(proc.stdout.readline()).get("ready"), label
        workers.append((label, proc))

    def ask(proc, mode: str, query: str) -> dict:
        proc.stdin.write(f"{mode}\t{query}\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        rows = []
        for mode in args.modes.split(","):
            same = {label: ask(proc, "same", mode)["same"] for label, proc in workers}
            asked: dict[str, list[dict]] = {label: [] for label, _ in workers}
            turn = 0
            for _ in range(args.rounds):
                for q in QUERIES:
                    turn += 1
                    for k in range(len(workers)):
                        label, proc = workers[(turn + k) % len(workers)]
                        asked[label].append(ask(proc, mode, q))
            for label, _ in workers:
                rows.append(_row(label, mode, args, asked[label], same[label]))
            first = rows[-len(workers)]["median_ms"]
            for row in rows[-len(workers) :]:
                row["median_vs_first"] = round(row["median_ms"] / first, 2)
        return rows
    finally:
        for _, proc in workers:
            proc.stdin.close()
            proc.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="a sharded folder")
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="lexical,hybrid")
    parser.add_argument("--fresh", action="store_true", help="df forgotten before each query")
    parser.add_argument("--per-chunk", action="store_true", help="the staged rounds off")
    parser.add_argument("--label", default=str(Path(sys.prefix).parent.name))
    parser.add_argument(
        "--ab",
        default="",
        help="LABEL=PYTHON[:PYTHONPATH],...: checkouts asked query by query in turn "
        "(a label ending in per-chunk runs with the staged rounds off)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    rows = interleaved(args) if args.ab else run(args)
    if args.json:
        print(json.dumps(rows))
        return
    load = os.getloadavg()[0]
    print(
        f"router over {args.servers} shard servers, {args.shards} shards "
        f"({platform.node()}, {os.cpu_count()} cores, load {load:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}{', fresh df' if args.fresh else ''})"
    )
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row.get(k, "")) for k in keys) + " |")


if __name__ == "__main__":
    main()
