"""Lexical and hybrid search: real folders, the real pipeline, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel import index_format
from kernel.config import load_config
from kernel.text_analysis import words
from pipeline.ingest import ingest_folder as ingest
from query import open_index
from tests.conftest import run_cli
from tests.fake_embeddings import FakeEmbeddingServer

PAGES = {
    "zh/tar.md": "# tar\n\n压缩和解压文件的归档工具。\n\n- 创建一个压缩归档：`tar czf 目标.tar.gz 文件`\n",  # noqa: E501
    "ja/tar.md": "# tar\n\nファイルをアーカイブして圧縮するユーティリティ。\n\n- 展開する：`tar xf a.tar`\n",  # noqa: E501
    "ru/tar.md": (
        "# tar\n\nУтилита для создания архивов и сжатия файлов.\n\n"
        "- Распаковать архив: `tar xf a.tar`\n"
    ),
    "en/tar.md": (
        "# tar\n\nArchiving utility.\n\n- Create an archive from files: `tar cf a.tar f1 f2`\n"
    ),
    "en/kubernetes.md": (
        "# Kubernetes\n\nOrchestrate containers across a cluster of machines.\n\n"
        "## Deployments\n\nRoll out a new version of an application.\n"
    ),
    "en/cooking.md": (
        "# Bread\n\nMix flour, water, salt and yeast; knead the dough for ten minutes, let it rise "
        "for an hour, shape it, let it rise again and bake it in a hot oven until the crust is "
        "brown. My friend who runs kubernetes at work says the same patience applies to ovens "
        "and to proofing baskets, and that the crumb tells you everything about the dough.\n"
    ),
}


def write_pages(root: Path, pages: dict[str, str]) -> None:
    for rel, text in pages.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lexical") / "notes"
    write_pages(root, PAGES)
    ingest(load_config(root, environ={}))
    return root


def search_paths(root: Path, query: str, mode: str) -> list[str]:
    index = open_index(config=load_config(root, environ={}))
    return [hit.path for hit in index.search(query, mode=mode, limit=5).results]


def test_analyzer_splits_scripts_stems_english_and_drops_stop_words():
    assert words("The Running archives") == ["run", "archiv"]
    assert words("压缩文件") == ["压缩", "缩文", "文件"]
    assert words("архивов") == ["архив"]
    assert words("snake_case tar.gz") == ["snake", "case", "tar", "gz"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [("压缩归档", "zh/tar.md"), ("圧縮する", "ja/tar.md"), ("архивы сжатие", "ru/tar.md")],
)
def test_non_latin_query_finds_its_page(project: Path, query: str, expected: str):
    assert search_paths(project, query, "lexical")[0] == expected
    assert search_paths(project, query, "hybrid")[0] == expected


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_heading_match_outranks_a_passing_body_mention(project: Path, mode: str):
    found = search_paths(project, "kubernetes", mode)
    assert found.index("en/kubernetes.md") < found.index("en/cooking.md")


def test_explain_parts_add_up_to_the_fused_score(project: Path):
    out = run_cli(
        "search", "create an archive", "--explain", "--json", "-n", "5", "--root", str(project)
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mode"] == "hybrid"
    assert data["results"]
    for hit in data["results"]:
        parts = hit["explain"]
        additive = parts["lexical"] + parts.get("feedback", 0.0) + parts["semantic"]
        additive += parts["page"] + parts.get("name", 0.0)
        additive += parts.get("stub", 0.0)
        assert additive == pytest.approx(parts["fused"], abs=4e-6)
        assert hit["score"] == pytest.approx(parts["fused"], abs=2e-6)
        assert {"bm25", "cosine", "page", "page_bm25"} <= set(parts)


def test_plain_output_shows_components_and_modes_differ(project: Path):
    out = run_cli("search", "kubernetes", "--mode", "lexical", "--explain", "--root", str(project))
    assert out.returncode == 0, out.stderr
    assert "lexical=" in out.stdout and "semantic=" not in out.stdout
    bad = run_cli("search", "x", "--mode", "fuzzy", "--root", str(project))
    assert bad.returncode == 2


def test_lexical_mode_needs_no_embedding_model(project: Path, tmp_path: Path):
    # A `wordllama` package with no model files shadows the real one: the local provider
    # cannot load, so anything that embeds fails, and lexical search must not care.
    fake = tmp_path / "shadow" / "wordllama"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no model here')\n")
    env = {"PYTHONPATH": str(fake.parent)}
    lexical = run_cli(
        "search", "archive", "--mode", "lexical", "--json", "--root", str(project), env=env
    )
    assert lexical.returncode == 0, lexical.stderr
    assert json.loads(lexical.stdout)["results"][0]["path"] == "en/tar.md"
    semantic = run_cli("search", "archive", "--mode", "semantic", "--root", str(project), env=env)
    assert semantic.returncode == 1
    assert "Traceback" not in semantic.stderr
    assert semantic.stderr.startswith("mdvdb: local model")


def test_lexical_mode_with_the_provider_endpoint_gone(tmp_path: Path):
    # Indexed through an OpenAI-compatible server on 127.0.0.1, which is then shut down.
    root = tmp_path / "notes"
    write_pages(root, {k: v for k, v in PAGES.items() if k.startswith("en/")})
    with FakeEmbeddingServer(dims=64, api_key="sk-test") as server:
        env = {
            "MDVDB_EMBEDDING_PROVIDER": "openai",
            "MDVDB_EMBEDDING_DIMENSIONS": "64",
            "MDVDB_EMBEDDING_MAX_RETRIES": "0",
            "MDVDB_EMBEDDING_TIMEOUT": "2",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": server.url,
        }
        ingest(load_config(root, environ=env))
    lexical = run_cli("search", "Deployments", "--mode", "lexical", "--root", str(root), env=env)
    assert lexical.returncode == 0, lexical.stderr
    assert "en/kubernetes.md" in lexical.stdout
    hybrid = run_cli("search", "Deployments", "--root", str(root), env=env)
    assert hybrid.returncode == 1 and "Traceback" not in hybrid.stderr
    assert len(hybrid.stderr.strip().splitlines()) == 1


def test_postings_of_another_analyzer_are_refused(project: Path, tmp_path: Path):
    config = load_config(project, environ={})
    old = index_format.read_index(config.index_path)
    meta = {**old.meta, "lexical": {**old.meta["lexical"], "analyzer": "mdvdb-text-0"}}
    copy = tmp_path / "copy"
    write_pages(copy, {"a.md": "# a\n"})
    index_format.write_index(tmp_path / "old.index", dict(old.tables), meta)
    # the user's environment may point the index outside the root (a folder's file may not)
    env = {"MDVDB_INDEX_FILE": str(tmp_path / "old.index")}
    out = run_cli("search", "tar", "--mode", "lexical", "--root", str(copy), env=env)
    assert out.returncode == 1
    assert "analyzer 'mdvdb-text-0'" in out.stderr and "mdvdb ingest" in out.stderr


def test_edits_reach_the_postings_incrementally(tmp_path: Path):
    root = tmp_path / "notes"
    write_pages(root, {"a.md": "# Alpha\n\nzebra crossing\n", "b.md": "# Beta\n\nquokka\n"})
    config = load_config(root, environ={})
    ingest(config)
    assert search_paths(root, "zebra", "lexical") == ["a.md"]
    (root / "a.md").write_text("# Alpha\n\nplatypus crossing\n", encoding="utf-8")
    (root / "c.md").write_text("# Gamma\n\nzebra again\n", encoding="utf-8")
    ingest(config)
    assert search_paths(root, "zebra", "lexical") == ["c.md"]
    assert search_paths(root, "platypus", "lexical") == ["a.md"]
    assert search_paths(root, "quokka", "lexical") == ["b.md"]
    assert not (config.state_path / "lexical-cache.npz").exists()  # the index is the cache


@pytest.mark.slow
def test_a_project_with_no_text_searches_to_nothing(tmp_path: Path):
    root = tmp_path / "empty"
    write_pages(root, {"blank.md": "\n"})
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    for mode in ("lexical", "hybrid"):
        out = run_cli("search", "anything", "--mode", mode, "--root", str(root))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("No matches.")


def test_weights_and_feedback_shares_are_computed_from_the_stored_tf(project: Path):
    """Format 4 stores tf and lengths, not weights: the reader's weights are BM25 of them (with
    the k1 and b the meta records), and the forward view names exactly each chunk's postings."""
    import numpy as np

    from query.score.lexical import lexical_index

    index = open_index(config=load_config(project, environ={}))
    lexical = lexical_index(index)
    meta = index.snapshot.meta["lexical"]
    n, lengths = lexical.n_chunks, lexical.lengths.astype(np.float64)
    norm = meta["k1"] * (1 - meta["b"] + meta["b"] * lengths / lengths.mean())
    pairs = set()
    for row in range(len(lexical.terms)):
        ids, weights = lexical.term_weights(row)
        a, b = lexical.offsets[row], lexical.offsets[row + 1]
        tf = lexical.tf[a:b].astype(np.float64)
        idf = np.log1p((n - (b - a) + 0.5) / ((b - a) + 0.5))
        expected = idf * tf * (meta["k1"] + 1) / (tf + norm[ids])
        assert np.allclose(weights, expected, rtol=1e-5), row
        pairs.update((int(c), row) for c in ids)
    forward = set()
    for chunk in range(n):
        start, end = lexical.forward_offsets[chunk], lexical.forward_offsets[chunk + 1]
        positions = lexical.forward_postings[start:end]
        assert (np.diff(positions) > 0).all()
        assert (lexical.chunk_ids[positions] == chunk).all()
        rows = np.searchsorted(lexical.offsets, positions, side="right") - 1
        forward.update((chunk, int(r)) for r in rows)
    assert forward == pairs and len(pairs) == len(lexical.tf)
    assert index.snapshot.table("lexical").schema.names == ["term", "df", "chunk_ids"]


