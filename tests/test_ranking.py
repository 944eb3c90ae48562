"""Ranking as a user meets it: title tiers, names, page-level evidence, `--explain` sums."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernel.config import load_config
from pipeline.ingest import ingest_folder as ingest
from tests.conftest import build_index, run_cli, unpack_corpus

GUIDE = """# Kubernetes Guide

An introduction for people who run services.

## Installing

Install kubernetes with your package manager, then check that kubectl answers.

## Pods

A pod is the smallest unit kubernetes schedules: one or more containers sharing a network.

## Upgrades

Upgrade kubernetes one minor version at a time, control plane first.
"""

PAGES = {
    "guide.md": GUIDE,
    "bread.md": "# Bread\n\nFlour, water, salt and yeast. Knead, rise, bake.\n",
    "ops/runbook.md": (
        "# Runbook\n\n## Paging\n\nWho is on call and how to page them when kubernetes is down.\n"
    ),
    # A page named for a command, against pages that talk about the same task at length.
    "tar.md": "# tar\n\nArchiving utility.\n\n- Create an archive: `tar cf a.tar files`\n",
    "unzip.md": (
        "# unzip\n\nExtract files from a zip archive. Extract an archive, extract it again: "
        "extract, archive, extract archive listing. Works on archives made by tar too.\n"
    ),
    "zip.md": "# zip\n\nPackage and compress (archive) files. Extract an archive with unzip.\n",
    # Two "drain the nodes" sections; only one page is about kubernetes as a whole.
    "upgrades.md": (
        "# Cluster upgrades\n\n## Kubernetes versions\n\nKubernetes supports one minor version "
        "skew; plan kubernetes control plane upgrades first.\n\n## Before you start\n\n"
        "Drain the nodes one at a time and wait for workloads to move.\n"
    ),
    "maintenance.md": (
        "# Hardware maintenance\n\n## Before you start\n\n"
        "Drain the nodes, then power them off and swap the disks.\n"
    ),
}


def search(root: Path, *args: str) -> dict:
    out = run_cli("search", *args, "--json", "--root", str(root))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ranking") / "notes"
    for rel, text in PAGES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return build_index(root)


def test_a_title_matched_page_keeps_its_other_matching_sections(project: Path):
    results = search(project, "kubernetes")["results"]
    guide = [r["heading"] for r in results if r["path"] == "guide.md"]
    # the title tier shows the page once; its three matching sections still come back
    assert {"Installing", "Pods", "Upgrades"} <= set(guide)
    assert results[0]["path"] == "guide.md"


def test_a_page_named_by_the_query_ranks_first(project: Path):
    results = search(project, "extract a tar archive")["results"]
    assert results[0]["path"] == "tar.md"


@pytest.mark.parametrize("query", ["create a kubernetes pod", "extract a tar archive"])
def test_explain_parts_add_up_with_every_component(project: Path, query: str):
    data = search(project, query, "--explain", "-n", "6")
    assert data["results"]
    additive = ("lexical", "feedback", "semantic", "page", "name", "stub")
    seen: set[str] = set()
    for hit in data["results"]:
        parts = hit["explain"]
        seen.update(parts)
        total = sum(parts.get(name, 0.0) for name in additive)
        assert total == pytest.approx(parts["fused"], abs=5e-6)
        assert hit["score"] == pytest.approx(parts["fused"], abs=5e-6)
    assert {"bm25", "cosine", "page", "page_bm25"} <= seen
    if "tar" in query:
        assert "name" in seen


def test_a_section_scores_for_its_page_topic(project: Path):
    results = search(project, "drain kubernetes nodes", "--explain", "-n", "10")["results"]
    drains = [r for r in results if r["heading"] == "Before you start"]
    assert [r["path"] for r in drains][:2] == ["upgrades.md", "maintenance.md"]
    assert drains[0]["explain"]["page"] > drains[1]["explain"]["page"]


@pytest.mark.corpus
@pytest.mark.slow
def test_tar_first_for_extract_a_tar_archive_over_tldr_common(corpora_dir: Path, tmp_path: Path):
    tldr = unpack_corpus(corpora_dir, "tldr")
    root = tmp_path / "tldr"
    shutil.copytree(tldr / "pages" / "common", root / "common")
    ingest(load_config(root, environ={}))  # in-process: 4.6k pages outlast run_cli's timeout
    for query in ("extract a tar archive", "tar"):
        results = search(root, query, "-n", "3")["results"]
        assert results[0]["path"] == "common/tar.md", (query, [r["path"] for r in results])


def test_explain_adds_up_with_the_stub_prior_and_other_query_vectors(project: Path):
    """The settings measured off by default (a stub-page prior, idf-weighted query vectors,
    section k1/b recomputed in memory) keep `--explain`'s parts adding up to the score; the
    stub prior shows as its own (negative) part."""
    from query import open_index
    from query.score import fusion

    index = open_index(config=load_config(project, environ={}))
    settings = {
        "stub_length": 200.0,
        "stub_weight": 0.5,
        "stub_kind": "any",
        "query_vector": "idf-sqrt",
        "section_k1": 1.5,
    }
    with fusion.overridden(**settings):
        results = index.search("drain kubernetes nodes", limit=6, explain=True).results
    assert results
    additive = ("lexical", "feedback", "semantic", "page", "name", "stub")
    assert any(hit.explain.get("stub", 0.0) < 0 for hit in results)
    for hit in results:
        total = sum(hit.explain.get(name, 0.0) for name in additive)
        assert total == pytest.approx(hit.explain["fused"], abs=5e-6)
        assert hit.score == pytest.approx(hit.explain["fused"], abs=5e-6)


def test_the_dense_side_sees_a_sections_page(project: Path):
    """Page-level evidence on the dense side (ρ): the upgrades page's "Before you start" does
    not say kubernetes, its sibling section does; with ρ its semantic part gains on the
    hardware page's same-worded section, and without ρ it does not."""
    from query import open_index
    from query.score import fusion

    index = open_index(config=load_config(project, environ={}))

    def semantic(**settings) -> dict[str, float]:
        with fusion.overridden(**settings):
            hits = index.search("drain kubernetes nodes", limit=10, explain=True).results
        drains = [hit for hit in hits if hit.heading == "Before you start"]
        return {hit.path: hit.explain["semantic"] for hit in drains}

    with_page, without = semantic(), semantic(page_dense_weight=0.0)
    assert fusion.current().page_dense_weight > 0
    assert without["upgrades.md"] < without["maintenance.md"]
    assert with_page["upgrades.md"] > with_page["maintenance.md"]


