"""A section matched by meaning only shows its sentence closest to the query; a long-lived
reader keeps each such section's sentences and their vectors per snapshot (query.rank.excerpt
`memo`). The kept ones must give what a fresh process shows, and an edit must not be
answered from the previous snapshot's."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import build_index, run_cli

FILLER = (
    "The weather report for the harbour promised rain until the evening tide. "
    "The library opens at nine on weekdays and closes early on public holidays. "
    "Our accountant files the quarterly tax forms before the deadline in April. "
    "The marathon route follows the river past the old brick warehouses downtown. "
)
TAIL = (
    "The bus to the airport leaves from the central station every twenty minutes. "
    "Fresh paint on the fence needs two days to dry before the second coat goes on. "
    "The committee postponed the vote on the new parking rules until next spring."
)


def write(root: Path, cat_sentence: str) -> None:
    body = f"{FILLER}{cat_sentence} {TAIL}"
    (root / "notes.md").write_text(f"# Notes\n\n{body}\n", encoding="utf-8")
    (root / "other.md").write_text("# Bread\n\nKnead the dough and bake it.\n", encoding="utf-8")


def excerpt_of(index) -> str:
    hits = index.search("feline", mode="hybrid", limit=5).results
    return next(hit.excerpt for hit in hits if hit.path == "notes.md")


def test_kept_sentences_answer_as_a_fresh_process_and_follow_an_edit(tmp_path: Path):
    from kernel.config import load_config
    from query import open_index

    write(tmp_path, "Kittens and cats love to sleep in warm sunny spots near the windows.")
    build_index(tmp_path)
    index = open_index(config=load_config(tmp_path, environ={}))
    first = excerpt_of(index)
    assert "cats love to sleep" in first and not first.startswith("The weather")
    memo = next(v for k, v in index.snapshot.cache.items() if k[0] == "excerpt_sentences")
    assert len(memo) == 1  # the section's sentences are kept...
    assert excerpt_of(index) == first  # ...and answer the next query as they did the first
    # (semantic: in a two-page folder "feline" is no closer to the cats than nonsense gets,
    # so the default answers it with no match, query.rank.evidence; the excerpt is the same)
    done = run_cli(
        "search", "feline", "--mode", "semantic", "--json", "-n", "5", "--root", str(tmp_path)
    )
    shown = {r["path"]: r["excerpt"] for r in json.loads(done.stdout)["results"]}
    assert shown["notes.md"] == first
    # the same section (row) with another sentence: the new snapshot's own
    write(tmp_path, "Kittens and cats like to nap in warm sunny spots near the windows.")
    build_index(tmp_path)
    after = excerpt_of(index)
    assert "cats like to nap" in after and not after.startswith("The weather")
