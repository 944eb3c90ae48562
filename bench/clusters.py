"""Clusters: quality on tldr and leetcode, cost of the stage, cost of one incremental assign.

    python -m bench.clusters [--corpus tldr,leetcode,generated] [--json] [--work DIR]

For each real corpus it ingests (embeddings are cached in WORK/<name>/state, so only the first
run pays for them), then times a full clustering of the stage itself (wall and CPU), prints
the silhouette, the labels, and for leetcode the share of problems whose dominant tag (the
first in their frontmatter `tags`, LeetCode's own order) is the majority tag of their cluster.
The alternative measured in the same run: one k-means fit at the size heuristic
k = min(MAX, sqrt(n/2)) instead of the silhouette search.

On tldr it also times the ingest of one new file (the stage's incremental assign) against a
full re-clustering. `generated` fills a state database with 100k chunks (20k documents from
24 synthetic topics, vectors drawn around topic centres) and times the stage on it.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import time
from pathlib import Path

import numpy as np

from bench.common import WORK, corpus, print_table
from kernel.config import load_config
from pipeline.cluster import topics as cluster
from pipeline.embed import model_key
from pipeline.state import ManifestEntry, State

CHUNK_KEY_SETTINGS = {"MDVDB_CHUNK_MAX_TOKENS": "512", "MDVDB_CHUNK_OVERLAP_TOKENS": "50"}


def project(work: Path, name: str, root: Path, **env: str):
    environ = {
        "MDVDB_INDEX_FILE": str(work / name / "index"),
        "MDVDB_STATE_DIR": str(work / name / "state"),
        **CHUNK_KEY_SETTINGS,
        **env,
    }
    return load_config(root, environ=environ)


def chunk_key(config) -> str:
    from pipeline.chunking import chunking_key

    return chunking_key(config.chunk_max_tokens, config.chunk_overlap_tokens)


def timed_full_stage(config) -> tuple[float, float, cluster.StageResult]:
    from kernel.providers import get_provider

    provider = get_provider(config)
    with State(config.state_path) as state:
        started, cpu = time.perf_counter(), time.process_time()
        result = cluster.run_stage(
            state,
            chunk_key(config),
            model_key(provider),
            provider.dimensions,
            config.clustering_max_clusters,
            config.clustering_rebalance_threshold,
            full=True,
        )
        return time.perf_counter() - started, time.process_time() - cpu, result


def republish(config) -> None:
    """Publish the clustering just timed: the stages' inputs did not change, so the ingest
    would skip pack unless the index's stamp is forgotten."""
    with State(config.state_path) as state:
        state.set_value("published_stamp", None)
    report = ingest(config)
    assert report.published


def ingest(config):
    from pipeline.ingest import ingest_folder

    return ingest_folder(config)


def first_tags(config) -> tuple[list[str], np.ndarray, list[str | None]]:
    """(paths, cluster ids, dominant tag) of every indexed document."""
    from kernel import index_format

    files = index_format.read_index(config.index_path).tables["files"]
    tags = []
    for raw in files.column("frontmatter").to_pylist():
        value = json.loads(raw or "{}").get("tags")
        tags.append(value[0] if isinstance(value, list) and value else None)
    return files.column("path").to_pylist(), files.column("cluster_id").to_numpy(), tags


def majority_share(labels: np.ndarray, tags: list[str | None], keep=None) -> tuple[float, int]:
    """Share of tagged documents whose tag is the most common tag of their cluster."""
    keep = keep if keep is not None else [True] * len(tags)
    by_cluster: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for label, tag, k in zip(labels.tolist(), tags, keep, strict=True):
        if tag is not None and k and label >= 0:
            by_cluster[label][tag] += 1
    majority = {c: counts.most_common(1)[0][0] for c, counts in by_cluster.items()}
    hits = total = 0
    for label, tag, k in zip(labels.tolist(), tags, keep, strict=True):
        if tag is not None and k and label >= 0:
            total += 1
            hits += majority[label] == tag
    return (hits / total if total else 0.0), total


