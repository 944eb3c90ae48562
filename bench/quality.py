"""Retrieval quality over every evaluation set, through the code path of `mdvdb search`.

    python bench/quality.py [--sets nfcorpus,cacm] [--variant NAME ...] [--query-path warm] [--json]

Sets: nfcorpus, cranfield, arguana, cacm, ray-docs-qa (unpacked from ../shared/corpora under
$MDVDB_BENCH_DIR, default /tmp/mdvdb-bench). Each document becomes a Markdown file (frontmatter
`id`, `title`; the title as `# H1`, then the text; ray-docs-qa pages keep their site path as
folders, `ray-core/actors/named-actors.md`), the folder is ingested by
`pipeline.ingest.ingest_folder` with the default model, exactly as `mdvdb ingest` does, and
kept: a second run re-uses the index and costs only the queries.

Every query is answered by `query.request.run_request` (the library call behind `mdvdb search`, with
its title tiers and result shaping) asking for 100 distinct files (`--files -n 100`); that
file ranking is what is scored. ArguAna drops the query's own document from its ranking, as
BEIR does. Alongside, in the same run, the two baselines to beat (`baselines`): plain BM25
with bm25s (English stop-words, Snowball stemming, title + text) and `fusion`, a min-max fusion
of that bm25s with WordLlama cosines over whole documents (0.7 / 0.3, first 4,000 characters
embedded). `Δndcg` is each run's nDCG@10 against bm25s, `Δfusion` against the fusion arm.

Metrics: nDCG@10 (gain 2^rel - 1, ideal from all judged documents), recall@100 and MRR@10
(relevant = judged >= 1). For ray-docs-qa also hit@5 by page and `dup@5`: the share of the
sections shown in a top 5 (`-n 5`) whose text repeats a higher-ranked one of the same top 5
(equal after normalising, or word-3-shingle Jaccard >= 0.8), over all queries, and
`sections_hit@5`: the answering page is among the pages of those 5 sections. `--per-file N`
sets the per-file cap of those section answers (how the default cap is chosen).
`ndcg@10+copies` and `recall@100+copies` score the same answers crediting the copies a
collapsed result lists in `also_in` (a user sees "also in N other files"), each ranked right
after its result, on every set. `--repack` ingests each set again in full (after a change to
what pack computes, such as the BM25F parameters).

A variant is a named set of overrides of `query.score.fusion.FusionParams` (VARIANTS below): it runs
the default mode with those settings. With variants, the leave-one-set-out table over them is
printed too (docs/search-quality.md explains the rule).
`--model NAME` builds each set's index with that model in its own folder (`--model
all-minilm-l6-v2`); with `--upgrade-seconds S` the ingest runs the upgrade of docs/upgrade.md
with that budget, so a small one leaves the static stage published and the upgrade part-way
(`upgrade_done` in the runs table; every run's ingest advances it by another budget).
`--fast` ranks files from `query.rank.search.mode_scores` (no tiers, no shaping): ~5x
cheaper, for sweeps.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import SHARED, WORK, print_table  # noqa: E402

DEPTH = 100
FUSION_DENSE = 0.3  # the fusion arm's weight on the dense side
FUSION_CHARS = 4000  # the fusion arm embeds each document's first characters
SETS = ("nfcorpus", "cranfield", "arguana", "cacm", "ray-docs-qa")
ARCHIVES = {
    "nfcorpus": "beir-nfcorpus.tar.gz",
    "cranfield": "beir-cranfield.tar.gz",
    "arguana": "beir-arguana.tar.gz",
    "cacm": "cacm.tar.gz",
    "ray-docs-qa": "ray-docs-qa.tar.gz",
}
NESTED = {"ray-docs-qa"}  # ids are site paths: written as folders, as a docs checkout has them
METRICS = ("ndcg@10", "recall@100", "mrr@10")
# The same, crediting the copies a collapsed result lists in `also_in` (the user sees them),
# each ranked right after its result (full library path only).
COPY_METRICS = ("ndcg@10+copies", "recall@100+copies")

# Named overrides of query.score.fusion.FusionParams, run in the default mode. Every experiment in
# docs/search-quality.md is one of these.
VARIANTS: dict[str, dict] = {
    "no-page": {"page_weight": 0.0},
    "no-name": {"name_weight": 0.0},
    "name-0.2": {"name_weight": 0.2},
    "before": {"page_weight": 0.0, "name_weight": 0.0},  # the default before this work
    # the default before the third CACM round (section BM25F k1 as packed, 1.2; no page-level
    # evidence on the dense side)
    "previous": {
        "section_k1": 0.0,
        "page_dense_weight": 0.0,
        "stub_length": 0.0,
    },
    # the default before the fourth CACM round (no stub-page prior)
    "round-3": {"stub_length": 0.0},
    "no-feedback": {"feedback_weight": 0.0},
    "no-dense-feedback": {"dense_feedback_weight": 0.0},
    "no-feedback-at-all": {"feedback_weight": 0.0, "dense_feedback_weight": 0.0},
    "dense-0.2": {"dense_weight": 0.2},
    "dense-0.4": {"dense_weight": 0.4},
    "page-0.4": {"page_weight": 0.4},
    "A:page-0.2+name-0.2": {"page_weight": 0.2, "name_weight": 0.2},
    "B:page-0.3+name-0.2+fb-0.3-chunks-5": {
        "page_weight": 0.3,
        "name_weight": 0.2,
        "feedback_weight": 0.3,
        "feedback_chunks": 5,
    },
    "C:page-0.2+name-0.2+fb-0.2-chunks-5": {
        "page_weight": 0.2,
        "name_weight": 0.2,
        "feedback_weight": 0.2,
        "feedback_chunks": 5,
    },
    **{
        f"fb-{lam}-page-{mu}-chunks-{k}": {
            "feedback_weight": lam,
            "page_weight": mu,
            "feedback_chunks": k,
        }
        for lam in (0.2, 0.3)
        for mu in (0.2, 0.3, 0.4)
        for k in (5, 10)
    },
    "fb-chunks-5": {"feedback_chunks": 5},
    "fb-terms-5": {"feedback_terms": 5},
    "fb-terms-20": {"feedback_terms": 20},
    "dense-fb-0.5": {"dense_feedback_weight": 0.5},
    "page-0.3-fb-terms-20": {"page_weight": 0.3, "feedback_terms": 20},
    "no-tiers": {"title_tiers": False},
    "page-0.1": {"page_weight": 0.1},
    "page-0.2": {"page_weight": 0.2},
    "page-0.3": {"page_weight": 0.3},
    "name-0.1": {"name_weight": 0.1},
    "name-0.3": {"name_weight": 0.3},
    "feedback-0.2": {"feedback_weight": 0.2},
    "feedback-0.2-page-0.2": {"feedback_weight": 0.2, "page_weight": 0.2},
    "page-b-0.3": {"page_b": 0.3},
    "page-b-0.5": {"page_b": 0.5},
    "page-b-0.9": {"page_b": 0.9},
    "page-k1-0.9": {"page_k1": 0.9},
    "page-k1-2.0": {"page_k1": 2.0},
    "page-0.3-b-0.5": {"page_weight": 0.3, "page_b": 0.5},
    "k1-0.9": {"section_k1": 0.9},
    "k1-1.5": {"section_k1": 1.5},
    "k1-2.0": {"section_k1": 2.0},
    **{
        f"stub-{t}-{w}": {"stub_length": t, "stub_weight": w}
        for t in (30, 40, 60)
        for w in (0.2, 0.4, 0.6)
    },
    "k1-1.2": {"section_k1": 1.2},  # the packed value: a check
    **{f"page-dense-{r}": {"page_dense_weight": r} for r in (0.3, 0.5)},
    **{f"page-dense-{r}-k1-1.5": {"page_dense_weight": r, "section_k1": 1.5} for r in (0.3, 0.5)},
    # on top of page-dense 0.5 + k1 1.5: feedback settings measured on CACM alone before
    **{
        f"page-dense-0.5-k1-1.5-{name}": {"page_dense_weight": 0.5, "section_k1": 1.5, **extra}
        for name, extra in (
            ("dense-fb-0.5", {"dense_feedback_weight": 0.5}),
            ("fb-chunks-5", {"feedback_chunks": 5}),
        )
    },
}


def variant_settings(name: str) -> dict:
    """A named variant's overrides, or an ad-hoc one spelt `field=value,field=value` (fields of
    `query.score.fusion.FusionParams`, values cast to the field's type): sweeps need no new name."""
    if name in VARIANTS:
        return VARIANTS[name]
    from dataclasses import fields

    from query.score.fusion import FusionParams

    kinds = {f.name: type(getattr(FusionParams(), f.name)) for f in fields(FusionParams)}
    out = {}
    for part in name.split(","):
        key, sep, value = part.partition("=")
        if not sep or key not in kinds:
            raise ValueError(f"unknown variant or setting: {part}")
        kind = kinds[key]
        out[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return out


# -- data ---------------------------------------------------------------------------------


def set_folder(name: str, corpora: Path | None) -> Path:
    """The unpacked set: under `corpora` if given, else unpacked once under WORK."""
    if corpora is not None:
        return corpora / name
    target = WORK / "corpora" / name
    if not (target / "corpus.jsonl").exists():
        import tarfile

        (WORK / "corpora").mkdir(parents=True, exist_ok=True)
        with tarfile.open(SHARED / ARCHIVES[name]) as tar:
            tar.extractall(WORK / "corpora", filter="data")
    return target


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


def file_name(doc_id: str, nested: bool) -> str:
    if nested:
        parts = [re.sub(r"[^A-Za-z0-9._-]", "_", p) or "_" for p in doc_id.split("/")]
        return "/".join(parts) + ".md"
    return re.sub(r"[^A-Za-z0-9._-]", "_", doc_id) + ".md"


def write_markdown(corpus: dict, root: Path, nested: bool) -> dict[str, str]:
    """One Markdown file per document (kept between runs); returns relative path -> doc id."""
    docs = root / "docs"
    paths = {}
    for doc_id, (title, text) in corpus.items():
        rel = f"docs/{file_name(doc_id, nested)}"
        paths[rel] = doc_id
        target = root / rel
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        head = f"---\nid: {json.dumps(doc_id)}\ntitle: {json.dumps(title)}\n---\n\n"
        body = f"# {title}\n\n{text}\n" if title.strip() else f"{text}\n"
        target.write_text(head + body, encoding="utf-8")
    docs.mkdir(parents=True, exist_ok=True)
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


def hit_at(ranked: list[str], judged: dict[str, int], k: int = 5) -> float:
    return float(any(judged.get(d, 0) > 0 for d in ranked[:k]))


def evaluate(runs: dict[str, list[str]], qrels: dict, pages: bool = False) -> dict[str, float]:
    qids = list(qrels)
    out = {
        "ndcg@10": float(np.mean([ndcg_at(runs[q], qrels[q]) for q in qids])),
        "recall@100": float(np.mean([recall_at(runs[q], qrels[q]) for q in qids])),
        "mrr@10": float(np.mean([mrr_at(runs[q], qrels[q]) for q in qids])),
    }
    if pages:
        out["hit@5"] = float(np.mean([hit_at(runs[q], qrels[q]) for q in qids]))
    return out


def _normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _shingles(words: list[str], n: int = 3) -> set:
    return {tuple(words[i : i + n]) for i in range(max(len(words) - n + 1, 1))}


def repeats(texts: list[str], threshold: float = 0.8) -> int:
    """How many of `texts` (in rank order) repeat an earlier one: equal once normalised, or
    word 3-shingle Jaccard >= threshold."""
    seen: list[tuple[str, set]] = []
    count = 0
    for text in texts:
        norm = _normalised(text)
        shingles = _shingles(norm.split())
        for other, other_shingles in seen:
            union = len(shingles | other_shingles)
            if norm == other or (union and len(shingles & other_shingles) / union >= threshold):
                count += 1
                break
        seen.append((norm, shingles))
    return count


# -- runs ---------------------------------------------------------------------------------


def _bm25_model(texts: list[str], language: str = "english", stopwords: str = "en"):
    """bm25s over `texts` with a Snowball stemmer and stop words (bench/multilingual.py
    passes another language's)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer(language)
    model = bm25s.BM25()
    model.index(
        bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    return model, lambda text: bm25s.tokenize(
        [text], stopwords=stopwords, stemmer=stemmer, show_progress=False, return_ids=False
    )[0]


def _ranked(scores: np.ndarray, ids: list[str], q: str, drop_self: bool) -> list[str]:
    order = np.argsort(-scores, kind="stable")[: DEPTH + 1]
    return [ids[int(j)] for j in order if not (drop_self and ids[int(j)] == q)][:DEPTH]


def _min_max(scores: np.ndarray) -> np.ndarray:
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def baselines(
    corpus: dict,
    queries: dict,
    qids: list[str],
    drop_self: bool,
    stemmer: str = "english",
    stopwords: str = "en",
) -> dict:
    """The two reference arms (issue 32), whole documents, in this process:
    `bm25s` (English stop words, Snowball stemming, title + text) and `fusion`: min-max
    normalised bm25s and WordLlama cosine over all documents, 0.7 / 0.3, each document's first
    FUSION_CHARS characters embedded (the ~30-line script a user would write with the two
    libraries mdvdb ships). `stemmer`, `stopwords`: another language's (bench/multilingual.py)."""
    from kernel.providers.local import LocalProvider

    ids = list(corpus)
    texts = [f"{corpus[d][0]} {corpus[d][1]}" for d in ids]
    model, tokens = _bm25_model(texts, stemmer, stopwords)
    embedder = LocalProvider()
    docs = np.vstack(
        [
            embedder.embed([t[:FUSION_CHARS] for t in texts[i : i + 256]])
            for i in range(0, len(texts), 256)
        ]
    )
    runs: dict[str, dict[str, list[str]]] = {"bm25s": {}, "fusion": {}}
    for q in qids:
        lexical = model.get_scores(tokens(queries[q])).astype(np.float64)
        dense = docs @ embedder.embed([queries[q]])[0]
        runs["bm25s"][q] = _ranked(lexical, ids, q, drop_self)
        mixed = (1 - FUSION_DENSE) * _min_max(lexical) + FUSION_DENSE * _min_max(dense)
        runs["fusion"][q] = _ranked(mixed, ids, q, drop_self)
    return runs


class Target:
    """One ingested set and its judgements, ready to answer queries."""

    def __init__(self, name: str, folder: Path, repack: bool = False, model: dict | None = None):
        from kernel.config import load_config
        from pipeline.ingest import ingest_folder as ingest
        from query import open_index

        self.name = name
        self.corpus, self.queries, self.qrels = load_beir(folder)
        self.qids = list(self.qrels)
        root = WORK / "quality-sets" / name
        if model:  # its own copy of the set: the default model's index stays as it is
            root = WORK / "quality-sets" / (name + "." + ".".join(sorted(model.values())))
        self.doc_of_path = write_markdown(self.corpus, root, name in NESTED)
        config = load_config(root, environ=model or {})
        started = time.perf_counter()
        self.report = ingest(config, full=repack)
        self.ingest_s = time.perf_counter() - started
        self.index = open_index(config=config)
        self.drop_self = name == "arguana"
        self.pages = name == "ray-docs-qa"
        self._texts = None
        self.shape: dict = {}  # SearchRequest fields of the `-n 5` section answers

    def chunk_text(self, chunk_id: int) -> str:
        if self._texts is None:
            self._texts = self.index.snapshot.table("chunks").column("text")
        return self._texts[chunk_id].as_py()

    def run(self, mode: str | None, fast: bool = False) -> tuple[dict[str, float], float]:
        """Metrics of one mode (None = the configured default) and seconds per query.
        `fast`: rank files by their best section's score from `query.rank.search.mode_scores`
        (the scoring of `mdvdb search` without title tiers and result shaping), ~5x cheaper:
        for sweeping scoring parameters."""
        from query.request import SearchRequest
        from query.request import run_request as run

        if fast:
            return self.run_fast(mode or self.index.config.search_default_mode)
        runs: dict[str, list[str]] = {}
        with_copies: dict[str, list[str]] = {}
        shown = repeated = section_hits = 0
        started = time.perf_counter()
        for q in self.qids:
            text = self.queries[q]
            outcome = run(self.index, SearchRequest(query=text, limit=DEPTH, files=True, mode=mode))
            ranked = [self.doc_of_path[hit.path] for hit in outcome.files or []]
            runs[q] = [d for d in ranked if not (self.drop_self and d == q)]
            hits = [hit for _, hit in outcome.tiers.results] if outcome.tiers else []
            copied = [
                self.doc_of_path[path]
                for hit in hits
                for path in (hit.path, *(copy["path"] for copy in hit.also_in))
            ]
            with_copies[q] = [d for d in dict.fromkeys(copied) if not (self.drop_self and d == q)][
                :DEPTH
            ]
            if self.pages:
                top = run(self.index, SearchRequest(query=text, limit=5, mode=mode, **self.shape))
                texts = [self.chunk_text(hit.chunk_id) for _, hit in top.tiers.results]
                shown += len(texts)
                repeated += repeats(texts)
                pages = [self.doc_of_path[hit.path] for _, hit in top.tiers.results]
                section_hits += hit_at(pages, self.qrels[q])
        seconds = (time.perf_counter() - started) / max(len(self.qids), 1)
        metrics = evaluate(runs, self.qrels, self.pages)
        copies = evaluate(with_copies, self.qrels)
        metrics["ndcg@10+copies"] = copies["ndcg@10"]
        metrics["recall@100+copies"] = copies["recall@100"]
        if self.pages:
            metrics["dup@5"] = repeated / max(shown, 1)
            metrics["sections_hit@5"] = section_hits / max(len(self.qids), 1)
        return metrics, seconds

    def run_fast(self, mode: str) -> tuple[dict[str, float], float]:
        from query.rank.search import mode_scores

        snap = self.index.snapshot
        chunk_files = snap.chunk_file_ids
        doc_of_file = [self.doc_of_path[p] for p in snap.paths]
        n_files = len(doc_of_file)
        runs: dict[str, list[str]] = {}
        started = time.perf_counter()
        for q in self.qids:
            scores, parts = mode_scores(self.index, self.queries[q], mode)
            valid = parts.get("_candidates")
            use = scores if valid is None else np.where(valid, scores, -np.inf)
            best = np.full(n_files, -np.inf, dtype=np.float64)
            np.maximum.at(best, chunk_files, use)
            order = np.argsort(-best, kind="stable")[: DEPTH + 1]
            ranked = [doc_of_file[i] for i in order if np.isfinite(best[i])]
            runs[q] = [d for d in ranked if not (self.drop_self and d == q)][:DEPTH]
        seconds = (time.perf_counter() - started) / max(len(self.qids), 1)
        return evaluate(runs, self.qrels, self.pages), seconds


def run_set(
    target: Target, variants: list[str], modes: list[str], fast: bool = False
) -> tuple[list[dict], dict]:
    from query.score import fusion

    t = time.perf_counter()
    arms = baselines(target.corpus, target.queries, target.qids, target.drop_self)
    bm25_s = time.perf_counter() - t
    rows = [
        {"set": target.name, "run": arm, **evaluate(runs, target.qrels, target.pages)}
        for arm, runs in arms.items()
    ]
    timing = {}
    for label in modes:
        metrics, per_query = target.run(None if label == "default" else label, fast)
        rows.append({"set": target.name, "run": label, **metrics})
        timing[f"{label}_ms"] = round(per_query * 1000, 1)
        print(f"{target.name} {label}: ndcg@10 {metrics['ndcg@10']:.4f}", file=sys.stderr)
    for name in variants:
        with fusion.overridden(**variant_settings(name)):
            metrics, per_query = target.run(None, fast)
        rows.append({"set": target.name, "run": name, **metrics})
        timing[f"{name}_ms"] = round(per_query * 1000, 1)
        print(f"{target.name} {name}: ndcg@10 {metrics['ndcg@10']:.4f}", file=sys.stderr)
    base, fused = rows[0]["ndcg@10"], rows[1]["ndcg@10"]
    for r in rows:
        r["Δndcg"] = r["ndcg@10"] - base  # against bm25s
        r["Δfusion"] = r["ndcg@10"] - fused
    snap = target.index.snapshot
    info = {
        "set": target.name,
        "documents": len(target.corpus),
        "queries": len(target.qids),
        "chunks": int(snap.vectors.shape[0]),
        "ingest_s": round(target.ingest_s, 1),
        "chunks_embedded": target.report.chunks_embedded,
        "model": snap.meta.get("model"),
        "upgrade_done": (target.report.upgrade or {}).get("done"),
        "baselines_s": round(bm25_s, 2),
        **timing,
    }
    return rows, info


def means(rows: list[dict], sets: list[str]) -> list[dict]:
    """Per run: the mean of each metric over the sets."""
    out = []
    for run in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == run and r["set"] in sets]
        if len(mine) != len(sets):
            continue
        row = {"set": "mean", "run": run}
        for key in (*METRICS, *COPY_METRICS, "hit@5", "Δndcg", "Δfusion"):
            if all(key in r for r in mine):
                row[key] = float(np.mean([r[key] for r in mine]))
        out.append(row)
    return out


