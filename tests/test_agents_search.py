"""Agent-facing search behaviour: governed ranking, --files, budgets, status --check, .mdvdb-off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli

BODY = "# Rotating the signing keys\n\nRotate the signing keys every ninety days with keyctl.\n"


def page(root: Path, name: str, **front: str) -> None:
    header = "".join(f"{k}: {v}\n" for k, v in front.items())
    text = f"---\n{header}---\n{BODY}" if front else BODY
    (root / name).write_text(text, encoding="utf-8")


NOTES = "extract an archive"


def search_json(root: Path, *args: str, query: str = "rotate signing keys") -> dict:
    """`query` matches the wiki's pages; the fixture notes answer NOTES (a query without a
    match there is an empty answer: tests/test_no_match_evidence.py)."""
    done = run_cli("search", query, "--json", *args, "--root", str(root))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def wiki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Equally relevant pages (same body) that differ only in their governance fields;
    built once, the tests only read it."""
    root = tmp_path_factory.mktemp("wiki")
    page(root, "a-low.md", confidence="low", updated="2024-06-01")
    page(root, "b-high.md", confidence="high", updated="2023-01-01")
    page(root, "c-old.md", confidence="medium", updated="2022-01-01")
    page(root, "d-new.md", confidence="medium", updated="2025-03-01")
    (root / "other.md").write_text("# Baking bread\n\nKnead the dough.\n", encoding="utf-8")
    return build_index(root)


def test_governed_ranking_lifts_high_drops_low_and_breaks_ties_by_updated(wiki: Path):
    # the four pages are copies of one section: --no-collapse shows each of them
    paths = [r["path"] for r in search_json(wiki, "-n", "4", "--no-collapse")["results"]]
    assert paths == ["b-high.md", "d-new.md", "c-old.md", "a-low.md"]
    # collapsed, the copy shown is the governed best, the others are listed
    best = search_json(wiki, "-n", "4")["results"][0]
    assert best["path"] == "b-high.md"
    assert [c["path"] for c in best["also_in"]] == ["a-low.md", "c-old.md", "d-new.md"]


def test_no_govern_keeps_pure_relevance(wiki: Path):
    results = search_json(wiki, "-n", "4", "--no-govern", "--no-collapse")["results"]
    scores = {r["path"]: r["score"] for r in results}
    assert len(set(scores.values())) == 1  # the same body: no page is favoured
    governed = search_json(wiki, "-n", "4", "--no-collapse")["results"]
    governed = {r["path"]: r["score"] for r in governed}
    assert governed["b-high.md"] > scores["b-high.md"] > governed["a-low.md"]


def test_explain_shows_the_adjustment(wiki: Path):
    results = search_json(wiki, "-n", "4", "--explain", "--no-collapse")["results"]
    by_path = {r["path"]: r["explain"] for r in results}
    assert by_path["b-high.md"]["govern_factor"] == pytest.approx(1.1)
    assert by_path["b-high.md"]["govern_adjustment"] > 0
    assert by_path["a-low.md"]["govern_adjustment"] < 0
    assert by_path["c-old.md"]["govern_adjustment"] == 0
    human = run_cli("search", "rotate signing keys", "--explain", "--root", str(wiki))
    assert "govern_factor=" in human.stdout


def test_weights_and_field_names_are_configurable(wiki: Path):
    # Invert the weights: now the low page wins.
    env = {"MDVDB_GOVERN_WEIGHTS": "low=2,high=0.5"}
    done = run_cli("search", "rotate signing keys", "--json", "--root", str(wiki), env=env)
    assert json.loads(done.stdout)["results"][0]["path"] == "a-low.md"
    bad = run_cli("search", "x", "--root", str(wiki), env={"MDVDB_GOVERN_WEIGHTS": "high"})
    assert bad.returncode == 2 and "MDVDB_GOVERN_WEIGHTS" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_govern_is_off_by_default_without_the_fields(indexed_notes: Path):
    plain = search_json(indexed_notes, "--explain", query=NOTES)["results"]
    assert plain
    assert all("govern_factor" not in r["explain"] for r in plain)
    forced = search_json(indexed_notes, "--explain", "--govern", query=NOTES)["results"]
    assert all(r["explain"]["govern_factor"] == 1.0 for r in forced)


def test_files_prints_one_line_per_file(indexed_notes: Path):
    done = run_cli("search", "extract a tar archive", "--files", "--root", str(indexed_notes))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    paths = [line.split(None, 1)[1] for line in lines]
    assert paths[0] == "tar.md"
    assert len(paths) == len(set(paths)) >= 3  # every file once, sections collapsed
    scores = [float(line.split()[0]) for line in lines]
    assert scores == sorted(scores, reverse=True)
    two = run_cli("search", "tar", "--files", "-n", "2", "--root", str(indexed_notes))
    assert len(two.stdout.splitlines()) == 2


def test_max_tokens_caps_total_excerpt_size(indexed_notes: Path):
    full = search_json(indexed_notes, "-n", "10", query=NOTES)["results"]
    capped = search_json(indexed_notes, "-n", "10", "--max-tokens", "40", query=NOTES)["results"]
    assert sum(len(r["excerpt"]) for r in full) > 160
    assert 0 < len(capped) < len(full)
    assert sum(len(r["excerpt"]) for r in capped) <= 160
    assert [r["path"] for r in capped] == [r["path"] for r in full[: len(capped)]]


def test_min_score_and_limit(indexed_notes: Path):
    assert len(search_json(indexed_notes, "-n", "2", query=NOTES)["results"]) == 2
    every = search_json(indexed_notes, "-n", "20", query=NOTES)["results"]
    cut = sorted(r["score"] for r in every)[len(every) // 2]
    high = search_json(indexed_notes, "-n", "20", "--min-score", str(cut), query=NOTES)["results"]
    assert 0 < len(high) < len(every) and all(r["score"] >= cut for r in high)


@pytest.mark.slow
def test_status_check_exit_codes(notes: Path, indexed_notes: Path):
    assert run_cli("status", "--check", "--root", str(notes)).returncode == 4  # no index yet
    assert run_cli("status", "--check", "--root", str(indexed_notes)).returncode == 0
    (indexed_notes / "tar.md").write_text("# tar\n\nchanged\n", encoding="utf-8")
    assert run_cli("status", "--check", "--root", str(indexed_notes)).returncode == 3
    assert run_cli("ingest", "--quiet", "--root", str(indexed_notes)).returncode == 0
    assert run_cli("status", "--check", "--root", str(indexed_notes)).returncode == 0
    (indexed_notes / "new.md").write_text("# new\n\nfresh page\n", encoding="utf-8")
    done = run_cli("status", "--check", "--json", "--root", str(indexed_notes))
    assert done.returncode == 3 and json.loads(done.stdout)["fresh"] is False


@pytest.mark.slow
def test_ingest_quiet_prints_nothing_on_a_noop(notes: Path):
    # Its own first ingest: a copied index (indexed_notes) is republished once at its new path.
    assert run_cli("ingest", "--root", str(notes)).returncode == 0
    done = run_cli("ingest", "--quiet", "--root", str(notes))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_mdvdb_off_refuses_search(indexed_notes: Path):
    (indexed_notes / ".mdvdb-off").write_text("", encoding="utf-8")
    done = run_cli("search", "tar", "--root", str(indexed_notes))
    assert done.returncode == 5
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and ".mdvdb-off" in done.stderr
    (indexed_notes / ".mdvdb-off").unlink()
    assert run_cli("search", "tar", "--root", str(indexed_notes)).returncode == 0
