"""Problems are state, not a log: `mdvdb status` lists the current problem of every file that
has one, whatever ingest ran last (a full one, an incremental one that did not read the file,
`mdvdb ingest PATH`), sorted by path; a fixed file drops out. The ingests run in this process
(`build_index`: the function the command runs); what the user reads comes from the real CLI.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kernel.config import load_config
from pipeline import ingest_folder
from tests.conftest import build_index, run_cli

BAD = "---\ntitle: [unclosed\n---\n# Note {i}\n\nBody of note {i}.\n"


def _vault(root: Path, bad: int) -> Path:
    root.mkdir()
    for i in range(1, bad + 1):
        (root / f"bad{i:02d}.md").write_text(BAD.format(i=i), encoding="utf-8")
    (root / "good.md").write_text("# Good\n\nA note that parses.\n", encoding="utf-8")
    return root


def _problems(root: Path) -> list[dict]:
    result = run_cli("status", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["errors"]


def test_problems_survive_an_incremental_ingest_and_a_fixed_file_drops_out(tmp_path: Path):
    root = build_index(_vault(tmp_path / "vault", 15))
    expected = [
        {
            "path": f"bad{i:02d}.md",
            "problem": "invalid YAML frontmatter at line 3, column 1: did not find expected ',' "
            "or ']'",
        }
        for i in range(1, 16)
    ]
    assert _problems(root) == expected

    (root / "good.md").write_text("# Good\n\nEdited, still fine.\n", encoding="utf-8")
    build_index(root)  # reads good.md only
    assert _problems(root) == expected
    ingest_folder(load_config(root), [str(root / "good.md")])  # `mdvdb ingest good.md`
    assert _problems(root) == expected

    (root / "bad07.md").write_text("---\ntitle: fixed\n---\n# Note 7\n", encoding="utf-8")
    build_index(root)
    assert _problems(root) == [p for p in expected if p["path"] != "bad07.md"]
    human = run_cli("status", cwd=root)
    assert "problems:   14 files\n" in human.stdout
    listed = [ln.strip() for ln in human.stdout.splitlines() if ln.startswith("  bad")]
    assert listed == [f"{p['path']}: {p['problem']}" for p in expected if p["path"] != "bad07.md"]
    assert "more" not in human.stdout


def test_the_human_status_says_how_many_more_there_are(tmp_path: Path):
    root = build_index(_vault(tmp_path / "vault", 25))
    human = run_cli("status", cwd=root).stdout
    listed = [ln.strip().split(":")[0] for ln in human.splitlines() if ln.startswith("  bad")]
    assert listed == [f"bad{i:02d}.md" for i in range(1, 21)]  # the first 20, by path
    assert "problems:   25 files\n" in human
    assert "  ... and 5 more (`mdvdb status --json` lists them)\n" in human
    assert len(_problems(root)) == 25


def test_a_left_out_file_stays_listed_until_it_is_gone(tmp_path: Path):
    """A file the index does not hold (here a name that is not UTF-8) is recorded beside
    the index, even by a run that changed no file; `mdvdb ingest PATH` of another file does
    not look at it and keeps it; a walk that no longer finds it drops it."""
    root = build_index(_vault(tmp_path / "vault", 1))
    odd = os.path.join(os.fsencode(root), b"caf\xe9.md")
    with open(odd, "wb") as f:
        f.write(b"# Latin-1 name\n")
    build_index(root)  # nothing else changed: the index is republished for the problem
    problems = {p["path"]: p["problem"] for p in _problems(root)}
    assert set(problems) == {"bad01.md", "caf\\xe9.md"}
    assert "not valid UTF-8" in problems["caf\\xe9.md"]

    (root / "good.md").write_text("# Good\n\nEdited.\n", encoding="utf-8")
    ingest_folder(load_config(root), [str(root / "good.md")])
    assert [p["path"] for p in _problems(root)] == ["bad01.md", "caf\\xe9.md"]

    os.unlink(odd)
    build_index(root)
    assert [p["path"] for p in _problems(root)] == ["bad01.md"]
    assert not ingest_folder(load_config(root)).published  # settled: nothing to record
