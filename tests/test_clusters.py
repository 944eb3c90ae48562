"""Clusters: built by the real ingest, read by the real CLI, from real files in tmp folders."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from kernel import index_format
from tests.conftest import build_index, run_cli

TOPICS = {
    "cooking": "bread flour yeast oven dough bake knead butter sugar recipe kitchen salt",
    "networking": "router packet tcp address dns subnet gateway firewall ping latency port",
    "astronomy": "planet orbit telescope galaxy star comet nebula moon solar eclipse cosmos",
    "gardening": "soil seeds tomato compost water prune garden roses weeds mulch harvest",
}


def write_corpus(root: Path, per_topic: int = 8, start: int = 0) -> None:
    """Documents on four topics; the same call always writes the same bytes."""
    for topic, vocab in TOPICS.items():
        words = vocab.split()
        for i in range(start, start + per_topic):
            rng = random.Random(f"{topic}-{i}")
            body = " ".join(rng.choice(words) for _ in range(60))
            (root / topic).mkdir(parents=True, exist_ok=True)
            (root / topic / f"{topic}-{i:02d}.md").write_text(
                f"# The {topic} note {i}\n\nThe common notes say this.\n\n{body}\n",
                encoding="utf-8",
            )


def ingest(root: Path, **env: str):
    done = run_cli("ingest", "--json", "--root", str(root), env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def clusters_json(root: Path, *extra: str, **env: str) -> dict:
    done = run_cli("clusters", "--json", "--root", str(root), *extra, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def index_of(root: Path) -> index_format.IndexFile:
    return index_format.read_index(root / ".markdownvdb.index")


@pytest.fixture(scope="module")
def topics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built in this process (`build_index`, the ingest the command runs): its tests read it."""
    root = tmp_path_factory.mktemp("topics")
    write_corpus(root)
    return build_index(root)


@pytest.mark.slow
def test_clusters_json_shape_and_topics(topics: Path):
    data = clusters_json(topics)
    assert set(data) >= {"documents", "unclustered", "k", "silhouette", "clusters"}
    assert data["documents"] == 32 and data["unclustered"] == 0
    assert data["k"] == len(data["clusters"]) >= 2
    assert sum(c["size"] for c in data["clusters"]) == 32
    for c in data["clusters"]:
        assert set(c) == {"cluster_id", "label", "size", "keywords", "representatives"}
        assert c["label"] and c["keywords"]
        assert len(c["representatives"]) in (1, 2, 3)
        for rep in c["representatives"]:
            assert set(rep) == {"path", "title"} and rep["title"].startswith("The ")
    # The four topics are far apart: no cluster mixes two of them.
    files = index_of(topics).tables["files"].to_pylist()
    topic_of = {}
    for row in files:
        topic = row["path"].split("/")[0]
        assert topic_of.setdefault(row["cluster_id"], topic) == topic


def test_labels_exclude_stop_words_and_corpus_wide_words(topics: Path):
    """The keywords the index stores (what `mdvdb clusters` prints: the slow tests above
    and below run it)."""
    keywords = index_of(topics).tables["clusters"].column("keywords").to_pylist()
    words = {w for listed in keywords for w in listed}
    assert words
    # "the" is a stop-word; "common", "notes" and "note" are in every document.
    assert not words & {"the", "this", "say", "common", "notes", "note"}
    vocab = {w for v in TOPICS.values() for w in v.split()} | set(TOPICS)
    assert words <= vocab


@pytest.mark.slow
def test_search_cluster_restricts_results(topics: Path):
    data = clusters_json(topics)
    wanted = next(
        c for c in data["clusters"] if "oven" in c["keywords"] or "bread" in c["keywords"]
    )
    other = next(c for c in data["clusters"] if c["cluster_id"] != wanted["cluster_id"])
    args = ("search", "bread oven dough", "--json", "-n", "50", "--min-score", "-1")
    args = (*args, "--root", str(topics))
    free = json.loads(run_cli(*args).stdout)["results"]
    assert {r["cluster_id"] for r in free} == {c["cluster_id"] for c in data["clusters"]}
    inside = run_cli(*args, "--cluster", str(other["cluster_id"]))
    assert inside.returncode == 0, inside.stderr
    results = json.loads(inside.stdout)["results"]
    assert results and {r["cluster_id"] for r in results} == {other["cluster_id"]}
    missing = run_cli("search", "bread", "--cluster", "99", "--root", str(topics))
    assert missing.returncode == 1
    assert "no cluster 99" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.slow
