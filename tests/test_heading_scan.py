"""The fast heading scan (`pipeline.parse.plain_headings`) finds exactly what markdown-it's
block parser finds, on every body it accepts; anything else goes to markdown-it.

The scan is a shortcut past the parser for most pages: each test here compares it with
markdown-it itself (`parsed_headings`) and would fail on any heading it got wrong."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pipeline.parse import (
    MAX_HEADING_CHARS,
    decode,
    headings_of,
    parse_document,
    parsed_headings,
    plain_headings,
    split_frontmatter,
)
from tests.conftest import unpack_corpus

# Lines the scan accepts (or must read as plain text): headings of every shape, paragraph
# lines opening with characters that open a block only in other company, quotes and list
# items holding plain text, blank lines of spaces and tabs, odd whitespace.
PLAIN = [
    "# Title",
    "## Sub ##",
    "### closed ###   ",
    "###### six",
    "####### seven is text",
    "#",
    "# #",
    "## ##",
    "#\ttab heading",
    "#  two spaces  ",
    "#hashtag",
    "# trailing #",
    "# a#",
    "# a \\#",
    "#\u00a0nbsp is text",
    "# ideographic space\u3000",
    "# em space\u2003",
    "# x\u2028y",
    "text line",
    "Text with # inside",
    "`tar cf {{target.tar}} {{file}}`",
    "``code``",
    "-x",
    "-1 negative",
    "_under_",
    "=x",
    "*em*",
    "+1",
    "~tilde",
    "~~strike~~",
    "`` two",
    "[ref]: /url",
    "[ref]: /url 'title",
    "[link](x)",
    "| a | b |",
    "\\# escaped",
    "1.5 release",
    "1234567890. ten digits",
    "12abc",
    "\u0663. arabic digit",
    "> quote",
    ">quote",
    "> More information: <https://example.com>.",
    "> ",
    ">",
    "- item",
    "- Create an archive:",
    "* item",
    "+ item",
    "1. item",
    "2) item",
    "123456789. nine digits",
    "- `cmd`",
    "- -x",
    "",
    "   ",
    "\t",
    " \t ",
    "\u00a0nbsp line",
    "\ufeff# not a heading",
    "<https://autolink> is not html? it is: left to markdown-it",
]
# Lines that must send a file to markdown-it, or that change what a neighbour is.
TRICKY = [
    "===",
    "---",
    "- - -",
    "***",
    "___",
    "=",
    "-",
    "- ",
    "+",
    "  # indented",
    "   # three spaces",
    "    # code",
    "\t# tab code",
    "```",
    "```python",
    "~~~",
    "<div>",
    "</div>",
    "<!-- x -->",
    "<pre>",
    "- # in a list",
    "> # in a quote",
    "> > nested",
    ">  # two spaces",
    ">\t# tab",
    "1) # x",
    "* * *",
    "  - nested",
    "    code",
    "> ===",
    "  ===",
    "- ===",
    "-- ",
    "Setext text",
    "a\x00b",
    "#\x00",
    "-\tx",
    "1.\tx",
    "**bold**",
    "__init__",
    "1.",
    "2)",
    "0. zero",
    "-  two spaces",
]
TLDR_PAGE = """# tar

> Archiving utility.
> Often combined with a compression method, such as `gzip` or `bzip2`.
> More information: <https://www.gnu.org/software/tar>.

- [c]reate an archive and write it to a [f]ile:

`tar cf {{path/to/target.tar}} {{path/to/file1 path/to/file2 ...}}`

- E[x]tract a (compressed) archive [f]ile into the current directory [v]erbosely:

