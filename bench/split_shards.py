"""Split a one-file index into the shard set `MDVDB_SHARDS=N mdvdb ingest` would write, without
parsing or embedding again (pipeline/pack/split.py), and time it.

    python bench/split_shards.py SOURCE_ROOT DEST_ROOT --shards 20 [--json]
    python bench/split_shards.py /tmp/m1 /tmp/shard1m/m1-20 --shards 20   # the 1M point

SOURCE_ROOT holds `.markdownvdb.index` (and, when it has one, `.markdownvdb.state`: the
clusters and schema overlay come from there; without it the shards carry no clusters).
The shards are written to DEST_ROOT/.markdownvdb.index.shards (DEST_ROOT may be SOURCE_ROOT:
a folder switched to shards in place). SOURCE_ROOT is only read. DEST_ROOT's own
`.markdownvdb` settings apply (MDVDB_IVF_MIN_CHUNKS: a shard of that many chunks gets IVF
lists, as in an ingest). Read the result with MDVDB_SHARDS=N, e.g.
`python bench/scaleout.py --layouts 1=SOURCE_ROOT,20=DEST_ROOT`.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402


def split_folder(source: Path, dest: Path, shards: int) -> dict:
    """Split SOURCE's one-file index into DEST's shards folder; what it took."""
    from kernel.config import load_config
    from pipeline.lock import LockBusy, WriterLock
    from pipeline.pack.split import SplitError, split
    from pipeline.state import State

    dest.mkdir(parents=True, exist_ok=True)
    config = load_config(dest, {**os.environ, "MDVDB_SHARDS": str(shards)})
    index_path = load_config(source, {**os.environ, "MDVDB_SHARDS": "1"}).index_path
    state_folder = load_config(source, dict(os.environ)).state_path
    has_state = (state_folder / "cache.sqlite3").exists()
    # DEST's writer lock, as an ingest takes it: the split publishes DEST's shards folder.
    lock = WriterLock(config.state_path, command="split_shards")
    try:
        lock.acquire(wait=False)
    except LockBusy as exc:
        raise SplitError(str(exc)) from None
    state = State(state_folder) if has_state else None
    started, cpu = time.perf_counter(), time.process_time()
    try:
        written = split(index_path, config, state)
    finally:
        if state is not None:
            state.close()
        lock.release()
    return {
        "shards": shards,
        "chunks": written.chunks,
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_seconds": round(time.process_time() - cpu, 2),
        "written_mb": round(written.bytes / 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "with_state": state is not None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="folder with the one-file index")
    parser.add_argument("dest", type=Path, help="folder to write the shards folder into")
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.shards < 2:
        parser.error("--shards must be 2 or more")
    from pipeline.pack.split import SplitError

    try:
        row = split_folder(args.source.resolve(), args.dest.resolve(), args.shards)
    except SplitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print_table(f"split {args.source} into {args.shards} shards", [row], args.json)
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