def test_an_encoder_index_keeps_the_settings_it_was_measured_with():
    """The round-3 settings were chosen with WordLlama: an encoder's index, even one recorded
    before they existed, gets its model's values (off), a WordLlama index the defaults."""
    from query.score.fusion_params import params_for_meta

    minilm = {"provider": "local", "model": "all-minilm-l6-v2", "fusion": {"dense_weight": 0.4}}
    old = params_for_meta(minilm)
    assert (old.dense_weight, old.page_dense_weight, old.section_k1) == (0.4, 0.0, 0.0)
    static = params_for_meta({"provider": "local", "model": "wordllama-l2-supercat", "fusion": {}})
    assert static.page_dense_weight == 0.5 and static.section_k1 == 1.5


def test_long_queries_can_get_their_own_feedback_weights():
    """`dense_long_words` (off by default) gives queries of more than N words their own dense
    weight, Rocchio β and RM3 λ; -1 leaves a weight as it is, shorter queries are untouched."""
    from query.score import fusion

    base = fusion.current()
    assert base.dense_long_words == 0
    assert fusion.for_query("a query of many words here", base) is base
    with fusion.overridden(dense_long_words=3, dense_feedback_long_weight=0.5) as params:
        long = fusion.for_query("one two three four", params)
        short = fusion.for_query("one two three", params)
    assert long.dense_feedback_weight == 0.5
    assert (long.dense_weight, long.feedback_weight) == (base.dense_weight, base.feedback_weight)
    assert short == params


