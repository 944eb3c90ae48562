"""Retrieval quality on a BEIR-layout folder, through the real pipeline and query code.

    python bench/quality.py /work/corpora/nfcorpus /work/corpora/cranfield [--json] [--sweep]

Each document is written as a Markdown file (frontmatter `id`, `title`; the title as `# H1`,
then the text), the folder is ingested by `pipeline.ingest.run` exactly as `mdvdb ingest` does,
and every test query is answered in-process in the lexical, semantic and hybrid modes of
`query.search`. Chunks are rolled up to documents (a document ranks at its best chunk).
Alongside, in the same run: plain BM25 with bm25s (English stop-words, Snowball stemming,
title + text), the baseline the hybrid must beat.

Metrics: nDCG@10 (exponential gain 2^rel - 1, ideal from all judged documents), recall@100 and
MRR@10 (relevant = judged >= 1). `--sweep` also prints hybrid nDCG@10 over a grid of fusion
settings, which is how the defaults in `query.fusion` were chosen (docs/search-quality.md).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, print_table  # noqa: E402

DEPTH = 100


def load_beir(folder: Path) -> tuple[dict, dict, dict]:
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            corpus[str(d["_id"])] = (d.get("title") or "", d.get("text") or "")
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / "test.tsv", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")[:3]
            qrels.setdefault(qid, {})[did] = int(score)
    qrels = {q: r for q, r in qrels.items() if q in queries}
    return corpus, queries, qrels


def file_name(doc_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", doc_id) + ".md"


def write_markdown(corpus: dict, root: Path) -> dict[str, str]:
    """One Markdown file per document (kept between runs); returns relative path -> doc id."""
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    paths = {}
    for doc_id, (title, text) in corpus.items():
        name = file_name(doc_id)
        rel = f"docs/{name}"
        paths[rel] = doc_id
        target = docs / name
        if target.exists():
            continue
        head = f"---\nid: {json.dumps(doc_id)}\ntitle: {json.dumps(title)}\n---\n\n"
        body = f"# {title}\n\n{text}\n" if title.strip() else f"{text}\n"
        target.write_text(head + body, encoding="utf-8")
    return paths


# -- metrics ------------------------------------------------------------------------------


def ndcg_at(ranked: list[str], judged: dict[str, int], k: int = 10) -> float:
    dcg = sum((2 ** judged.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(judged.values(), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: list[str], judged: dict[str, int], k: int = DEPTH) -> float:
    relevant = {d for d, g in judged.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], judged: dict[str, int], k: int = 10) -> float:
    for i, d in enumerate(ranked[:k]):
        if judged.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def evaluate(runs: dict[str, list[str]], qrels: dict) -> dict[str, float]:
    qids = list(qrels)
    return {
        "ndcg@10": float(np.mean([ndcg_at(runs[q], qrels[q]) for q in qids])),
        "recall@100": float(np.mean([recall_at(runs[q], qrels[q]) for q in qids])),
        "mrr@10": float(np.mean([mrr_at(runs[q], qrels[q]) for q in qids])),
    }


# -- runs ---------------------------------------------------------------------------------


def bm25_baseline(corpus: dict, queries: dict, qids: list[str]) -> dict[str, list[str]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    ids = list(corpus)
    texts = [f"{corpus[d][0]} {corpus[d][1]}" for d in ids]
    model = bm25s.BM25()
    model.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    tokens = bm25s.tokenize(
        [queries[q] for q in qids], stopwords="en", stemmer=stemmer, show_progress=False
    )
    k = min(DEPTH, len(ids))
    results, _ = model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    return {q: [ids[int(j)] for j in results[i]] for i, q in enumerate(qids)}


def rank_documents(scores: np.ndarray, chunk_doc: np.ndarray, valid: np.ndarray | None) -> list:
    """Document order by best chunk score (the top DEPTH documents)."""
    best = np.full(int(chunk_doc.max()) + 1, -np.inf, dtype=np.float64)
    use = scores if valid is None else np.where(valid, scores, -np.inf)
    np.maximum.at(best, chunk_doc, use)
    order = np.argsort(-best, kind="stable")[:DEPTH]
    return [int(i) for i in order if np.isfinite(best[i])]


def mdvdb_runs(index, queries: dict, qids: list[str], doc_of_file: list[str], modes):
    """Per mode: query id -> ranked document ids; also each query's BM25F scores and vector."""
    from query.search import mode_scores, query_vector

    chunk_doc = index.snapshot.chunk_file_ids
    runs: dict[str, dict[str, list[str]]] = {m: {} for m in modes}
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for q in qids:
        for mode in modes:
            scores, parts = mode_scores(index, queries[q], mode)
            valid = parts.get("_candidates")
            runs[mode][q] = [doc_of_file[i] for i in rank_documents(scores, chunk_doc, valid)]
            if mode == "hybrid":
                raw[q] = (parts["bm25"], query_vector(index, queries[q]))
    return runs, raw


