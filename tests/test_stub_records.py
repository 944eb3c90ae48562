"""The stub prior as a user meets it: a catalogue record (a title and `Label: value` lines)
gives way to a page that says something, while short real answers (a command page of
examples, a one-line note) are left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from query.rank.stubs import is_record
from tests.conftest import build_index, run_cli

PAGES = {
    # a catalogue entry: its title says it all, and that is all it says
    "record.md": (
        "# Storage Allocation in a Paging System\n\n"
        "Authors: Randell, B.; Kuehner, C. J.\n\nPublished: CACM July, 1968\n"
    ),
    "article.md": (
        "# Dynamic memory management\n\n"
        "How a paging system decides where each program lives. Storage allocation is done in\n"
        "fixed pages: the system keeps a free list of page frames, hands one to a program when\n"
        "it touches a page it does not hold, and takes back the least recently used frame when\n"
        "the list runs dry. Fragmentation stays low because every allocation is the same size.\n"
    ),
    # short real answers: a tldr-style command page and a one-line note
    "tar.md": (
        "# tar\n\n> Archiving utility.\n\n- Create an archive from files:\n\n"
        "`tar cf target.tar file1 file2`\n"
    ),
    "note.md": "# Paging on call\n\nThe on-call engineer is paged by the storage alerts.\n",
    "bread.md": "# Bread\n\nFlour, water, salt and yeast. Knead, rise, bake.\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stubs") / "notes"
    root.mkdir()
    for rel, text in PAGES.items():
        (root / rel).write_text(text, encoding="utf-8")
    return build_index(root)  # the ingest the command runs, in this process


def search(root: Path, query: str) -> list[dict]:
    out = run_cli("search", query, "--explain", "-n", "5", "--json", "--root", str(root))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["results"]


def test_a_catalogue_record_gives_way_to_a_page_that_answers(project: Path):
    # "paged on call" names the note; of the two others, the record shares the word "paging"
    # in its title, the article says what paging does. Without the prior the record's short
    # length wins it second place.
    paths = [hit["path"] for hit in search(project, "who is paged on call")]
    assert paths[0] == "note.md"
    assert paths.index("article.md") < paths.index("record.md")


def test_only_records_pay_the_stub_prior(project: Path):
    for query in ("storage allocation in a paging system", "create a tar archive"):
        hits = {hit["path"]: hit["explain"] for hit in search(project, query)}
        assert hits["record.md"].get("stub", 0.0) < 0, query
        for short_answer in ("tar.md", "note.md", "bread.md"):
            if short_answer in hits:
                assert hits[short_answer].get("stub", 0.0) == 0.0, (query, short_answer)
        for parts in hits.values():
            additive = ("lexical", "feedback", "semantic", "page", "name", "stub")
            total = sum(parts.get(n, 0.0) for n in additive)
            assert total == pytest.approx(parts["fused"], abs=5e-6)


def test_what_counts_as_a_record():
    assert is_record(PAGES["record.md"])
    assert is_record("# Ray Jobs API")  # a heading and nothing under it
    assert not is_record(PAGES["note.md"])  # a sentence of prose
    assert not is_record(PAGES["tar.md"])  # examples
    assert not is_record("# Setup\n\nNote: run it twice.\nThen restart the service.\n")
