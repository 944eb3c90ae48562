"""Small footprint: model tables once per user; a state folder that does not repeat the index."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernel import user_cache
from kernel.config import load_config
from kernel.providers.local import tokenizer_path, weights_path
from pipeline import ingest
from pipeline.chunking import chunk_document, chunking_key
from pipeline.links import LINKS_VERSION
from pipeline.parse import parse_document
from pipeline.state import State, embed_text_of
from tests.conftest import run_cli, unpack_corpus

MB = 1024 * 1024


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def cache_rows(state: Path) -> dict[str, int]:
    db = sqlite3.connect(state / "cache.sqlite3")
    try:
        tables = ("parsed", "chunks", "embeddings", "embedded")
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        db.close()


@pytest.mark.slow
def test_one_page_project_keeps_its_state_small_and_the_model_table_per_user(tmp_path: Path):
    cache = tmp_path / "user-cache"
    env = {"MDVDB_CACHE_DIR": str(cache)}
    first, second = tmp_path / "one", tmp_path / "two"
    for root in (first, second):
        root.mkdir()
        (root / "page.md").write_text("# One page\n\nExtract a tar archive.\n", encoding="utf-8")
        out = run_cli("ingest", "--root", str(root), env=env)
        assert out.returncode == 0, out.stderr
        state = root / ".markdownvdb.state"
        assert folder_bytes(state) < 5 * MB, sorted(p.name for p in state.iterdir())
        assert not list(state.glob("*.npy")) and not (state / "lexical-cache.npz").exists()

    # One table for both projects, named by the SHA-256 of the weights it came from.
    tables = list((cache / "models").glob("*.f32.npy"))
    assert [t.name for t in tables] == [f"{sha256_file(weights_path())}.f32.npy"]
    stamp = tables[0].stat().st_mtime_ns
    bpe = list((cache / "models").glob("*.bpe.sqlite3"))
    assert [b.name for b in bpe] == [f"{sha256_file(tokenizer_path())}.bpe.sqlite3"]

    # A read-only search writes nothing into the project.
    before = {p: p.stat().st_size for p in (first / ".markdownvdb.state").iterdir()}
    out = run_cli("search", "tar archive", "--root", str(first), env=env)
    assert out.returncode == 0 and "page.md" in out.stdout, out.stderr
    assert {p: p.stat().st_size for p in (first / ".markdownvdb.state").iterdir()} == before
    assert tables[0].stat().st_mtime_ns == stamp  # reused, not rewritten


def test_the_cache_folder_is_the_users_and_can_be_overridden(tmp_path: Path):
    import platformdirs

    home = {"HOME": str(tmp_path / "home")}
    assert user_cache.cache_dir({"MDVDB_CACHE_DIR": str(tmp_path / "x")}) == tmp_path / "x"
    script = "import platformdirs; print(platformdirs.user_cache_dir('mdvdb', appauthor=False))"
    for env in (home, {**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}):
        # What platformdirs says in a process with exactly this environment.
        said = subprocess.run(
            [sys.executable, "-c", script],
            env={**env, "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert user_cache.cache_dir(env) == Path(said), env
    assert platformdirs  # the dependency is installed with mdvdb


@pytest.mark.slow
def test_two_processes_building_the_table_at_once_both_get_a_whole_one(tmp_path: Path):
    cache = tmp_path / "fresh-cache"
    code = (
        "from kernel.providers.local import LocalProvider\n"
        "v = LocalProvider().embed(['extract a tar archive', 'rotate a key'])\n"
        "print(v.shape)\n"
    )
    env = {**os.environ, "MDVDB_CACHE_DIR": str(cache)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs) and set(outs) == {"(2, 256)\n"}
    models = cache / "models"
    assert not [p for p in models.rglob("*") if p.name.endswith(".tmp")]
    import numpy as np

    table = np.load(next(models.glob("*.f32.npy")), mmap_mode="r")
    assert table.dtype == np.float32 and table.shape[1] == 256


def test_the_state_keeps_only_what_the_index_lacks(notes: Path):
    config = load_config(notes, environ={})
    ingest.ingest_folder(config)
    assert cache_rows(config.state_path) == dict.fromkeys(cache_rows(config.state_path), 0)

    # The records the index holds come back from it exactly as chunking made them.
    with State(config.state_path, index_path=config.index_path) as state:
        shas = [e.sha256 for e in state.manifest().values()]
        from_index = state.get_chunks(f"{chunking_key(512, 50)}:{LINKS_VERSION}", shas)
    assert len(from_index) == 4
    for path in ("tar.md", "guides/cooking.md"):
        raw = (notes / path).read_bytes()
        doc = parse_document(raw, path)
        record = from_index[state_sha(config, path)]
        made = [c.to_json() for c in chunk_document(doc, 512, 50)]
        assert record["chunks"] == made and record["title"] == doc.title
        assert all(embed_text_of(c["heading_path"], c["text"]) == c["embed_text"] for c in made)

    # An edit: one file parsed and embedded, nothing else; then the state is empty again.
    (notes / "tar.md").write_text("# tar\n\n## Create\n\nNew text.\n", encoding="utf-8")
    report = ingest.ingest_folder(config)
    assert report.parsed == 1 and 0 < report.chunks_embedded <= 2
    assert cache_rows(config.state_path) == dict.fromkeys(cache_rows(config.state_path), 0)
    # Touched but unchanged: nothing parsed, nothing embedded.
    os.utime(notes / "git-basics.md")
    report = ingest.ingest_folder(config)
    assert report.parsed == 0 and report.chunks_embedded == 0
    # `--full` parses everything again, embeds nothing (vectors come from the index), and
    # leaves nothing behind that the index holds.
    report = ingest.ingest_folder(config, full=True)
    assert report.parsed == 4 and report.chunks_embedded == 0
    assert cache_rows(config.state_path) == dict.fromkeys(cache_rows(config.state_path), 0)


def state_sha(config, path: str) -> str:
    with State(config.state_path) as state:
        return state.manifest()[path].sha256


def test_an_old_state_folder_is_cleaned_and_shrunk(notes: Path):
    """A state folder written before: the per-project table, the BPE DB and the analysis
    cache go, and the database gives its pages back."""
    config = load_config(notes, environ={})
    ingest.ingest_folder(config)
    state = config.state_path
    for name in ("local-l2_supercat-16384096-1.f32.npy", "local-l2_supercat-bpe-1-2.sqlite3"):
        (state / name).write_bytes(b"\0" * 1024)
    (state / "lexical-cache.npz").write_bytes(b"\0" * 1024)
    db = sqlite3.connect(state / "cache.sqlite3")
    db.execute("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
    db.executemany("INSERT INTO filler VALUES (?)", ((b"\0" * 4000,) for _ in range(2000)))
    db.commit()
    db.execute("DROP TABLE filler")
    db.commit()
    db.close()
    (notes / "extra.md").write_text("# Extra\n\ntext\n", encoding="utf-8")
    ingest.ingest_folder(config)
    assert sorted(p.name for p in state.iterdir() if p.suffix in (".npy", ".npz")) == []
    assert not list(state.glob("*bpe*"))
    assert folder_bytes(state) < 2 * MB


def test_a_lost_state_folder_costs_no_parse(notes: Path):
    """The index is the cache of what it holds: with the state folder gone, the next ingest
    re-hashes every file but parses and embeds none."""
    config = load_config(notes, environ={})
    ingest.ingest_folder(config)
    shutil.rmtree(config.state_path)
    report = ingest.ingest_folder(config)
    assert report.parsed == 0 and report.chunks_embedded == 0 and report.files == 4


@pytest.mark.corpus
@pytest.mark.slow
def test_nfcorpus_footprint_meets_the_goal(corpora_dir: Path, tmp_path: Path):
    """The whole on-disk footprint (index + state folder) of NFCorpus after `mdvdb ingest`:
    at most 2 x (its Markdown + its float32 vectors), and at most qmd's 15 MB."""
    root = tmp_path / "nfcorpus"
    shutil.copytree(unpack_corpus(corpora_dir, "nfcorpus") / "md", root)
    env = {"MDVDB_CACHE_DIR": str(tmp_path / "user-cache")}
    out = run_cli("ingest", "--json", "--root", str(root), env=env)
    assert out.returncode == 0, out.stderr
    import json

    from kernel import index_format

    chunks = json.loads(out.stdout)["chunks"]
    index = root / ".markdownvdb.index"
    dims = int(index_format.read_meta(index)["dimensions"])
    markdown = sum(p.stat().st_size for p in root.glob("*.md"))
    total = index.stat().st_size + folder_bytes(root / ".markdownvdb.state")
    goal = 2 * (markdown + chunks * dims * 4)
    print(f"\nNFCorpus: index + state {total / 1e6:.2f} MB, goal {goal / 1e6:.2f} MB")
    assert total <= goal and total <= 15e6, (total, goal)