def test_a_long_lived_reader_scores_with_the_same_bits_from_its_weights(project: Path):
    """From its second query on, a reader slices every posting's weight from one array built
    once; each term's weights, and every query's scores, are the bits computed per term."""
    import numpy as np

    from query.score.lexical import lexical_index

    index = open_index(config=load_config(project, environ={}))
    queries = ["kubernetes pods", "extract a tar archive", "le fichier caché", "git"]
    for lexical in (lexical_index(index), lexical_index(index).rescored(1.5, 0.75)):
        lexical.weights = None  # the view may have served other tests' queries
        per_term = []
        for query in queries:
            lexical.queries = 0  # every query a first one: scored term by term
            per_term.append(lexical.scores(query))
            assert lexical.weights is None  # a one-shot search builds nothing
        lexical.scores(queries[0])  # the view's second query builds the weights
        built = lexical.weights
        assert built is not None and len(built) == len(lexical.chunk_ids)
        for query, expected in zip(queries, per_term, strict=True):
            got = lexical.scores(query)
            assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), query
        lexical.weights = None
        for row in range(len(lexical.terms)):
            start, end = lexical.offsets[row], lexical.offsets[row + 1]
            _, weights = lexical.term_weights(row)
            assert np.array_equal(weights.view(np.uint32), built[start:end].view(np.uint32))


def test_the_forward_view_past_16_bits_of_chunk_ids():
    """`transpose` orders by the low, then the high 16 bits when chunk ids need more."""
    import numpy as np

    from pipeline.pack.lexical import transpose

    rng = np.random.default_rng(7)
    n = 200_000
    chunk_ids = np.sort(rng.integers(0, n, 5000)).astype(np.int32)
    chunk_ids = np.concatenate([chunk_ids, np.sort(rng.integers(0, n, 3000)).astype(np.int32)])
    forward = transpose(chunk_ids, n)
    assert forward.values.to_numpy().tolist() == np.argsort(chunk_ids, kind="stable").tolist()
    offsets = forward.offsets.to_numpy()
    assert len(offsets) == n + 1 and (np.diff(offsets) == np.bincount(chunk_ids, minlength=n)).all()
