"""Clusters on the read side: the topics of an index (its `clusters` table and
`files.cluster_id`) and a search restricted to one."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel import index_format

if TYPE_CHECKING:
    from query.snapshot import Reader


@dataclass
class Representative:
    path: str
    title: str


@dataclass
class Cluster:
    cluster_id: int
    label: str
    size: int
    keywords: list[str]
    representatives: list[Representative]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClusterList:
    clusters: list[Cluster]
    documents: int  # documents in the index
    unclustered: int  # documents with no cluster (no text to embed)
    # k, silhouette of the last full clustering, documents assigned since then ("pending")
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "unclustered": self.unclustered,
            "k": self.summary.get("k"),
            "silhouette": self.summary.get("silhouette"),
            "assigned_since_rebalance": self.summary.get("pending"),
            "clusters": [c.to_json() for c in self.clusters],
        }


def clusters_table(index: Reader):
    table = index.snapshot.table("clusters")
    if table is None:
        from query.snapshot import QueryError

        raise QueryError(
            f"the index at {index.config.index_path} has no clusters (built with "
            "MDVDB_CLUSTERING_ENABLED=false); enable it and run `mdvdb ingest`"
        )
    return table


def list_clusters(index: Reader) -> ClusterList:
    table = clusters_table(index)
    snap = index.snapshot
    titles = snap.table("files").column("title").to_pylist()
    clusters = []
    for row in table.drop_columns(["centroid"]).to_pylist():
        reps = []
        for path in row["representative_paths"]:
            file_id = index.path_id(path)
            reps.append(Representative(path, titles[file_id] if file_id is not None else ""))
        clusters.append(
            Cluster(row["cluster_id"], row["label"], row["size"], row["keywords"], reps)
        )
    raw = (table.schema.metadata or {}).get(index_format.CLUSTERS_META_KEY.encode())
    summary = json.loads(raw) if raw else {}
    ids = snap.table("files").column("cluster_id").to_numpy()
    return ClusterList(clusters, len(ids), int((ids < 0).sum()), summary)


def file_mask(index: Reader, cluster_id: int) -> np.ndarray:
    """True for the documents in the cluster; an unknown id is a QueryError."""
    from query.snapshot import QueryError

    table = clusters_table(index)
    known = table.column("cluster_id").to_pylist()
    if cluster_id not in known:
        raise QueryError(
            f"no cluster {cluster_id} in the index (ids: {min(known)}..{max(known)}); "
            "see `mdvdb clusters`"
            if known
            else f"no cluster {cluster_id}: the index has no clusters"
        )
    return index.snapshot.table("files").column("cluster_id").to_numpy() == cluster_id


def chunk_mask(index: Reader, cluster_id: int) -> np.ndarray:
    """True for the chunks of documents in the cluster; an unknown id is a QueryError."""
    return file_mask(index, cluster_id)[index.snapshot.chunk_file_ids]


def members(index: Reader, cluster_id: int) -> list[Representative]:
    """Every document of one cluster (path and title), in path order."""
    files = index.snapshot.table("files")
    ids = np.flatnonzero(file_mask(index, cluster_id)).tolist()
    paths, titles = files.column("path"), files.column("title")
    found = [Representative(paths[i].as_py(), titles[i].as_py() or "") for i in ids]
    return sorted(found, key=lambda rep: rep.path)


def document_vectors(index: Reader) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(unit document vectors, their cluster ids, their paths): the normalised mean of each
    file's chunks, as the cluster stage computes it. Files without chunks are left out."""
    snap = index.snapshot
    files = snap.table("files")
    n = files.num_rows
    dims = snap.vectors.shape[1]
    sums = np.zeros((n, dims), dtype=np.float64)
    np.add.at(sums, snap.chunk_file_ids, snap.vectors)
    norms = np.linalg.norm(sums, axis=1)
    keep = norms > 0
    vectors = (sums[keep] / norms[keep, None]).astype(np.float32)
    paths = [p for p, k in zip(snap.paths, keep.tolist(), strict=True) if k]
    return vectors, files.column("cluster_id").to_numpy()[keep], paths


def write_map(index: Reader, target: Path) -> int:
    """Write the cluster map to `target` (.html: a page with the SVG inline; .svg: the SVG
    alone); returns the number of documents on it."""
    from query.cluster_map import MapLabel, project, render_html, render_svg

    listing = list_clusters(index)
    vectors, labels, paths = document_vectors(index)
    coords = project(vectors, labels) if len(vectors) else np.zeros((0, 2))
    names = [MapLabel(c.cluster_id, c.label, c.size) for c in listing.clusters]
    title = f"{index.config.root.name}: {len(paths)} documents in {len(names)} clusters"
    svg = render_svg(coords, labels, paths, names, title)
    text = svg if target.suffix.lower() == ".svg" else render_html(svg, title)
    target.write_text(text, encoding="utf-8")
    return len(paths)
