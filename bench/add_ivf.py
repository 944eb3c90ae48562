"""Add IVF lists to an existing index without re-embedding (or re-ingesting) anything.

    python bench/add_ivf.py SOURCE_INDEX DEST_FOLDER [--min-chunks 50000]

Reads SOURCE_INDEX (never writes it), builds the `ivf` table from its vectors with the same
code pack runs (`pipeline.pack.ivf.build`), and writes DEST_FOLDER/.markdownvdb.index: every other
table's bytes copied file-to-file, the new table and meta key added. How the 1M-chunk bench
index got its lists (a re-ingest there is ~30 min); prints the build time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from kernel import index_format
    from kernel import ivf as ivf_format
    from pipeline.pack import ivf
    from pipeline.plan import Plan

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--min-chunks", type=int, default=50_000)
    args = parser.parse_args()
    index = index_format.read_index(args.source)
    chunks = index.tables["chunks"]
    n = chunks.num_rows
    dims = int(index.meta.get("dimensions") or chunks.schema.field("vector").type.list_size)
    plan = Plan(None, index.tables["files"], chunks, np.zeros(0), np.full(n, -1), ())
    start, cpu = time.perf_counter(), time.process_time()
    part = ivf.build(plan, dims, args.min_chunks)
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    if part.table is None:
        sys.exit(f"{n} chunks: under --min-chunks, no lists built")
    tables = {k: v for k, v in index.tables.items() if k != ivf_format.TABLE}
    tables[ivf_format.TABLE] = part.table
    meta = {k: v for k, v in index.meta.items() if k not in ("format_version", "written_at")}
    meta[ivf_format.META_KEY] = part.meta
    args.dest.mkdir(parents=True, exist_ok=True)
    size = index_format.write_index(args.dest / ".markdownvdb.index", tables, meta, source=index)
    lists = part.meta["lists"]
    print(f"{n} chunks, {lists} lists, built in {took:.1f} s wall, {cpu:.1f} s CPU; {size} bytes")


if __name__ == "__main__":
    main()
