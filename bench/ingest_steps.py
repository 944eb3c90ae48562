"""The two serial steps of a full ingest that moved, each timed both ways in one process on
the same data (CPU seconds: a busy machine inflates them far less than wall time).

- pack's lexical step: analysing every chunk itself, vs merging the analyses the ingest
  workers made (`pipeline.pack.lexical.store_of`, per file);
- clustering's choice of k: every candidate fitted on every document, vs the candidates
  tried on a sample and only the chosen k fitted on every document (`choose_and_fit`).

    python bench/ingest_steps.py INDEX [--json]      # INDEX: a built .markdownvdb.index
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402
from kernel import index_format  # noqa: E402
from pipeline.cluster import topics as cluster  # noqa: E402
from pipeline.pack import lexical


def _keyed(rows: list[tuple]) -> tuple[list[str], list[str]]:
    """The headings and SHA-256s of (heading, heading path, text, sha256) rows."""
    return [r[0] for r in rows], [r[3] for r in rows]


def lexical_rows(index: index_format.IndexFile) -> list[dict]:
    files, chunks = index.tables["files"], index.tables["chunks"]
    titles = files.column("title").to_pylist()
    file_ids = chunks.column("file_id").to_numpy()
    rows = list(
        zip(
            chunks.column("heading").to_pylist(),
            chunks.column("heading_path").to_pylist(),
            chunks.column("text").to_pylist(),
            chunks.column("sha256").to_pylist(),
            strict=True,
        )
    )
    bounds = np.r_[0, np.cumsum(np.bincount(file_ids, minlength=files.num_rows))]
    started = time.process_time()
    parts = []
    for f in range(files.num_rows):
        a, b = int(bounds[f]), int(bounds[f + 1])
        if a < b:
            title = titles[f] or ""
            keys = lexical.chunk_keys([title], np.zeros(b - a, np.int64), *_keyed(rows[a:b]))
            fields = [(title, lexical.chunk_fields(title, r[1] or []), r[2]) for r in rows[a:b]]
            parts.append(lexical.store_of(keys, fields))
    made = lexical.Store.join(parts)
    in_workers = time.process_time() - started
    out = []
    for label, given in (("pack analyses every chunk", None), ("pack merges workers'", made)):
        started = time.process_time()
        postings = lexical.build_postings(lexical.analysed_store(files, chunks, given))
        out.append(
            {
                "step": "lexical postings",
                "how": label,
                "pack_cpu_s": round(time.process_time() - started, 2),
                "workers_cpu_s": round(in_workers, 2) if given is not None else 0.0,
                "result": f"{len(postings.tf)} postings",
            }
        )
    return out


def cluster_rows(index: index_format.IndexFile, max_clusters: int) -> list[dict]:
    from threadpoolctl import threadpool_limits

    chunks, n = index.tables["chunks"], index.tables["files"].num_rows
    flat = chunks.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vectors = np.nan_to_num(flat.reshape(chunks.num_rows, -1))
    file_ids = chunks.column("file_id").to_numpy()
    docs = cluster.document_vectors(vectors, file_ids, n)
    docs = docs[np.bincount(file_ids, minlength=n) > 0]
    out = []
    with threadpool_limits(1):
        started = time.process_time()
        best = None
        for k in cluster.candidate_ks(len(docs), max_clusters):
            _, labels = cluster.fit_kmeans(docs, k)
            score = cluster.silhouette(docs, labels)
            if best is None or score > best[1]:
                best = (k, score, labels)
        every = time.process_time() - started
        started = time.process_time()
        sampled = cluster.choose_and_fit(docs, max_clusters)
        now = time.process_time() - started
    from sklearn.metrics import adjusted_rand_score

    assert best is not None
    agreement = adjusted_rand_score(best[2], sampled.labels)
    for label, cpu, k, score in (
        ("every candidate on every document", every, best[0], best[1]),
        (
            f"candidates on a sample (above {cluster.MINIBATCH_ABOVE} docs)",
            now,
            sampled.k,
            sampled.silhouette,
        ),
    ):
        out.append(
            {
                "step": f"choice of k, {len(docs)} documents",
                "how": label,
                "pack_cpu_s": round(cpu, 2),
                "workers_cpu_s": 0.0,
                "result": f"k={k} silhouette={score:.4f} ARI vs every={agreement:.3f}",
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path)
    parser.add_argument("--max-clusters", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    index = index_format.read_index(args.index)
    rows = lexical_rows(index) + cluster_rows(index, args.max_clusters)
    print_table("full ingest's serial steps, both ways (CPU seconds)", rows, args.json)


if __name__ == "__main__":
    main()
