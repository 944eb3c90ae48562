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
