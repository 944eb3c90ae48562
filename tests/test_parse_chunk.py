from pipeline.chunking import chunk_document
from pipeline.parse import parse_document


def test_frontmatter_is_metadata_not_body():
    doc = parse_document(b"---\ntitle: Hello\ntags: [a, b]\n---\n# Heading\n\nBody\n", "x.md")
    assert doc.metadata == {"title": "Hello", "tags": ["a", "b"]}
    assert doc.title == "Hello"
    assert doc.body_start == 5
    chunks = chunk_document(doc, 512, 50)
    assert all("tags:" not in c.embed_text for c in chunks)
    assert chunks[0].start_line == 5


def test_bom_and_crlf():
    raw = "\ufeff---\r\ntitle: T\r\n---\r\n# One\r\n\r\nText\r\n".encode()
    doc = parse_document(raw, "x.md")
    assert doc.metadata == {"title": "T"}
    assert [h.text for h in doc.headings] == ["One"]
    assert doc.headings[0].line == 4
    assert "\r" not in "".join(doc.lines)


def test_invalid_yaml_keeps_body_and_reports_line():
    raw = b"---\ntitle: ok\nbad: [unclosed\nmore: x\n---\n# Still here\n\ntext\n"
    doc = parse_document(raw, "x.md")
    assert doc.metadata == {}
    assert doc.error and "invalid YAML" in doc.error and "line" in doc.error
    assert [h.text for h in doc.headings] == ["Still here"]
    assert chunk_document(doc, 512, 50)[0].heading == "Still here"


def test_hash_in_code_fence_is_not_a_heading_and_setext_is():
    raw = b"Title\n=====\n\n```sh\n# not a heading\n```\n\nSub\n---\n\ntext\n"
    doc = parse_document(raw, "x.md")
    assert [(h.level, h.text, h.line) for h in doc.headings] == [(1, "Title", 1), (2, "Sub", 8)]


def test_heading_paths_and_line_ranges_match_the_file():
    text = (
        "# Install\n\nIntro text.\n\n## Linux\n\napt install x\n\n## macOS\n\nbrew install x\n\n"
        "# Usage\n\nRun it.\n"
    )
    doc = parse_document(text.encode(), "x.md")
    chunks = chunk_document(doc, 512, 50)
    lines = text.split("\n")
    assert [c.heading_path for c in chunks] == [
        ["Install"],
        ["Install", "Linux"],
        ["Install", "macOS"],
        ["Usage"],
    ]
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
    # Ancestor headings give context to the embedded text.
    assert chunks[1].embed_text.startswith("Install\n## Linux")


def test_oversized_section_becomes_overlapping_windows():
    body = "\n".join(f"line {i} with some words to count as tokens" for i in range(200))
    doc = parse_document(f"# Big\n\n{body}\n".encode(), "x.md")
    chunks = chunk_document(doc, 64, 16)
    assert len(chunks) > 5
    assert all(c.token_count <= 64 for c in chunks)
    assert all(c.heading_path == ["Big"] for c in chunks)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start_line <= a.end_line  # overlap
        assert b.start_line > a.start_line  # progress
    assert chunks[-1].end_line == len(doc.lines)


def test_file_without_headings_is_one_chunk_and_empty_file_none():
    doc = parse_document(b"just some text\nand more\n", "notes.md")
    chunks = chunk_document(doc, 512, 50)
    assert len(chunks) == 1 and chunks[0].heading_path == [] and doc.title == "notes"
    assert chunk_document(parse_document(b"", "e.md"), 512, 50) == []


def test_single_huge_line_is_split():
    doc = parse_document(("word " * 3000).encode(), "x.md")
    chunks = chunk_document(doc, 128, 16)
    assert len(chunks) >= 20
    assert all(c.start_line == c.end_line == 1 for c in chunks)


# (file bytes, the exact problem): the line and column count in the file itself, whatever
# precedes the frontmatter's text (a blank line after `---`, a BOM, CRLF), and the character
# is named as PyYAML names it.
YAML_PROBLEMS = [
    (
        b"---\ntitle: [bad\n---\n# N\n",
        "invalid YAML frontmatter at line 3, column 1: did not find expected ',' or ']'",
    ),
    (
        b"---\na: 1\nb: : x\n---\nbody\n",
        "invalid YAML frontmatter at line 3, column 4: mapping values are not allowed in this "
        "context",
    ),
    (
        b"---\n\na: 1\nb: : x\n---\nbody\n",
        "invalid YAML frontmatter at line 4, column 4: mapping values are not allowed in this "
        "context",
    ),
    (
        b"---\na: @x\n---\n",
        "invalid YAML frontmatter at line 2, column 4: found character '@' that cannot start "
        "any token",
    ),
    (
        b"\xef\xbb\xbf---\r\ntitle: ok\r\na: `x\r\n---\r\n",
        "invalid YAML frontmatter at line 3, column 4: found character '`' that cannot start "
        "any token",
    ),
    (
        b'---\na: "\\q"\n---\n',
        "invalid YAML frontmatter at line 2, column 5: found unknown escape character 'q'",
    ),
    (
        b"---\na: *nope\n---\n",
        "invalid YAML frontmatter at line 2, column 4: found undefined alias 'nope'",
    ),
    (
        b'---\ntitle: ok\na: "x\x07"\n---\n',
        "invalid YAML frontmatter at line 3: unacceptable character #x0007: control "
        "characters are not allowed",
    ),
]


def test_yaml_problems_name_the_line_and_the_character():
    for raw, expected in YAML_PROBLEMS:
        assert parse_document(raw, "x.md").error == expected, raw


def test_comments_are_blanked_line_for_line_and_hide_headings():
    raw = (
        b"---\ntitle: T\naliases: Other name\n---\n"
        b"# Top\n\nkept <!-- gone --> text\n%%\n## Not a heading\nsecret\n%%\n"
        b"## Real [[target|Label]] \\#x\n\nbody #tag\n"
    )
    doc = parse_document(raw, "n.md")
    assert len(doc.lines) == raw.decode().count("\n")  # no line lost
    assert [(h.level, h.text, h.line) for h in doc.headings] == [
        (1, "Top", 5),
        (2, "Real Label #x", 12),
    ]
    assert doc.lines[6] == "kept  text" and doc.lines[7:10] == ["", "", ""]
    assert doc.aliases == ["Other name"] and doc.tags == ["tag"]
    chunks = chunk_document(doc, 512, 64)
    assert [(c.start_line, c.end_line) for c in chunks] == [(5, 7), (12, 14)]
    assert not any("secret" in c.text or "gone" in c.text for c in chunks)


def test_title_is_frontmatter_then_first_h1_then_file_name():
    assert parse_document(b"## Only an H2\n\ntext\n", "dir/my-note.md").title == "my-note"
    assert parse_document(b"## H2\n\n# The H1\n", "n.md").title == "The H1"