def heuristic_alternative(config, tags_by_path: dict[str, str | None] | None):
    """One k-means fit at k = min(MAX, sqrt(n/2)): the size heuristic, for comparison."""
    from threadpoolctl import threadpool_limits

    from kernel.providers import get_provider

    provider = get_provider(config)
    with State(config.state_path) as state:
        manifest = {p: e.sha256 for p, e in state.manifest().items()}
        docs = cluster.load_docs(state, chunk_key(config), sorted(manifest), manifest)
        docs = [d for d in docs if d.chunk_shas]
        vectors = cluster.doc_matrix(state, model_key(provider), provider.dimensions, docs)
    k = int(min(config.clustering_max_clusters, round(np.sqrt(len(docs) / 2))))
    started, cpu = time.perf_counter(), time.process_time()
    with threadpool_limits(1):
        _, labels = cluster.fit_kmeans(vectors, k)
        score = cluster.silhouette(vectors, labels)
    row = {
        "k": k,
        "silhouette": round(score, 4),
        "stage_wall_s": round(time.perf_counter() - started, 2),
        "stage_cpu_s": round(time.process_time() - cpu, 2),
    }
    if tags_by_path is not None:
        tags = [tags_by_path.get(d.path) for d in docs]
        row["tag_majority"] = round(majority_share(labels, tags)[0], 4)
    return row


def real_corpus(name: str, root: Path, work: Path, rows: list, labels_out: dict) -> None:
    config = project(work, name, root)
    ingest(config)
    wall, cpu, result = timed_full_stage(config)
    republish(config)
    from kernel import index_format

    chunks = index_format.read_meta(config.index_path).get("chunks")
    paths, ids, tags = first_tags(config)
    row = {
        "corpus": name,
        "method": "silhouette search",
        "documents": result.documents,
        "chunks": chunks,
        "k": result.k,
        "silhouette": result.silhouette,
        "stage_wall_s": round(wall, 2),
        "stage_cpu_s": round(cpu, 2),
    }
    tags_by_path = None
    if any(t is not None for t in tags):
        share, total = majority_share(ids, tags)
        english = [p.endswith("README_EN.md") for p in paths]
        share_en, total_en = majority_share(ids, tags, english)
        row["tag_majority"] = round(share, 4)
        row["tag_majority_en"] = round(share_en, 4)
        row["tagged"] = total
        row["tagged_en"] = total_en
        tags_by_path = dict(zip(paths, tags, strict=True))
    rows.append(row)
    alt = heuristic_alternative(config, tags_by_path)
    rows.append({"corpus": name, "method": "sqrt(n/2) heuristic", **alt})
    from query import open_index
    from query.clusters import list_clusters

    listing = list_clusters(open_index(config=config))
    labels_out[name] = {
        "tried": result.tried,
        "clusters": [
            {
                "id": c.cluster_id,
                "label": c.label,
                "size": c.size,
                "keywords": c.keywords,
                "representatives": [r.path for r in c.representatives],
            }
            for c in listing.clusters
        ],
    }


def incremental(work: Path, rows: list) -> None:
    """One new file on tldr: the cluster stage's share of the ingest, against a full one."""
    root = work / "tldr-root"
    if not root.exists():
        shutil.copytree(corpus("tldr") / "pages", root)
    config = project(work, "tldr-incr", root)
    ingest(config)
    new = root / "common" / "zz-bench-new-tool.md"
    samples, ingest_s = [], []
    for i in range(5):
        new.write_text(
            f"# zz-bench-new-tool\n\n> Compress and extract archives, take {i}.\n\n"
            "- Extract an archive:\n\n`zz-bench-new-tool -x {{path/to/file.tar.gz}}`\n",
            encoding="utf-8",
        )
        report = ingest(config)
        assert report.clustering == "assign", report.clustering
        samples.append(report.stage_seconds["cluster"])
        ingest_s.append(report.seconds)
        new.unlink()
        ingest(config)
    rows.append(
        {
            "corpus": "tldr",
            "what": "ingest of 1 new file: cluster stage (assign)",
            "median_ms": round(float(np.median(samples)) * 1000, 1),
            "max_ms": round(max(samples) * 1000, 1),
            "ingest_median_s": round(float(np.median(ingest_s)), 2),
        }
    )
    rows.append(assign_cpu(config))
    wall, cpu, _ = timed_full_stage(config)
    rows.append(
        {
            "corpus": "tldr",
            "what": "the alternative: full re-clustering",
            "median_ms": round(wall * 1000, 1),
            "max_ms": round(wall * 1000, 1),
            "ingest_median_s": None,
        }
    )