SWEEP = {
    "dense_weight": (0.2, 0.3, 0.4),
    "feedback_weight": (0.0, 0.2, 0.4),
    "dense_feedback_weight": (0.0, 1.0),
}


def sweep(index, raw: dict, qrels: dict, doc_of_file: list[str]) -> list[dict]:
    """Hybrid metrics over fusion settings (an ablation of each feedback side included)."""
    import itertools

    from query.fusion import PARAMS, hybrid
    from query.lexical import lexical_index

    lexical = lexical_index(index)
    vectors = index.snapshot.vectors
    chunk_doc = index.snapshot.chunk_file_ids
    rows = []
    for values in itertools.product(*SWEEP.values()):
        settings = dict(zip(SWEEP, values, strict=True))
        params = replace(PARAMS, **settings)
        runs = {}
        for q, (bm25, vector) in raw.items():
            fused, _ = hybrid(lexical, vectors, vector, bm25, params)
            order = rank_documents(fused.scores, chunk_doc, fused.scores > 0)
            runs[q] = [doc_of_file[i] for i in order]
        rows.append({**settings, **evaluate(runs, qrels)})
    return rows


def run_one(folder: Path, do_sweep: bool) -> tuple[list[dict], list[dict], dict]:
    from mdvdb.config import load_config
    from pipeline.ingest import run as ingest
    from query import open_index

    name = folder.name
    corpus, queries, qrels = load_beir(folder)
    root = WORK / "quality" / name
    paths = write_markdown(corpus, root)
    config = load_config(root, environ={})
    started = time.perf_counter()
    report = ingest(config)
    ingest_s = time.perf_counter() - started
    index = open_index(config=config)
    doc_of_file = [paths[p] for p in index.snapshot.paths]
    qids = list(qrels)

    t = time.perf_counter()
    baseline = bm25_baseline(corpus, queries, qids)
    bm25_s = time.perf_counter() - t
    modes = ("lexical", "semantic", "hybrid")
    t = time.perf_counter()
    runs, raw = mdvdb_runs(index, queries, qids, doc_of_file, modes)
    query_s = time.perf_counter() - t

    rows = [{"corpus": name, "run": "bm25s baseline", **evaluate(baseline, qrels)}]
    base = rows[0]["ndcg@10"]
    for mode in modes:
        m = evaluate(runs[mode], qrels)
        rows.append({"corpus": name, "run": f"mdvdb {mode}", **m})
    for r in rows:
        r["Δndcg"] = r["ndcg@10"] - base
    info = {
        "corpus": name,
        "documents": len(corpus),
        "queries": len(qids),
        "chunks": int(index.snapshot.vectors.shape[0]),
        "ingest_s": round(ingest_s, 1),
        "chunks_embedded": report.chunks_embedded,
        "bm25s_s": round(bm25_s, 2),
        "mdvdb_3_modes_s": round(query_s, 2),
    }
    sweep_rows = sweep(index, raw, qrels, doc_of_file) if do_sweep else []
    for r in sweep_rows:
        r["corpus"] = name
    return rows, sweep_rows, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="BEIR-layout folders")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="also grid-search the fusion")
    args = parser.parse_args()
    rows, sweeps, infos = [], [], []
    for folder in args.folders:
        r, s, info = run_one(folder.resolve(), args.sweep)
        rows.extend(r)
        sweeps.extend(s)
        infos.append(info)
    print_table("Retrieval quality (documents ranked by best chunk)", rows, args.json)
    print_table("Runs", infos, args.json)
    if sweeps:
        print_table("Hybrid fusion sweep", sweeps, args.json)


if __name__ == "__main__":
    main()