def test_plot_writes_a_readable_map(topics: Path, tmp_path: Path):
    target = tmp_path / "map.html"
    data = clusters_json(topics, "--plot", str(target))
    assert data["plot"]["documents"] == 32
    page = target.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert page.count("<circle") == 32
    for c in data["clusters"]:
        assert f"{c['cluster_id']}: {c['label']}" in page
    svg = tmp_path / "map.svg"
    assert run_cli("clusters", "--plot", str(svg), "--root", str(topics)).returncode == 0
    assert svg.read_text(encoding="utf-8").startswith("<svg")
    bad = run_cli("clusters", "--plot", str(tmp_path / "map.png"), "--root", str(topics))
    assert bad.returncode == 2 and ".html or .svg" in bad.stderr


def test_same_input_gives_same_clusters(topics: Path, tmp_path: Path):
    again = tmp_path / "again"
    shutil.copytree(topics, again, ignore=shutil.ignore_patterns(".markdownvdb*"))
    build_index(again)  # the same ingest, in this process
    first, second = index_of(topics), index_of(again)
    assert first.tables["clusters"].equals(second.tables["clusters"])
    assert (
        first.tables["files"]
        .column("cluster_id")
        .equals(second.tables["files"].column("cluster_id"))
    )


@pytest.mark.slow  # three ingests and four `clusters` runs: ~20 s of CPU
def test_rebalance_at_the_threshold_and_not_before(tmp_path: Path):
    root = tmp_path / "grow"
    write_corpus(root, per_topic=6)
    env = {"MDVDB_CLUSTERING_REBALANCE_THRESHOLD": "5"}
    ingest(root, **env)
    built = clusters_json(root, **env)
    assert built["assigned_since_rebalance"] == 0

    # 4 new documents (one per topic): assigned to the nearest centroid, no re-clustering.
    write_corpus(root, per_topic=1, start=6)
    ingest(root, **env)
    after = clusters_json(root, **env)
    assert after["assigned_since_rebalance"] == 4
    assert after["documents"] == 28 and after["unclustered"] == 0
    stored = {c["cluster_id"]: c for c in built["clusters"]}
    for c in after["clusters"]:  # labels and keywords are the full clustering's
        assert (c["label"], c["keywords"]) == (
            stored[c["cluster_id"]]["label"],
            stored[c["cluster_id"]]["keywords"],
        )
    # Each new document went to the cluster of its topic.
    rows = index_of(root).tables["files"].to_pylist()
    cluster_of_topic = {
        r["path"].split("/")[0]: r["cluster_id"] for r in rows if "-00" in r["path"]
    }
    for r in rows:
        assert r["cluster_id"] == cluster_of_topic[r["path"].split("/")[0]]

    # One changed document brings the count to 5, the threshold: a full clustering.
    changed = root / "cooking" / "cooking-00.md"
    changed.write_text(changed.read_text() + "\nMore flour.\n", encoding="utf-8")
    ingest(root, **env)
    assert clusters_json(root, **env)["assigned_since_rebalance"] == 0

    # With a share of half the 28 documents the next full clustering is due at 14 changes,
    # not at the count of 5: five changed documents are only assigned.
    halves = {**env, "MDVDB_CLUSTERING_REBALANCE_SHARE": "0.5"}
    for topic in ("cooking", "gardening", "astronomy", "networking"):
        page = root / topic / f"{topic}-01.md"
        page.write_text(page.read_text() + "\nOne more line.\n", encoding="utf-8")
    changed.write_text(changed.read_text() + "\nAnd salt.\n", encoding="utf-8")
    ingest(root, **halves)
    assert clusters_json(root, **halves)["assigned_since_rebalance"] == 5


def test_a_large_folder_rebalances_after_a_share_of_its_documents():
    from pipeline.cluster.topics import rebalance_at

    assert rebalance_at(50, 0.05, 400) == 50  # a small folder keeps the fixed count
    assert rebalance_at(50, 0.05, 100_000) == 5_000  # not on every 50th edit at 100k files
    assert rebalance_at(5, 0.5, 27) == 14  # a share rounds up
    assert rebalance_at(50, 0.0, 100_000) == 50


@pytest.mark.slow
def test_disabled_skips_the_stage(tmp_path: Path):
    root = tmp_path / "off"
    write_corpus(root, per_topic=3)
    ingest(root)
    assert "clusters" in index_of(root).tables
    off = {"MDVDB_CLUSTERING_ENABLED": "false"}
    ingest(root, **off)  # turning it off republishes without clusters
    index = index_of(root)
    assert "clusters" not in index.tables
    assert set(index.tables["files"].column("cluster_id").to_pylist()) == {-1}
    listing = run_cli("clusters", "--root", str(root), env=off)
    assert listing.returncode == 1
    assert "no clusters" in listing.stderr and "Traceback" not in listing.stderr
    hits = json.loads(run_cli("search", "bread", "--json", "--root", str(root), env=off).stdout)
    assert hits["results"] and {r["cluster_id"] for r in hits["results"]} == {-1}
    restricted = run_cli("search", "bread", "--cluster", "0", "--root", str(root), env=off)
    assert restricted.returncode == 1 and "no clusters" in restricted.stderr
