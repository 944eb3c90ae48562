"""Filtered vs unfiltered query cost, on leetcode and on a generated 100k-chunk index.

    python -m bench.filters [--json] [--repeat N] [--skip-leetcode] [--chunks 100000]

Each query runs warm on one open index (the agent case): the median of N runs. Filters are
evaluated on the typed `fm:` columns; the obvious alternative, decoding every file's
frontmatter JSON and testing it in Python, is measured in the same run for the same filter.
The leetcode index is built once under MDVDB_BENCH_DIR (a full ingest takes minutes); the
generated index is packed directly from random unit vectors (query cost does not depend on
what the vectors mean) with leetcode-like frontmatter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bench.common import WORK, corpus, median_ms, print_table, run

QUERY = "find the longest increasing subsequence with binary search"
FILTER_SETS = {
    "difficulty=Easy": ["difficulty=Easy"],
    "rating>=1800": ["rating>=1800"],
    "tags=Array": ["tags=Array"],
    "3 filters": ["tags=Array", "rating>=1800", "difficulty=Medium,Hard"],
}


def leetcode_root() -> tuple[Path, float | None]:
    """The leetcode corpus with an index (built now if missing: the time is returned)."""
    root = corpus("leetcode")
    if (root / ".markdownvdb.index").exists():
        return root, None
    import sys

    started = time.perf_counter()
    done = run([sys.executable, "-m", "mdvdb", "ingest", "--root", str(root)])
    if done.returncode != 0:
        raise SystemExit(f"ingest failed: {done.stderr.strip()[-500:]}")
    return root, time.perf_counter() - started


def generated_root(chunks: int) -> Path:
    """A project whose index holds `chunks` chunks of random vectors, 5 per file."""
    from kernel.config import load_config
    from pipeline.pack.build import PackSources, publish
    from pipeline.state import ManifestEntry

    root = WORK / f"generated-{chunks}"
    config = load_config(root) if root.exists() else None
    if config is not None and config.index_path.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    config = load_config(root)
    rng = np.random.default_rng(7)
    per_file, dims = 5, int(config.embedding_dimensions or 256)
    n_files = chunks // per_file
    tags = ["Array", "String", "Hash Table", "Math", "Sorting", "Greedy", "Graph", "Tree"]
    entries, documents = [], {}
    for i in range(n_files):
        sha = f"{i:064x}"
        entries.append(ManifestEntry(f"gen/{i:06d}.md", 100, 0, sha))
        metadata = {
            "difficulty": ["Easy", "Medium", "Hard"][i % 3],
            "rating": int(1100 + (i * 37) % 2000),
            "tags": [tags[i % 8], tags[(i * 3 + 1) % 8]],
            "comments": bool(i % 2),
            "date": f"20{10 + i % 15}-0{1 + i % 9}-1{i % 10}",
        }
        documents[sha] = {
            "title": f"Problem {i}",
            "metadata": metadata,
            "error": None,
            "chunks": [
                {
                    "heading": f"Section {j}",
                    "heading_path": [f"Problem {i}", f"Section {j}"],
                    "start_line": 1 + 3 * j,
                    "end_line": 3 + 3 * j,
                    "text": f"Generated text {i} {j}",
                    "token_count": 4,
                    "sha256": f"{i * per_file + j:064x}",
                }
                for j in range(per_file)
            ],
        }
    vectors = rng.standard_normal((n_files * per_file, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = {bytes.fromhex(f"{k:064x}"): k for k in range(n_files * per_file)}
    meta = {
        "provider": config.embedding_provider,
        "model": config.embedding_model,
        "dimensions": dims,
    }
    sources = PackSources(
        entries=tuple(entries),
        dimensions=dims,
        build_key="generated",
        load_documents=lambda shas: {s: documents[s] for s in shas},
        load_vectors=lambda shas: vectors[[rows[s] for s in shas]],
        state=None,
    )
    publish(config.index_path, sources, meta)
    return root


def json_scan(index, filters) -> int:
    """The alternative: decode every file's frontmatter JSON and test it in Python."""
    from query.filters import resolve
    from query.schema import load_schema

    typed = resolve(filters, load_schema(index.snapshot))
    front = index.snapshot.table("files").column("frontmatter").to_pylist()
    keep = 0
    for raw in front:
        meta = json.loads(raw or "{}")
        if all(_holds(meta, t) for t in typed):
            keep += 1
    return keep