def assign_cpu(config, repeats: int = 7) -> dict:
    """The stage alone, in this process, for CPU time: one document is made to look new (its
    stored assignment removed) and assigned again."""
    from kernel.providers import get_provider

    provider = get_provider(config)
    walls, cpus = [], []
    with State(config.state_path) as state:
        info = state.get_value(cluster.STATE_KEY)
        path = min(p for p, cid, _, _ in state.cluster_docs() if cid >= 0)
        for _ in range(repeats):
            state.update_cluster_docs([path], [])
            started, cpu = time.perf_counter(), time.process_time()
            result = cluster.run_stage(
                state, chunk_key(config), model_key(provider), provider.dimensions, 50, 10**9
            )
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
            assert result.mode == "assign"
        state.set_value(cluster.STATE_KEY, info)
    return {
        "corpus": "tldr",
        "what": "the stage alone, 1 document assigned (CPU ms)",
        "median_ms": round(float(np.median(cpus)) * 1000, 1),
        "max_ms": round(max(cpus) * 1000, 1),
        "ingest_median_s": None,
    }


def generated(work: Path, rows: list, docs: int = 20000, per_doc: int = 5) -> None:
    """A state with docs x per_doc chunks of synthetic vectors and text; times the stage."""
    folder = work / "generated" / "state"
    if folder.exists():
        shutil.rmtree(folder)
    rng = np.random.default_rng(0)
    dims, topics = 256, 24
    centres = rng.normal(size=(topics, dims)).astype(np.float32)
    vocab = [[f"topic{t}word{w}" for w in range(30)] for t in range(topics)]
    common = ["alpha", "beta", "gamma", "delta", "omega"]
    model, key = "synthetic:bench:256", "v1:512:50"
    with State(folder) as state:
        entries, chunk_rows, shas, vectors = [], [], [], []
        for d in range(docs):
            t = d % topics
            chunks = []
            for c in range(per_doc):
                sha = f"{d:08d}{c:04d}".ljust(64, "0")
                words = rng.choice(vocab[t], size=20).tolist() + common
                chunks.append({"sha256": sha, "text": " ".join(words)})
                shas.append(bytes.fromhex(sha))
                vectors.append(centres[t] + rng.normal(scale=1.6, size=dims))
            doc_sha = f"{d:064x}"
            entries.append(ManifestEntry(f"gen/{d:06d}.md", 100, 0, doc_sha))
            chunk_rows.append((doc_sha, json.dumps({"title": f"doc {d}", "chunks": chunks})))
        state.replace_manifest(entries, [])
        state.put_chunks(key, chunk_rows)
        matrix = np.asarray(vectors, dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        state.put_embeddings(model, shas, matrix)
        started, cpu = time.perf_counter(), time.process_time()
        result = cluster.run_stage(state, key, model, dims, 50, 50, full=True)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        rows.append(
            {
                "corpus": f"generated ({docs * per_doc} chunks)",
                "method": "silhouette search",
                "documents": docs,
                "chunks": docs * per_doc,
                "k": result.k,
                "silhouette": result.silhouette,
                "stage_wall_s": round(wall, 2),
                "stage_cpu_s": round(cpu, 2),
            }
        )
    shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="tldr,leetcode,generated")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--work", type=Path, default=WORK / "clusters")
    parser.add_argument("--labels", type=Path, help="Also write every cluster label here (JSON)")
    args = parser.parse_args()
    wanted = args.corpus.split(",")
    rows: list[dict] = []
    incr: list[dict] = []
    labels: dict = {}
    if "tldr" in wanted:
        real_corpus("tldr", corpus("tldr") / "pages", args.work, rows, labels)
        incremental(args.work, incr)
    if "leetcode" in wanted:
        real_corpus("leetcode", corpus("leetcode"), args.work, rows, labels)
    if "generated" in wanted:
        generated(args.work, rows)
    columns = ["corpus", "method", "documents", "chunks", "k", "silhouette"]
    columns += ["tag_majority", "tag_majority_en", "stage_wall_s", "stage_cpu_s"]
    rows = [{c: r.get(c) for c in columns} for r in rows]
    print_table("Clustering: quality and stage cost", rows, args.json)
    if incr:
        print_table("Incremental assign of one new file vs a full re-clustering", incr, args.json)
    if args.labels:
        args.labels.write_text(json.dumps(labels, indent=1, ensure_ascii=False), encoding="utf-8")
    if not args.json:
        for name, data in labels.items():
            print(f"\n{name}: silhouette of each k tried: {data['tried']}")
            for c in data["clusters"]:
                print(f"  [{c['id']}] {c['label']} ({c['size']}): {', '.join(c['keywords'])}")


if __name__ == "__main__":
    main()
