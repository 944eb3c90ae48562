"""What the search reads over the mapped index: the vectors as a view (no copy), the title
tier's words found in one lowered string as the per-row loop finds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel.config import load_config
from query import open_index
from query.rank.titles import _lowered, query_words, title_files
from tests.conftest import build_index

PAGES = {
    "tools/tar.md": "---\ntitle: Tar archives\ntags: [archive, cli]\nstatus: draft\n---\n"
    "# Tar archives\n\nExtract a tar archive with `tar xf file.tar`.\n\n"
    "## Create\n\nCreate one with `tar cf out.tar folder/`.\n",
    "tools/zip.md": "---\ntitle: Zip files\ntags: [archive]\nstatus: published\n---\n"
    "# Zip files\n\nUnpack a zip file with `unzip file.zip`.\n",
    "vcs/git.md": "---\ntitle: Undo a commit\ntags: [git]\nstatus: published\nrating: 4\n---\n"
    "# Undo a commit\n\nUse `git reset HEAD~1` to undo the last commit and keep the changes.\n",
    "vcs/-dash.md": "# -v flags\n\nA page whose title starts with a dash: -v is verbose.\n",
    "cook/soup.md": "# Soup\n\nBoil the stock, add the vegetables, simmer for an hour.\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fast")
    for rel, text in PAGES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return build_index(root)


def test_vectors_are_a_view_over_the_mapped_file(project: Path) -> None:
    """A copy would cost ~60 ms per cold query on tldr and double the memory."""
    snap = open_index(config=load_config(project)).snapshot
    mapped = snap.table("chunks").column("vector").chunk(0).values.buffers()[1]
    assert snap.vectors.ctypes.data == mapped.address
    assert not snap.vectors.flags.writeable


TITLES = {
    "a.md": "# Straße and Sous-titre élégant\n\ntext\n",
    "b.md": "# [Linked title](https://example.com/x) here\n\ntext\n",
    "c.md": "---\ntitle: ΟΔΟΣ notes\n---\n# Body\n\ntext\n",
    "d1.md": "---\ntitle: Ta\n---\ntext\n",
    "d2.md": "---\ntitle: Rget\n---\n# Pra\n\ntext\n\n## Ctice\n\nmore text\n",
    "e.md": "no heading at all, just text about the target practice\n",
    "f.md": "# 日本語のタイトル\n\ntext\n",
    "h.md": "# Target practice\n\ntext\n",
}
# Lowering "İ" gives two characters: the buffer reader then falls back to row by row.
LONGER_WHEN_LOWERED = {**TITLES, "g.md": "# İstanbul\n\ntext\n"}
QUERIES = ["straße", "istanbul", "i̇stanbul", "linked title", "example", "οδος", "target",
           "rget", "ta", "practice", "日本語", "タイトル", "élégant sous", "titre", "text", "x",
           "ext", "tar"]  # fmt: skip


@pytest.mark.parametrize("pages", [TITLES, LONGER_WHEN_LOWERED], ids=["buffers", "rows"])
def test_title_tier_matches_where_words_begin(tmp_path: Path, pages: dict) -> None:
    """Words are looked up in one lowered string; check it against the obvious per-row loop
    (a word matches where a title word begins, anywhere in CJK), on links, Greek, CJK,
    titles that grow when lowered, and neighbouring rows that spell a word together across
    their boundary ("ta" + "rget", "pra" + "ctice")."""
    import re

    for rel, text in pages.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    snap = open_index(config=load_config(build_index(tmp_path))).snapshot

    def plain(texts: list[str | None]) -> list[str]:
        link = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
        return [link.sub(r"\1", t).lower() if t else "" for t in texts]

    def has(text: str, word: str) -> bool:
        if "\u3040" <= word[0] <= "\u9fff":  # CJK: anywhere
            return word in text
        return re.search(r"(?<![^\W_])" + re.escape(word), text) is not None

    titles = plain(snap.table("files").column("title").to_pylist())
    headings = plain(snap.table("chunks").column("heading").to_pylist())
    file_ids = snap.chunk_file_ids
    for query in QUERIES:
        words = query_words(query)
        expected = np.zeros(len(titles), dtype=bool)
        for i, title in enumerate(titles):
            expected[i] |= bool(words) and all(has(title, w) for w in words)
        for c, heading in enumerate(headings):
            expected[file_ids[c]] |= bool(words) and all(has(heading, w) for w in words)
        assert title_files(snap, words).tolist() == expected.tolist(), query
    assert _lowered(snap)[0].text  # built once, kept in the snapshot's cache
    assert title_files(snap, ["arget"]).sum() == 0  # inside a word: no match
    assert title_files(snap, ["tar"]).sum() == 1  # begins "Target practice" (h.md)
    assert title_files(snap, ["elegant"]).sum() == 0  # not accent-folded
    assert title_files(snap, ["タイトル"]).sum() == 1  # inside a CJK run