`tar xvf {{path/to/source.tar[.gz|.bz2|.xz]}}`
"""


def _agree(body: str) -> bool:
    """Assert the scan agrees with markdown-it on `body`; True when the scan took it."""
    fast = plain_headings(body)
    if fast is None:
        return False
    assert fast == parsed_headings(body), repr(body)
    return True


def test_a_tldr_page_takes_the_scan_and_agrees():
    assert _agree(TLDR_PAGE)
    assert plain_headings(TLDR_PAGE) == [(1, "tar", 0)]


@pytest.mark.parametrize("line", PLAIN + TRICKY)
def test_each_line_alone_and_between_paragraphs(line: str):
    for body in (
        line,
        f"para\n{line}",
        f"para\n{line}\npara",
        f"# h\n{line}\n# g",
        f"- item\n{line}\n# g",
        f"> quote\n{line}\n## g",
        f"{line}\n===\n",
        f"{line}\n---",
        f"[ref]: /url\n{line}\n# g",
    ):
        _agree(body)


def test_generated_documents_agree_with_markdown_it():
    """Seeded random documents: mostly accepted lines (the scan must be taken often, or this
    test would prove nothing), and documents with a tricky line anywhere."""
    rng = random.Random(18)
    taken = with_headings = 0
    for n in range(6000):
        pool = PLAIN if n % 3 else PLAIN + TRICKY
        body = "\n".join(rng.choice(pool) for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.2:
            body += "\n"
        if _agree(body):
            taken += 1
            with_headings += bool(plain_headings(body))
    assert taken > 2000 and with_headings > 1000


def test_whole_documents_crlf_front_matter_tabs_long_headings():
    """Through `parse_document`: CRLF and CR line ends, a BOM, front matter (the body starts
    below it), tabs, a heading over MAX_HEADING_CHARS."""
    long = "x" * (MAX_HEADING_CHARS + 50)
    docs = [
        TLDR_PAGE.replace("\n", "\r\n"),
        "\ufeff---\ntitle: T\n---\n# One\ntext\n## Two ##\r\nmore\r\n",
        "+++\ntitle = 'T'\n+++\n\n# One\n\ttabbed code\n# Two\n",
        f"# {long}\nbody\n",
        "---\nnot: [closed\n# Heading after bad front matter\nx\n",
        "# A\r# B\rtext\r",
        "Setext\n===\n# atx\n",
    ]
    for raw in docs:
        text, _ = decode(raw.encode())
        _, body_start, _ = split_frontmatter(text)
        doc = parse_document(raw.encode(), "x.md")
        lines = doc.lines
        body = "\n".join(lines[body_start - 1 :])
        expected = headings_of_reference(lines, body_start)
        assert [(h.level, h.text, h.line) for h in doc.headings] == expected, raw
        _agree(body)


def headings_of_reference(lines: list[str], body_start: int) -> list[tuple[int, str, int]]:
    """`headings_of` through markdown-it alone."""
    out = []
    for level, text, line in parsed_headings("\n".join(lines[body_start - 1 :])):
        text = text.strip()
        if len(text) > MAX_HEADING_CHARS:
            text = text[: MAX_HEADING_CHARS - 1].rstrip() + "…"
        out.append((level, text, line + body_start))
    return out


def _corpus_agrees(root: Path) -> tuple[int, int]:
    files = taken = 0
    for path in sorted(root.rglob("*.md")):
        raw = path.read_bytes()
        text, _ = decode(raw)
        _, body_start, _ = split_frontmatter(text)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        got = [(h.level, h.text, h.line) for h in headings_of(lines, body_start)]
        assert got == headings_of_reference(lines, body_start), path
        files += 1
        taken += plain_headings("\n".join(lines[body_start - 1 :])) is not None
    return files, taken


def test_edge_cases_corpus_agrees(corpora_dir: Path):
    files, taken = _corpus_agrees(unpack_corpus(corpora_dir, "edge-cases"))
    assert files > 100 and taken > 10


@pytest.mark.slow
def test_tldr_corpus_agrees(corpora_dir: Path):
    files, taken = _corpus_agrees(unpack_corpus(corpora_dir, "tldr"))
    assert files > 30_000 and taken > files // 2
