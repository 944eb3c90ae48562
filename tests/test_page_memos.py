"""What a reader keeps per snapshot about pages, independent of the query: governing's
confidence factor and date (query.rank.govern.page_terms), the names a query may call a page by
(query.rank.titles._names). A long-lived reader must still see an edit once it is published, and
two readers of one snapshot with other settings must each rank by their own."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import build_index

BODY = "# Rotating the signing keys\n\nRotate the signing keys every ninety days with keyctl.\n"


def page(root: Path, name: str, confidence: str, updated: str) -> None:
    text = f"---\nconfidence: {confidence}\nupdated: {updated}\n---\n{BODY}"
    (root / name).write_text(text, encoding="utf-8")


def ranked(index) -> list[tuple[str, float]]:
    hits = index.search("rotate signing keys", limit=4, collapse=False).results
    return [(hit.path, hit.score) for hit in hits]


def test_a_long_lived_reader_sees_a_page_edit_and_each_readers_settings(tmp_path: Path):
    from kernel.config import load_config
    from query import open_index

    page(tmp_path, "a.md", "low", "2024-06-01")
    page(tmp_path, "b.md", "high", "2023-01-01")
    page(tmp_path, "c.md", "medium", "2022-01-01")
    page(tmp_path, "d.md", "medium", "2025-03-01")
    build_index(tmp_path)
    index = open_index(config=load_config(tmp_path, environ={}))
    first = ranked(index)
    assert [p for p, _ in first] == ["b.md", "d.md", "c.md", "a.md"]
    # the same snapshot (shared in the process), read under other settings: their order
    inverted = open_index(
        config=load_config(tmp_path, environ={"MDVDB_GOVERN_WEIGHTS": "low=2,high=0.5"})
    )
    assert [p for p, _ in ranked(inverted)] == ["a.md", "d.md", "c.md", "b.md"]
    renamed = open_index(
        config=load_config(tmp_path, environ={"MDVDB_GOVERN_CONFIDENCE_FIELD": "none"})
    )
    # no confidence field: every page ties, the newest first
    assert [p for p, _ in ranked(renamed)] == ["d.md", "a.md", "b.md", "c.md"]
    assert ranked(index) == first  # the first reader's own settings, still
    # an edit published while the reader is open: the next query weighs the new values
    page(tmp_path, "a.md", "high", "2026-01-01")
    page(tmp_path, "b.md", "low", "2023-01-01")
    build_index(tmp_path)
    after = ranked(index)
    assert [p for p, _ in after] == ["a.md", "d.md", "c.md", "b.md"]
    assert after[0][1] == first[0][1]  # the same relevance and factor as b.md had


def test_page_names_kept_per_snapshot_follow_a_retitled_page(tmp_path: Path):
    """query.rank.titles keeps each page's title and stem per snapshot once a name query asked
    for them: a long-lived reader names the page by its new title after an edit, and the
    kept names answer the next query as the first."""
    from kernel.config import load_config
    from query import open_index

    def write(title: str) -> None:
        text = f"---\ntitle: {title}\n---\n# Archives\n\nPack and unpack archive files.\n"
        (tmp_path / "tool.md").write_text(text, encoding="utf-8")
        (tmp_path / "other.md").write_text("# Archives\n\nMore on archive files.\n", "utf-8")

    def named(index, query: str) -> bool:
        hits = index.search(query, limit=5, explain=True).results
        return "name" in next(h.explain for h in hits if h.path == "tool.md")

    write("tar")
    build_index(tmp_path)
    index = open_index(config=load_config(tmp_path, environ={}))
    assert named(index, "tar archive files") and named(index, "tar archive files")
    assert not named(index, "zip archive files")
    write("zip")
    build_index(tmp_path)
    assert named(index, "zip archive files") and not named(index, "tar archive files")


def test_a_factor_of_one_leaves_the_rounded_relevance():
    """query.rank.govern.rerank skips the second rounding when a page's factor is 1: rounding a
    value already rounded to 6 digits gives it back, for any magnitude and sign."""
    import random

    rng = random.Random(1)
    for _ in range(50_000):
        value = round(rng.uniform(-3, 3) * 10 ** rng.randint(-7, 3), 6)
        assert round(value * 1.0 if value >= 0 else value / 1.0, 6) == value
