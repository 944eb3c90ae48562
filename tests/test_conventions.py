"""Markdown as Obsidian vaults and docs sites write it (issue 35), through the real CLI and an
MCP client: comments never indexed nor shown, aliases as titles, wikilinks and escapes shown
as a reader sees them, inline #tags for --tag, boilerplate footers kept out of answers, and
the vault's own folders left out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli
from tests.json_shapes import call_tool

COMMENTS = """# Publishing

Share a vault as a website. <!-- zzhtmlhidden inline -->Visible words follow.
<!--
zzhtmlhidden over
several lines
-->
Obsidian comments: %%zzpcthidden%% gone.
%%
zzpcthidden block
%%

## Kept as code

```html
<!-- zzfencedword stays: a fenced comment is code -->
```

Inline code `%%zzspanword%%` stays too.
"""

LINKS = r"""# Plugins

Mobile support: [[Mobile-compatible plugins|Yes]]; see [[Community plugins]] and
[[Settings#Hotkeys]]. ![[diagram.png]]

## Uses [[dataview|Dataview]]

Queries with zzqueryword. \#NotATag and \*not emphasis\*.
"""

TAGS = """# Tagged

Working notes #pkm and #Project/alpha, an issue number #123 (not a tag).
A link [to a heading](#anchor), a URL http://example.org/#fragment, an \\#escaped one.
Some <span style="background: #fff">styled</span> text and <code>#htmlcode</code>.

```
#incode is code
```

Inline `#inspan` is code too.
"""

FRONT_TAGS = """---
tags: [pkm, reading]
---
# Reading list

Books to read.
"""

MOC = """---
aliases: [MOC]
---
# Maps of content

A note that links other notes into one overview page, a hub for a topic.
"""


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conventions") / "vault"
    (root / "templates").mkdir(parents=True)
    for i in range(60):  # a template's empty `## MOC` heading in sixty notes
        (root / "templates" / f"daily-{i:02}.md").write_text(
            f"# Daily {i}\n\n## MOC\n\n## Log\n\nWalked {i} km and read about topic {i}.\n"
        )
    (root / "moc.md").write_text(MOC)
    (root / "zettel.md").write_text("---\nalias: Slip box\n---\n# Zettelkasten\n\nCards.\n")
    (root / "comments.md").write_text(COMMENTS)
    (root / "links.md").write_text(LINKS)
    (root / "tags.md").write_text(TAGS)
    (root / "reading.md").write_text(FRONT_TAGS)
    for hidden in (".trash", ".obsidian"):  # Obsidian's own folders
        (root / hidden).mkdir()
        (root / hidden / "old.md").write_text("# Deleted\n\nzztrashword lives here.\n")
    return build_index(root)


def search_json(root: Path, *args: str) -> dict:
    done = run_cli("search", *args, "--json", "--root", str(root))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_comments_are_not_indexed_nor_shown(vault: Path) -> None:
    for word in ("zzhtmlhidden", "zzpcthidden"):
        assert search_json(vault, word, "--mode", "lexical")["results"] == [], word
    data = search_json(vault, "share vault website", "-n", "3")
    hit = next(r for r in data["results"] if r["path"] == "comments.md")
    assert (
        "zz" not in hit["excerpt"] and "%%" not in hit["excerpt"] and "<!--" not in hit["excerpt"]
    )
    # lines still point at the file: the section runs from its heading, comments included
    assert hit["start_line"] == 1 and hit["end_line"] >= line_of(COMMENTS, "gone.")
    human = run_cli("search", "share vault website", "--root", str(vault)).stdout
    assert "zzhtmlhidden" not in human and "zzpcthidden" not in human
    # code is code: a fenced comment and a code span are indexed as written
    for word, needle in (("zzfencedword", "zzfencedword"), ("zzspanword", "zzspanword")):
        found = search_json(vault, word, "--mode", "lexical")["results"]
        assert [r["path"] for r in found] == ["comments.md"], word
        assert found[0]["start_line"] <= line_of(COMMENTS, needle) <= found[0]["end_line"]


def test_an_alias_finds_its_note_first(vault: Path) -> None:
    for extra in ((), ("--no-collapse",), ("--mode", "lexical")):
        data = search_json(vault, "what is a MOC", *extra)
        first = data["results"][0]
        assert (first["path"], first["tier"]) == ("moc.md", "title"), (extra, first)
        # a heading is not a title: the sixty templates are never title matches
        assert not any(r["tier"] == "title" for r in data["results"][1:]), extra
    # `alias:` as one string counts too
    assert search_json(vault, "slip box")["results"][0]["path"] == "zettel.md"


def test_wikilinks_and_escapes_read_as_shown(vault: Path) -> None:
    data = search_json(vault, "mobile support", "-n", "1")
    hit = data["results"][0]
    assert hit["path"] == "links.md"
    assert "Mobile support: Yes; see Community plugins and Settings Hotkeys." in hit["excerpt"]
    assert "[[" not in hit["excerpt"] and "diagram.png" in hit["excerpt"]
    data = search_json(vault, "zzqueryword", "--mode", "lexical")
    hit = data["results"][0]
    assert hit["heading_path"] == ["Plugins", "Uses Dataview"]
    assert "#NotATag and *not emphasis*." in hit["excerpt"]
    human = run_cli("search", "zzqueryword", "--root", str(vault)).stdout
    assert "Plugins > Uses Dataview" in human and "[[" not in human and "\\#" not in human
    # the visible text is what is indexed: the label, not the hidden target
    assert search_json(vault, "dataview", "--mode", "lexical")["results"][0]["path"] == "links.md"


def paths_with_tag(vault: Path, tag: str) -> list[str]:
    return sorted(r["path"] for r in search_json(vault, "--tag", tag)["results"])


def test_inline_tags_filter_beside_frontmatter_tags(vault: Path) -> None:
    assert paths_with_tag(vault, "pkm") == ["reading.md", "tags.md"]  # inline + frontmatter
    assert paths_with_tag(vault, "PROJECT/ALPHA") == ["tags.md"]  # any case, nested
    assert paths_with_tag(vault, "reading") == ["reading.md"]
    not_tags = ("123", "anchor", "fragment", "escaped", "incode", "inspan", "NotATag", "fff")
    for not_a_tag in (*not_tags, "htmlcode"):
        done = run_cli("search", "--tag", not_a_tag, "--root", str(vault))
        assert done.returncode == 0 and done.stdout.startswith("No matches. Valid values:")
        assert "pkm" in done.stdout and not_a_tag.lower() not in done.stdout.lower()
    # with a query, the keyword rule holds inside the tagged notes
    data = search_json(vault, "working notes", "--tag", "pkm")
    assert [r["path"] for r in data["results"]] == ["tags.md"]


def test_obsidian_folders_are_not_indexed(vault: Path) -> None:
    assert search_json(vault, "zztrashword", "--mode", "lexical")["results"] == []
    status = json.loads(run_cli("status", "--json", "--root", str(vault)).stdout)
    assert status["files"] == 66


FOOTER = "\n\n---\n\nPublished with zzfooterword and the vault template. Licensed CC BY.\n"
WORDS = "river mountain forest engine garden paper window castle planet music harbor lantern"


@pytest.fixture(scope="module")
def footers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 notes, each ending with the same footer holding a rare word; three of them use
    another rare word in real content, which the footer also holds."""
    root = tmp_path_factory.mktemp("footers") / "notes"
    root.mkdir()
    words = WORDS.split()
    for i in range(200):
        body = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(30))
        real = ""
        if i in (17, 90, 151):
            reason = {17: "sharing photos", 90: "quoting a book", 151: "forking code"}[i]
            real = f"\n\n## Licensing\n\nWhy zzlicenseword matters when {reason}.\n"
        footer = FOOTER.replace("CC BY", "CC BY, zzlicenseword")
        (root / f"note-{i:03}.md").write_text(
            f"# Note {i}\n\n{body} topic{i}{real}\n## Footer{footer}"
        )
    return build_index(root)


def test_a_footer_never_fills_the_answer(footers: Path) -> None:
    # real content holds the word: only it, never a footer
    data = search_json(footers, "zzlicenseword")
    assert all("Footer" not in r["heading_path"] for r in data["results"]), data["results"]
    assert {r["path"] for r in data["results"][:3]} == {
        "note-017.md",
        "note-090.md",
        "note-151.md",
    }
    # only the footer holds the word: one result, first, saying it is a repeated block
    data = search_json(footers, "zzfooterword")
    repeated = [r for r in data["results"] if "Footer" in r["heading_path"]]
    assert len(repeated) == 1 and data["results"][0] is repeated[0]
    assert repeated[0]["tier"] == "repeated" and repeated[0]["also_in_count"] == 199
    human = run_cli("search", "zzfooterword", "--root", str(footers)).stdout
    assert "## Only In A Repeated Block" in human and "also in 199 other files" in human
    # every copy on request
    every = search_json(footers, "zzfooterword", "--no-collapse", "--mode", "lexical", "-n", "50")
    assert len(every["results"]) == 50


def test_mcp_search_applies_the_conventions(vault: Path, footers: Path, tmp_path: Path) -> None:
    from tests.test_agents_mcp import session_run

    async def steps(session) -> dict:
        async def call(arguments: dict) -> dict:
            return (await call_tool(session, "search", arguments)).structured_content

        return {
            "comment": await call({"query": "zzpcthidden", "mode": "lexical"}),
            "alias": await call({"query": "what is a MOC"}),
            "tag": await call({"query": "working notes", "tag": "pkm"}),
        }

    got = asyncio.run(session_run(vault, steps, tmp_path / "vault.log"))
    assert got["comment"]["results"] == []
    assert got["alias"]["results"][0]["path"] == "moc.md"
    assert [r["path"] for r in got["tag"]["results"]] == ["tags.md"]

    async def footer(session) -> dict:
        found = await call_tool(session, "search", {"query": "zzfooterword", "limit": 3})
        return found.structured_content

    reply = asyncio.run(session_run(footers, footer, tmp_path / "footers.log"))
    first = reply["results"][0]
    assert first["tier"] == "repeated" and first["also_in_count"] == 199
    assert "also_in" not in first  # the count, not 199 paths
    assert not any(r["tier"] == "repeated" for r in reply["results"][1:])