def _holds(meta: dict, typed) -> bool:
    from kernel.index_format import frontmatter_text

    f, value = typed.filter, meta.get(typed.filter.field)
    if value is None:
        return False
    if f.op in (">=", ">", "<", "<="):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        v = typed.values[0]
        return {">=": value >= v, ">": value > v, "<": value < v, "<=": value <= v}[f.op]
    items = value if isinstance(value, list) else [value]
    return any(frontmatter_text(item) in typed.values for item in items)


def paired(base, fn, repeat: int) -> tuple[float, float, float]:
    """Median ms of `base` and `fn`, and the median of per-pair ratios: the two run
    alternately, in alternating order (ABBA), so load from other processes on a shared
    machine and whatever the first call leaves in the caches hit both alike."""
    base(), fn()
    a, b, ratios = [], [], []
    for i in range(repeat):
        first, second = (base, fn) if i % 2 == 0 else (fn, base)
        start = time.perf_counter()
        first()
        mid = time.perf_counter()
        second()
        end = time.perf_counter()
        t_base, t_fn = (mid - start, end - mid) if i % 2 == 0 else (end - mid, mid - start)
        a.append(t_base)
        b.append(t_fn)
        ratios.append(t_fn / t_base)
    return median_ms(a), median_ms(b), statistics.median(ratios)


def measure(label: str, root: Path, repeat: int) -> list[dict]:
    from query import open_index
    from query.filters import candidate_mask, matching_files, parse_filter
    from query.rank.tiers import tiered_search

    index = open_index(root)
    snap = index.snapshot
    index.search(QUERY, limit=10)  # warm: map, model, caches

    def base():
        return index.search(QUERY, limit=10)

    rows = []

    def row(name: str, fn, matching: int | None = None) -> None:
        base_ms, ms, ratio = paired(base, fn, repeat)
        rows.append(
            {
                "corpus": label,
                "query": name,
                "unfiltered_ms": base_ms,
                "median_ms": ms,
                "ratio": ms / base_ms,
                "paired_ratio": ratio,
                "matching_files": matching,
            }
        )

    rows.append(
        {
            "corpus": label,
            "query": f"unfiltered search ({snap.table('files').num_rows} files, "
            f"{snap.vectors.shape[0]} chunks)",
            "unfiltered_ms": None,
            "median_ms": None,
            "ratio": 1.0,
            "paired_ratio": 1.0,
            "matching_files": snap.table("files").num_rows,
        }
    )
    for name, texts in FILTER_SETS.items():
        filters = [parse_filter(t) for t in texts]
        count = matching_files(index, filters, limit=0)[1]
        row(
            f"search + {name}",
            lambda f=filters: index.search(QUERY, limit=10, filters=f),
            count,
        )
    filters = [parse_filter(t) for t in FILTER_SETS["3 filters"]]
    row("filter mask alone (3 filters)", lambda: candidate_mask(index, filters))
    row("list, no query (3 filters)", lambda: matching_files(index, filters, limit=20))
    row("alternative: JSON scan (3 filters)", lambda: json_scan(index, filters))
    row("tiered search (CLI path), no filter", lambda: tiered_search(index, QUERY, limit=20))
    row(
        "tiered search (CLI path), 3 filters",
        lambda: tiered_search(index, QUERY, filters, limit=20),
    )
    assert json_scan(index, filters) == matching_files(index, filters, limit=0)[1]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeat", type=int, default=60)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--skip-leetcode", action="store_true")
    args = parser.parse_args()
    rows: list[dict] = []
    if not args.skip_leetcode:
        root, ingest_seconds = leetcode_root()
        if ingest_seconds is not None and not args.json:
            print(f"leetcode full ingest: {ingest_seconds:.0f} s")
        rows += measure("leetcode", root, args.repeat)
    rows += measure(f"generated {args.chunks // 1000}k", generated_root(args.chunks), args.repeat)
    print_table("Filtered vs unfiltered query cost (warm, median)", rows, args.json)


if __name__ == "__main__":
    main()
