"""Real third-party corpora (skipped when ../shared/corpora is absent)."""

import json
import shutil
from pathlib import Path

from kernel.config import load_config
from pipeline import ingest
from query import open_index
from tests.conftest import unpack_corpus


def test_edge_cases_every_file_indexed_or_reported(corpora_dir: Path, tmp_path: Path):
    # A copy: ingest writes its index into the folder, and the unpacked corpora are shared.
    root = shutil.copytree(unpack_corpus(corpora_dir, "edge-cases"), tmp_path / "edge-cases")
    config = load_config(root, environ={})
    report = ingest.ingest_folder(config)
    md_files = {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.suffix.lower() in (".md", ".markdown") and p.is_file()
    }
    index = open_index(config=config)
    indexed = set(index.snapshot.paths)
    reported = {path for path, _ in report.errors}
    ignored_parts = {"node_modules", ".git", "build", "dist", "out", "target"}
    expected = {p for p in md_files if not set(p.split("/")) & ignored_parts}
    missing = expected - indexed - reported
    assert not missing, sorted(missing)[:10]
    assert len(indexed) > 300
    # Files with bad frontmatter are indexed and reported.
    bad = [p for p, problem in report.errors if "frontmatter" in problem]
    assert bad and all(p in indexed for p in bad)
    status = index.status()
    assert status.files == len(indexed)
    assert json.dumps(status.to_json())