def _section(index, path: str, heading: str) -> int:
    """The chunk id of a page's section, by heading."""
    snap = index.snapshot
    headings = snap.table("chunks").column("heading").to_pylist()
    files = snap.chunk_file_ids.tolist()
    return next(
        i
        for i, (h, f) in enumerate(zip(headings, files, strict=True))
        if h == heading and snap.paths[f] == path
    )


def test_proximity_rewards_query_words_said_together(project: Path):
    """The term-proximity bonus (off by default; docs/search-quality.md "CACM round 5"): for
    "kubernetes version" the upgrades page's section headed "Kubernetes versions" has the two
    words side by side and gets a bonus; the guide's "Upgrades" section has them three content
    words apart ("kubernetes one minor version") and gets none with a window of 1, a smaller
    one with a window of 3."""
    from query import open_index
    from query.score import proximity
    from query.score.lexical import lexical_index

    index = open_index(config=load_config(project, environ={}))
    lexical = lexical_index(index)
    query = "kubernetes version"
    bm25 = lexical.scores(query)
    together = _section(index, "upgrades.md", "Kubernetes versions")
    apart = _section(index, "guide.md", "Upgrades")
    assert bm25[together] > 0 and bm25[apart] > 0
    tight = proximity.scores(lexical, index.snapshot, query, bm25, pool=50, window=1)
    assert tight[together] > 0 and tight[apart] == 0
    wide = proximity.scores(lexical, index.snapshot, query, bm25, pool=50, window=3)
    assert 0 < wide[apart] < wide[together]
    # one query word, or pairs only among its one highest-idf word: nothing to measure
    assert proximity.scores(lexical, index.snapshot, "kubernetes", bm25, 50, 1) is None
    assert proximity.scores(lexical, index.snapshot, query, bm25, 50, 1, key_terms=1) is None


def test_term_reweighting_discounts_words_absent_from_the_first_answers(project: Path):
    """Query-term reweighting (off by default): with the kubernetes sections as the first
    answers, "bread" (in none of them) is discounted and "kubernetes" (in all) counts more;
    the discount-only form leaves "kubernetes" at its idf."""
    from kernel.text_analysis import term_ids
    from query import open_index
    from query.score.lexical import lexical_index
    from query.score.term_weights import factors

    index = open_index(config=load_config(project, environ={}))
    lexical = lexical_index(index)
    hashes = term_ids("kubernetes bread")
    top = lexical.term_chunks(hashes[:1])[0][:3]
    kubernetes, bread = factors(lexical, hashes, top, 0.25).tolist()
    assert bread < 1 < kubernetes
    kubernetes, bread = factors(lexical, hashes, top, 0.25, down_only=True).tolist()
    assert bread < 1 == kubernetes


@pytest.mark.parametrize(
    "settings",
    [
        {"proximity_weight": 0.5},
        {"proximity_weight": 0.3, "proximity_into": "fused", "proximity_window": 3},
        {"term_feedback_weight": 0.25},
    ],
)
def test_explain_adds_up_with_the_lexical_evidence_of_round_5(project: Path, settings: dict):
    """Proximity (inside BM25F, or its own `proximity` part) and query-term reweighting keep
    `--explain`'s parts adding up to the score."""
    from query import open_index
    from query.score import fusion

    index = open_index(config=load_config(project, environ={}))
    with fusion.overridden(**settings):
        results = index.search("kubernetes version upgrades", limit=6, explain=True).results
    assert results
    additive = ("lexical", "feedback", "semantic", "page", "name", "stub", "proximity")
    if settings.get("proximity_into") == "fused":
        assert any(hit.explain.get("proximity", 0.0) > 0 for hit in results)
    if "proximity_weight" in settings:
        assert any(hit.explain.get("proximity_bonus", 0.0) > 0 for hit in results)
    for hit in results:
        total = sum(hit.explain.get(name, 0.0) for name in additive)
        assert total == pytest.approx(hit.explain["fused"], abs=5e-6)
        assert hit.score == pytest.approx(hit.explain["fused"], abs=5e-6)
