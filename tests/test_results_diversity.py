"""Diverse answers, as a user meets them: a section copied into five version folders comes
back once with its copies in `also_in` (CLI JSON, the human line, the library, MCP), one page
cannot fill the answer (the per-file cap), `--files` lists distinct pages, a response still
holds N results after collapsing, excerpts show the passage that matched without markup, and
a query search prints no meaningless "of N matches" count.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli
from tests.json_shapes import call_tool

SECTION = """## Configure the autoscaler

<section class="tab-set">

~~~yaml
min_workers: 1
~~~

</section>

The autoscaler adds worker nodes when tasks wait for resources (docs of version {v}.0). Set
**max_workers** in the [cluster config](https://docs.example.org/v{v}/config.html) to bound
the cluster, and idle_timeout_minutes to remove idle nodes.
"""

PAGE = "# Autoscaling guide\n\n{section}\n## Release {v}\n\nGardening notes {v}: soil and seeds.\n"

# Five sections of one page that all match "autoscaler", for the per-file cap.
CROWDED = "# Autoscaler notes\n\n" + "\n".join(
    f"## Part {i}\n\nThe autoscaler note number {word}: worker pools and scaling {word}.\n"
    for i, word in enumerate(["alpha", "beta", "gamma", "delta", "epsilon"], 1)
)

# A long section whose matching passage sits far from its start, behind markup.
LONG_INTRO = " ".join(
    f"Background sentence {w} about the history of the project and its many contributors."
    for w in ["one", "two", "three", "four", "five", "six"]
)
EXCERPT_PAGE = f"""# Operations handbook

## Backups

<div class="note">

~~~sh
echo preamble
~~~

</div>

{LONG_INTRO}

Restoring a snapshot: run `pg_restore` with the **--clean** flag, as the
[restore guide](https://example.org/restore) says, then verify the checksum file.

{LONG_INTRO}
"""

MIRRORED = """# Mirror

## Shard layout

Shards are placed on nodes by the shard layout placement policy, one replica per rack.
"""

SEMANTIC_PAGE = """# Miscellany

## Assorted facts

Stock markets closed higher on Tuesday after the central bank held its interest rates.
Bake the bread at a high oven temperature until the crust turns deep brown and crisp.
The puppy wagged its tail and barked happily when the children came home from school.
Quarterly earnings reports showed that revenue grew faster than operating expenses.
Knead the dough for ten minutes, then let it rise in a warm place for about an hour.
Tax filings for the fiscal year must reach the revenue office before the end of April.
"""


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("diversity") / "docs"
    for v in range(1, 6):
        page = root / f"v{v}" / "page.md"
        page.parent.mkdir(parents=True)
        page.write_text(PAGE.format(section=SECTION.format(v=v), v=v))
    (root / "crowded.md").write_text(CROWDED)
    for name in ("pools", "queues", "limits"):
        (root / f"{name}.md").write_text(
            f"# {name.title()}\n\n## Behaviour\n\nHow the autoscaler treats {name} of worker "
            "nodes.\n"
        )
    # More copies of one section than a search ranks at first (query.rank.collapse.fetch_size)
    for i in range(40):
        mirror = root / "mirror" / f"m{i:02}.md"
        mirror.parent.mkdir(exist_ok=True)
        mirror.write_text(MIRRORED)
    (root / "shards.md").write_text("# Notes\n\n## Misc\n\nShard placement is manual here.\n")
    (root / "handbook.md").write_text(EXCERPT_PAGE)
    (root / "misc.md").write_text(SEMANTIC_PAGE)
    return build_index(root)


def search_json(root: Path, *args: str, env: dict | None = None) -> dict:
    done = run_cli("search", *args, "--json", "--root", str(root), env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def versioned(results: list[dict]) -> list[dict]:
    return [r for r in results if r["path"].endswith("page.md") and r["start_line"] == 3]


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "lexical"])
def test_copies_in_five_version_folders_come_back_once(docs: Path, mode: str) -> None:
    data = search_json(docs, "autoscaler max_workers idle nodes", "--mode", mode, "-n", "10")
    copies = versioned(data["results"])
    assert len(copies) == 1, [r["path"] for r in data["results"]]
    hit = copies[0]
    others = {f"v{v}/page.md" for v in range(1, 6)} - {hit["path"]}
    assert {c["path"] for c in hit["also_in"]} == others
    span = (hit["start_line"], hit["end_line"])
    assert all((c["start_line"], c["end_line"]) == span for c in hit["also_in"])
    assert hit["also_in_count"] == 4
    # the existing fields are all still there
    assert {"path", "heading", "heading_path", "start_line", "end_line", "score", "excerpt"} <= set(
        hit
    )


def test_human_output_says_also_in_other_files(docs: Path) -> None:
    done = run_cli("search", "autoscaler max_workers idle nodes", "--root", str(docs))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    shown = [line for line in lines if "page.md:3-" in line]
    assert len(shown) == 1
    at = lines.index(shown[0])
    also = next(line for line in lines[at:] if "also in" in line)
    assert also.strip().startswith("also in 4 other files: v")
    # no count of every chunk that scored above 0
    assert not any(line.startswith("Showing top") for line in lines)


def test_library_collapses_and_can_be_asked_not_to(docs: Path) -> None:
    from query import open_index
    from query.request import SearchRequest, run_request

    index = open_index(docs)
    hits = index.search("autoscaler max_workers idle nodes", limit=10).results
    copies = [h for h in hits if h.path.endswith("page.md") and h.start_line == 3]
    assert len(copies) == 1 and copies[0].also_in_count == 4
    every = index.search("autoscaler max_workers idle nodes", limit=10, collapse=False).results
    assert len([h for h in every if h.path.endswith("page.md") and h.start_line == 3]) == 5
    with index.pinned():
        outcome = run_request(index, SearchRequest(query="autoscaler max_workers", limit=10))
    tiered = [h for _, h in outcome.tiers.results if h.path.endswith("page.md")]
    assert len([h for h in tiered if h.start_line == 3]) == 1


@pytest.mark.slow
def test_one_page_cannot_fill_the_answer(docs: Path) -> None:
    def from_crowded(*args: str, env: dict | None = None) -> int:
        data = search_json(docs, "autoscaler note worker pools", "-n", "20", *args, env=env)
        return sum(r["path"] == "crowded.md" for r in data["results"])

    assert from_crowded() == 3  # the default cap
    assert from_crowded("--per-file", "1") == 1
    assert from_crowded("--per-file", "0") == 5  # no cap
    assert from_crowded(env={"MDVDB_SEARCH_PER_FILE": "2"}) == 2
    bad = run_cli("search", "autoscaler", "--per-file", "-1", "--root", str(docs))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_files_lists_distinct_pages(docs: Path) -> None:
    data = search_json(docs, "autoscaler", "--files", "-n", "5")
    paths = [f["path"] for f in data["files"]]
    assert len(paths) == 5 and len(set(paths)) == 5
    # the five version folders are one page's copies: at most one of them is listed
    assert sum(p.endswith("page.md") for p in paths) == 1
    human = run_cli("search", "autoscaler", "--files", "-n", "5", "--root", str(docs))
    assert len(set(human.stdout.split())) - len(human.stdout.splitlines()) == 5  # 5 paths


def test_collapsing_still_fills_the_answer(docs: Path) -> None:
    """Sections with "worker": 5 copies (1 after collapsing), 5 crowded sections (3 after the
    cap) and 3 small pages, none under a heading that holds the word. Asking for 7 gives 7."""
    data = search_json(docs, "worker", "--mode", "lexical", "-n", "7")
    keys = [(r["path"], r["start_line"]) for r in data["results"]]
    assert len(keys) == 7 and len(set(keys)) == 7
    # 40 copies in 40 of the 52 files are boilerplate (query.rank.collapse): the one other
    # page holding the words is the answer, the copies are not
    data = search_json(docs, "shard placement", "--mode", "lexical", "-n", "2")
    paths = [r["path"] for r in data["results"]]
    assert paths == ["shards.md"], paths
    # words only the copies hold: one of them, first, marked as a repeated block
    data = search_json(docs, "rack replica", "--mode", "lexical", "-n", "2")
    first = data["results"][0]
    assert first["path"].startswith("mirror/") and first["tier"] == "repeated"
    assert first["also_in_count"] == 39 and len(first["also_in"]) == 20  # the count has all
    assert not any(r["path"].startswith("mirror/") for r in data["results"][1:])


def test_excerpt_is_the_matched_passage_without_markup(docs: Path) -> None:
    data = search_json(docs, "restore snapshot checksum", "--mode", "lexical", "-n", "1")
    hit = data["results"][0]
    assert hit["path"] == "handbook.md"
    excerpt = hit["excerpt"]
    assert "Restoring a snapshot: run pg_restore with the --clean flag" in excerpt
    assert "restore guide says, then verify the checksum file" in excerpt
    for markup in ("~~~", "<div", "<section", "](", "**", "`"):
        assert markup not in excerpt
    assert excerpt.startswith("…") and len(excerpt) <= 301
    # the section's line range is kept; the excerpt's own lines are inside it
    lines = EXCERPT_PAGE.splitlines()
    first, last = hit["excerpt_lines"]
    assert hit["start_line"] <= first <= last <= hit["end_line"]
    assert "Restoring a snapshot" in lines[first - 1] or "Restoring" in "".join(
        lines[first - 1 : last]
    )


def test_excerpt_by_meaning_when_no_word_matches(docs: Path) -> None:
    """No word of the query is in the section: the sentence closest in meaning is shown."""
    data = search_json(docs, "dog", "--mode", "semantic", "-n", "10")
    hit = next(r for r in data["results"] if r["path"] == "misc.md")
    assert "puppy" in hit["excerpt"]
    assert not hit["excerpt"].startswith("Stock markets")


@pytest.mark.slow
def test_mcp_search_lists_the_copies(docs: Path) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    async def call() -> dict:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mdvdb", "mcp", "--root", str(docs)]
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            found = await call_tool(
                session, "search", {"query": "autoscaler max_workers idle nodes", "limit": 10}
            )
            capped = await call_tool(
                session,
                "search",
                {"query": "autoscaler note worker pools", "limit": 20, "per_file": 1},
            )
            return {"found": found.structured_content, "capped": capped.structured_content}

    answers = asyncio.run(call())
    results = answers["found"]["results"]
    copies = [r for r in results if r["path"].endswith("page.md") and r["start_line"] == 3]
    assert len(copies) == 1
    assert len(copies[0]["also_in"]) == 4
    lines = (copies[0]["start_line"], copies[0]["end_line"])
    assert all((c["start_line"], c["end_line"]) == lines for c in copies[0]["also_in"])
    capped = answers["capped"]["results"]
    assert sum(r["path"] == "crowded.md" for r in capped) == 1
