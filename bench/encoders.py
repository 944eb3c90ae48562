"""Dense encoders compared on BEIR-layout folders: WordLlama (the default) vs all-MiniLM-L6-v2.

Embeds title + text of every document with each provider, ranks by cosine, and prints
nDCG@10 / recall@100 dense-only and min-max fused with a bm25s BM25 baseline (English
stop-words + Snowball stemming) at dense weights 0.3 and 0.5, computed in the same run. Also
prints each encoder's load time, one-short-query latency (p50) and corpus throughput.

    python bench/encoders.py /work/corpora/cranfield /work/corpora/nfcorpus [--json]
    python bench/encoders.py --ingest 250 [--json]   # real `mdvdb ingest` of 250 tldr pages

The --ingest run copies the first N pages of tldr's pages/common into a fresh folder per
model and times a fresh `mdvdb ingest` process there (wall and CPU seconds, chunks/s).

Document vectors (and the seconds their embedding took) are cached under
MDVDB_BENCH_DIR/encoders, keyed by corpus, encoder and the texts' SHA-256, so a rerun only
recomputes the metrics; --no-cache forces a fresh embed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, corpus, print_table  # noqa: E402
from bench.common import run as run_cmd  # noqa: E402

ENCODERS = ("wordllama", "minilm")
DENSE_WEIGHTS = (0.3, 0.5)


def load_beir(folder: Path) -> tuple[list[str], list[str], dict[str, str], dict[str, dict]]:
    ids, texts = [], []
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            ids.append(str(doc["_id"]))
            texts.append(f"{doc.get('title') or ''}\n{doc.get('text') or ''}".strip())
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / "test.tsv").open(encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            qid, did, score = line.rstrip("\n").split("\t")[:3]
            if int(score) > 0:
                qrels.setdefault(qid, {})[did] = int(score)
    queries = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            q = json.loads(line)
            if str(q["_id"]) in qrels:
                queries[str(q["_id"])] = q["text"]
    return ids, texts, queries, qrels


def make_provider(name: str):
    if name == "wordllama":
        from mdvdb.providers.local import LocalProvider

        return LocalProvider("wordllama-l2-supercat", 256)
    from mdvdb.providers.minilm import MiniLMProvider

    return MiniLMProvider("all-minilm-l6-v2")


def embed_corpus(name: str, provider, texts: list[str], corpus: str, use_cache: bool):
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    cache = WORK / "encoders" / f"{corpus}-{name}-{digest}.npy"
    timing = cache.with_suffix(".json")
    if use_cache and cache.is_file() and timing.is_file():
        return np.load(cache), json.loads(timing.read_text())["seconds"]
    start = time.perf_counter()
    vectors = np.concatenate(
        [provider.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    ).astype(np.float32)
    seconds = time.perf_counter() - start
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    timing.write_text(json.dumps({"seconds": seconds, "load_avg": os.getloadavg()[0]}))
    print(f"{corpus}: {name} embedded {len(texts)} docs in {seconds:.0f} s", file=sys.stderr)
    return vectors, seconds


def bm25_scores(texts: list[str], queries: list[str]) -> np.ndarray:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever.index(corpus_tokens, show_progress=False)
    tokens = bm25s.tokenize(
        queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    return np.stack([retriever.get_scores(q) for q in tokens]).astype(np.float32)


def minmax(scores: np.ndarray) -> np.ndarray:
    low = scores.min(axis=1, keepdims=True)
    span = scores.max(axis=1, keepdims=True) - low
    return (scores - low) / np.where(span > 0, span, 1.0)


def metrics(scores: np.ndarray, qids: list[str], ids: list[str], qrels) -> tuple[float, float]:
    """Mean nDCG@10 (graded gains, log2 discount) and recall@100 over the queries."""
    top = np.argsort(-scores, axis=1)[:, :100]
    ndcgs, recalls = [], []
    discount = 1.0 / np.log2(np.arange(2, 12))
    for row, qid in enumerate(qids):
        rel = qrels[qid]
        gains = np.array([rel.get(ids[j], 0) for j in top[row]], dtype=np.float64)
        ideal = np.sort(np.array(list(rel.values()), dtype=np.float64))[::-1][:10]
        dcg = float(((2 ** gains[:10] - 1) * discount[: len(gains[:10])]).sum())
        idcg = float(((2**ideal - 1) * discount[: len(ideal)]).sum())
        ndcgs.append(dcg / idcg if idcg else 0.0)
        recalls.append(float((gains > 0).sum()) / len(rel))
    return float(np.mean(ndcgs)), float(np.mean(recalls))


def query_latency_ms(provider, text: str = "how do I extract a tar archive") -> float:
    provider.embed([text])
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        provider.embed([text])
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def evaluate(folders: list[Path], use_cache: bool) -> tuple[list[dict], list[dict]]:
    quality, speed = [], []
    providers = {}
    for name in ENCODERS:
        start = time.perf_counter()
        providers[name] = make_provider(name)
        providers[name].embed(["warm up"])
        load = time.perf_counter() - start
        speed.append(
            {"encoder": name, "load_s": load, "query_p50_ms": query_latency_ms(providers[name])}
        )
    for folder in folders:
        ids, texts, queries, qrels = load_beir(folder)
        qids = list(queries)
        lexical = bm25_scores(texts, [queries[q] for q in qids])
        nd, rc = metrics(lexical, qids, ids, qrels)
        quality.append({"corpus": folder.name, "method": "bm25", "ndcg@10": nd, "recall@100": rc})
        for name, provider in providers.items():
            vectors, seconds = embed_corpus(name, provider, texts, folder.name, use_cache)
            if seconds:
                for row in speed:
                    if row["encoder"] == name:
                        row[f"{folder.name}_docs_per_s"] = len(texts) / seconds
            dense = provider.embed([queries[q] for q in qids]) @ vectors.T
            nd, rc = metrics(dense, qids, ids, qrels)
            quality.append({"corpus": folder.name, "method": name, "ndcg@10": nd, "recall@100": rc})
            for weight in DENSE_WEIGHTS:
                fused = weight * minmax(dense) + (1 - weight) * minmax(lexical)
                nd, rc = metrics(fused, qids, ids, qrels)
                quality.append(
                    {
                        "corpus": folder.name,
                        "method": f"{name}+bm25 w={weight}",
                        "ndcg@10": nd,
                        "recall@100": rc,
                    }
                )
    return quality, speed


INGEST_MODELS = {"wordllama": "wordllama-l2-supercat", "minilm": "all-minilm-l6-v2"}


def ingest_rows(count: int) -> list[dict]:
    """Fresh `mdvdb ingest` processes over the same N real pages, one folder per model."""
    pages = sorted((corpus("tldr") / "pages" / "common").glob("*.md"))[:count]
    rows = []
    for name, model in INGEST_MODELS.items():
        root = WORK / "encoders-ingest" / name
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        for page in pages:
            shutil.copy(page, root / page.name)
        env = {**os.environ, "MDVDB_EMBEDDING_MODEL": model}
        env.pop("MDVDB_EMBEDDING_DIMENSIONS", None)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = run_cmd(
            [sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(root)], env=env
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"ingest with {model} failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout)
        embed_s = report["stage_seconds"]["embed"]
        rows.append(
            {
                "model": name,
                "files": report["files"],
                "chunks": report["chunks_embedded"],
                "wall_s": wall,
                "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                "embed_stage_s": embed_s,
                "chunks_per_s_embed": report["chunks_embedded"] / max(embed_s, 1e-9),
                "chunks_per_s_wall": report["chunks_embedded"] / wall,
                "load_avg": os.getloadavg()[0],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="BEIR-layout folders")
    parser.add_argument("--ingest", type=int, metavar="N", help="time ingest of N tldr pages")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-cache", action="store_true", help="re-embed every corpus")
    args = parser.parse_args()
    if args.ingest:
        print_table(
            "mdvdb ingest, fresh process: WordLlama vs MiniLM", ingest_rows(args.ingest), args.json
        )
    if not args.folders:
        return
    quality, speed = evaluate(args.folders, use_cache=not args.no_cache)
    print_table("Dense encoders: retrieval quality", quality, args.json)
    print_table("Dense encoders: load, query latency, corpus throughput", speed, args.json)


if __name__ == "__main__":
    main()