def leave_one_set_out(
    rows: list[dict], sets: list[str], candidates: list[str], tol: float = 0.005
) -> list[dict]:
    """For each held-out set: among the candidates (default or a variant) that lose at most
    `tol` nDCG@10 against the default on every other set, the one with the best mean over
    the other sets, and its nDCG@10 on the held-out one against the default's."""
    ndcg = {(r["set"], r["run"]): r["ndcg@10"] for r in rows}
    out = []
    for held in sets:
        others = [s for s in sets if s != held]
        allowed = [
            c
            for c in candidates
            if all(ndcg[(s, c)] - ndcg[(s, "default")] >= -tol for s in others)
        ]
        pick = max(allowed, key=lambda c: np.mean([ndcg[(s, c)] for s in others]))
        out.append(
            {
                "held_out": held,
                "chosen_on_others": pick,
                "others_mean": float(np.mean([ndcg[(s, pick)] for s in others])),
                "held_out_ndcg": ndcg[(held, pick)],
                "default_held_out": ndcg[(held, "default")],
                "bm25s_held_out": ndcg[(held, "bm25s")],
            }
        )
    return out


def verdicts(rows: list[dict], sets: list[str], variants: list[str], tol: float = 0.005):
    """Each variant against the default: its worst and best per-set nDCG@10 change and
    whether it passes the rule (loses at most `tol` on every set)."""
    ndcg = {(r["set"], r["run"]): r["ndcg@10"] for r in rows}
    out = []
    for v in variants:
        deltas = {s: ndcg[(s, v)] - ndcg[(s, "default")] for s in sets}
        out.append(
            {
                "variant": v,
                **{s: round(d, 4) for s, d in deltas.items()},
                "mean": float(np.mean(list(deltas.values()))),
                "keeps_rule": min(deltas.values()) >= -tol,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated set names")
    parser.add_argument(
        "--variant", action="append", default=[], help=f"one of {', '.join(VARIANTS)} or all"
    )
    parser.add_argument("--corpora", type=Path, default=None, help="already unpacked sets")
    parser.add_argument(
        "--modes", default="lexical,semantic,default", help="modes run besides the variants"
    )
    parser.add_argument(
        "--max-queries", type=int, default=0, help="first N queries of each set (0: all)"
    )
    parser.add_argument("--ingest-only", action="store_true", help="prepare the indexes, stop")
    parser.add_argument(
        "--repack", action="store_true", help="ingest each set again in full (new pack settings)"
    )
    parser.add_argument(
        "--per-file", type=int, default=None, help="per-file cap of the -n 5 section answers"
    )
    parser.add_argument(
        "--fast", action="store_true", help="score files from mode_scores (no tiers, no shaping)"
    )
    parser.add_argument(
        "--query-path",
        choices=("reference", "warm"),
        default=None,
        help="a local encoder's queries: its NumPy reference throughout, or from the first "
        "query the onnxruntime session a warm process (`mdvdb serve`, an open Index) uses",
    )
    parser.add_argument("--model", help="MDVDB_EMBEDDING_MODEL of the indexes (own copies)")
    parser.add_argument(
        "--upgrade-seconds",
        help="MDVDB_UPGRADE_SECONDS of their ingest: a small budget leaves a partial upgrade",
    )
    parser.add_argument(
        "--multilingual",
        type=Path,
        nargs="?",
        const=Path("-"),
        help="also bench/multilingual.py's questions (a tldr checkout or git dir; no value: "
        "the shared archive), reported apart from the English sets",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model = {"MDVDB_EMBEDDING_MODEL": args.model} if args.model else {}
    if args.upgrade_seconds is not None:
        model["MDVDB_UPGRADE_SECONDS"] = args.upgrade_seconds
    if args.query_path:
        from kernel.providers import minilm

        if args.query_path == "reference":
            minilm.WARM_AFTER = 0  # never switch to the onnxruntime session
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in ARCHIVES]
    variants = list(VARIANTS) if "all" in args.variant else args.variant
    for v in variants:
        try:
            variant_settings(v)
        except ValueError:
            unknown.append(v)
    if unknown:
        parser.error(f"unknown set or variant: {', '.join(unknown)}")
    modes = [m for m in args.modes.split(",") if m]
    if variants and "default" not in modes:
        modes.append("default")  # variants are judged against it
    rows, infos = [], []
    for name in sets:
        target = Target(name, set_folder(name, args.corpora), args.repack, model)
        if args.ingest_only:
            print(f"{name}: {target.report.chunks_embedded} embedded, {target.ingest_s:.0f} s")
            continue
        if args.query_path in ("warm", "warm-int8") and not target.index.warm_up():
            parser.error(f"{name}: no fast query path (not a local encoder, or no onnxruntime)")
        if args.per_file is not None:
            target.shape = {"per_file": args.per_file}
        if args.max_queries:
            target.qids = target.qids[: args.max_queries]
            target.qrels = {q: target.qrels[q] for q in target.qids}
        r, info = run_set(target, variants, modes, args.fast)
        rows.extend(r)
        infos.append(info)
    rows.extend(means(rows, sets))
    print_table("Retrieval quality (files ranked by `mdvdb search --files`)", rows, args.json)
    print_table("Runs (ms per query)", infos, args.json)
    if variants:
        table = verdicts(rows, sets, variants)
        print_table("Variants against the default (nDCG@10 change)", table, args.json)
        loso = leave_one_set_out(rows, sets, ["default", *variants])
        print_table("Leave one set out", loso, args.json)
    if args.multilingual is not None:
        _multilingual(args)


def _multilingual(args) -> None:
    """bench/multilingual.py's table (questions in other languages), apart from the sets."""
    from bench import multilingual

    source = None if str(args.multilingual) == "-" else args.multilingual
    found = multilingual.run_all(
        argparse.Namespace(
            tldr=source, languages=",".join(multilingual.LANGUAGES), model=args.model, label="this"
        )
    )
    print_table("Questions in other languages (bench/multilingual.py)", found["rows"], args.json)
    print_table("Runs (other languages)", found["runs"], args.json)


if __name__ == "__main__":
    main()
