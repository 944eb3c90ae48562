"""Pack: assemble every table from the caches and publish ONE index file atomically."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mdvdb import index_format
from pipeline.state import ManifestEntry


@dataclass
class PackInput:
    entries: list[ManifestEntry]  # current files, sorted by path
    documents: dict[str, dict[str, Any]]  # file sha -> {"title", "metadata", "error", "chunks"}
    vectors: np.ndarray  # one row per chunk, in file order then chunk order
    dimensions: int
    meta: dict[str, Any] = field(default_factory=dict)
    # The run's cache database (pipeline.state.State), for builders that read what the
    # cluster and schema stages stored there.
    state: Any = None


def files_table(inp: PackInput, cluster_ids: np.ndarray | None = None) -> pa.Table:
    docs = [inp.documents[e.sha256] for e in inp.entries]
    n = len(inp.entries)
    return pa.Table.from_arrays(
        [
            pa.array(np.arange(n, dtype=np.int32)),
            pa.array([e.path for e in inp.entries], pa.string()),
            pa.array([e.sha256 for e in inp.entries], pa.string()),
            pa.array([e.size for e in inp.entries], pa.int64()),
            pa.array([e.mtime_ns / 1e9 for e in inp.entries], pa.float64()),
            pa.array([d["title"] for d in docs], pa.string()),
            pa.array([json.dumps(d["metadata"], ensure_ascii=False) for d in docs], pa.string()),
            pa.array([d["error"] for d in docs], pa.string()),
            pa.array(
                cluster_ids if cluster_ids is not None else np.full(n, -1, dtype=np.int32),
                pa.int32(),
            ),
        ],
        schema=index_format.FILES_SCHEMA,
    )


def chunks_table(inp: PackInput) -> pa.Table:
    file_ids, headings, paths, starts, ends, texts, tokens, shas = ([] for _ in range(8))
    for file_id, entry in enumerate(inp.entries):
        for c in inp.documents[entry.sha256]["chunks"]:
            file_ids.append(file_id)
            headings.append(c["heading"])
            paths.append(c["heading_path"])
            starts.append(c["start_line"])
            ends.append(c["end_line"])
            texts.append(c["text"])
            tokens.append(c["token_count"])
            shas.append(c["sha256"])
    n = len(file_ids)
    flat = pa.array(np.ascontiguousarray(inp.vectors, dtype=np.float32).reshape(-1))
    vectors = pa.FixedSizeListArray.from_arrays(flat, inp.dimensions)
    return pa.Table.from_arrays(
        [
            pa.array(np.arange(n, dtype=np.int32)),
            pa.array(file_ids, pa.int32()),
            pa.array(headings, pa.string()),
            pa.array(paths, pa.list_(pa.string())),
            pa.array(starts, pa.int32()),
            pa.array(ends, pa.int32()),
            pa.array(texts, pa.string()),
            pa.array(tokens, pa.int32()),
            pa.array(shas, pa.string()),
            vectors,
        ],
        schema=index_format.chunks_schema(inp.dimensions),
    )


# Extra tables other stages contribute (lexical postings, clusters...): name -> builder.
# A builder gets the packed `files` and `chunks` tables and the input, returns a table or None.
TableBuilder = Callable[[pa.Table, pa.Table, PackInput], "pa.Table | None"]
EXTRA_TABLES: dict[str, TableBuilder] = {}


def pack(index_path, inp: PackInput) -> int:
    files = files_table(inp)
    chunks = chunks_table(inp)
    tables = {"files": files, "chunks": chunks}
    for name, build in EXTRA_TABLES.items():
        table = build(files, chunks, inp)
        if table is not None:
            tables[name] = table
    meta = {**inp.meta, "files": files.num_rows, "chunks": chunks.num_rows}
    return index_format.write_index(index_path, tables, meta)
