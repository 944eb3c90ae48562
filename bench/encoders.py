"""WordLlama vs all-MiniLM-L6-v2 through the real pipeline: ingest speed, memory, quality.

    python bench/encoders.py /work/corpora/{nfcorpus,cranfield,cacm,arguana,ray-docs-qa} [--json]
    python bench/encoders.py ... --runtimes 256   # + NumPy vs onnxruntime on 256 chunk texts
    python bench/encoders.py ... --windows        # + MiniLM: cut at 256 word-pieces vs windows
    python bench/encoders.py ... --batching 128   # + the int8 graph: 1 text/run vs batches

Per set and model: the documents are written as Markdown (bench/quality.py's layout) into a
folder of their own whose `.markdownvdb` names the model, and a fresh `mdvdb ingest` process
indexes it, timed (wall, CPU) with its peak RSS (`/usr/bin/time`). An existing index is
reused with its recorded timing (`--fresh` re-ingests). Then every test query runs in the
semantic and hybrid modes of `query.rank.search`, and plain BM25 (bm25s) in the same run.

Fusion per model: hybrid nDCG@10 over a grid of fusion settings on every set, and the
leave-one-set-out choice (the setting best on the mean of the other sets, scored on the held
out one), the rule that chose `kernel/fusion_models.py`.

`--runtimes N`: the same N chunk texts of the first set embedded by the NumPy reference and by
the onnxruntime graph in this process, one after the other: chunks/s of each and their ratio,
which is how the speed is stated when the machine's load makes absolute figures meaningless.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, print_table  # noqa: E402
from bench.quality import bm25_baseline, evaluate, load_beir  # noqa: E402

DEPTH = 100


# The flat Markdown layout (docs/<id>.md) and the per-mode runs this benchmark was measured
# with; bench/quality.py has since moved to its own layout and runner.
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


def rank_documents(scores: np.ndarray, chunk_doc: np.ndarray, valid: np.ndarray | None) -> list:
    """Document order by best chunk score (the top DEPTH documents)."""
    best = np.full(int(chunk_doc.max()) + 1, -np.inf, dtype=np.float64)
    use = scores if valid is None else np.where(valid, scores, -np.inf)
    np.maximum.at(best, chunk_doc, use)
    order = np.argsort(-best, kind="stable")[:DEPTH]
    return [int(i) for i in order if np.isfinite(best[i])]


def memoize_inputs(index) -> None:
    """Per query, the BM25F scores, page scores and query vector are the same for every
    fusion setting: remember them on this index's own objects, so a sweep of many settings
    runs `query.rank.search.mode_scores` itself (page-level and name evidence included) at the
    cost of the fusion only."""
    from query.score.lexical import lexical_index

    lexical = lexical_index(index)
    provider = index.provider()
    for owner, name in ((lexical, "scores"), (lexical, "page_scores"), (provider, "embed_query")):
        real = getattr(owner, name, None)
        if real is None or hasattr(real, "memo"):
            continue
        memo: dict = {}

        def cached(*args, _real=real, _memo=memo):
            if args not in _memo:
                _memo[args] = _real(*args)
            return _memo[args]

        cached.memo = memo
        setattr(owner, name, cached)


def mdvdb_runs(index, queries: dict, qids: list[str], doc_of_file: list[str], modes, drop_self):
    """Per mode: query id -> ranked document ids, files ranked by their best section's
    score from `query.rank.search.mode_scores` (bench/quality.py's --fast ranking)."""
    from query.rank.search import mode_scores

    memoize_inputs(index)
    chunk_doc = index.snapshot.chunk_file_ids
    runs: dict[str, dict[str, list[str]]] = {m: {} for m in modes}
    for q in qids:
        for mode in modes:
            scores, parts = mode_scores(index, queries[q], mode)
            valid = parts.get("_candidates")
            ranked = [doc_of_file[i] for i in rank_documents(scores, chunk_doc, valid)]
            runs[mode][q] = [d for d in ranked if not (drop_self and d == q)]
    return runs


HYBRID = ("hybrid",)
MODELS = {"wordllama": "wordllama-l2-supercat", "minilm": "all-minilm-l6-v2"}
# The neighbourhood of the earlier choices (no set ever picked dense weight 0.2 or Rocchio
# β 0 on the wider grid of the first round: docs/search-quality.md).
GRID = {
    "dense_weight": (0.3, 0.4, 0.5, 0.6),
    "feedback_weight": (0.2, 0.4),
    "dense_feedback_weight": (0.5, 1.0),
}


def load() -> float:
    return round(os.getloadavg()[0], 1)


def ingest(folder: Path, name: str, model: str, fresh: bool) -> tuple[Path, dict, dict]:
    """The set written as Markdown under WORK/encoders/<set>/<model>, ingested by a fresh
    `mdvdb ingest` process unless an index is there; returns root, doc-id map, timing."""
    corpus, _, _ = load_beir(folder)
    root = WORK / "encoders" / folder.name / name
    stamp = root / "ingest.json"
    if fresh:
        shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    paths = write_markdown(corpus, root)
    (root / ".markdownvdb").write_text(f"MDVDB_EMBEDDING_MODEL={model}\n", encoding="utf-8")
    if stamp.is_file() and (root / ".markdownvdb.index").is_file():
        return root, paths, json.loads(stamp.read_text(encoding="utf-8"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MDVDB_EMBEDDING")}
    usage = root / "time.txt"
    before = load()
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M %U %S", "-o", str(usage), sys.executable, "-m", "mdvdb"]
        + ["ingest", "--json", "--root", str(root)],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"ingest of {root} failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    rss_kb, user, system = usage.read_text().split()[-3:]
    timing = {
        "files": report["files"],
        "chunks": report["chunks_embedded"],
        "wall_s": round(wall, 1),
        "cpu_s": round(float(user) + float(system), 1),
        "embed_s": round(report["stage_seconds"]["embed"], 1),
        "chunks_per_s": round(report["chunks_embedded"] / wall, 1),
        "peak_rss_mb": round(int(rss_kb) / 1024),
        "load_before": before,
        "load_after": load(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    stamp.write_text(json.dumps(timing), encoding="utf-8")
    return root, paths, timing


def quality(folder: Path, roots: dict, baseline_cache: dict) -> tuple[list[dict], dict]:
    """Rows per model (semantic, hybrid as shipped) and the raw inputs of the fusion sweep."""
    from kernel.config import load_config
    from query import open_index

    corpus, queries, qrels = load_beir(folder)
    qids = list(qrels)
    if folder.name not in baseline_cache:
        drop_self = folder.name == "arguana"  # BEIR: a query's own id is not an answer
        base = evaluate(bm25_baseline(corpus, queries, qids, drop_self), qrels)["ndcg@10"]
        baseline_cache[folder.name] = base
    base = baseline_cache[folder.name]
    rows, raws = [], {}
    for name, (root, paths, timing) in roots.items():
        index = open_index(config=load_config(root, environ={}))
        doc_of_file = [paths[p] for p in index.snapshot.paths]
        drop_self = folder.name == "arguana"
        runs = mdvdb_runs(index, queries, qids, doc_of_file, ("semantic", "hybrid"), drop_self)
        semantic = evaluate(runs["semantic"], qrels)["ndcg@10"]
        hybrid = evaluate(runs["hybrid"], qrels)["ndcg@10"]
        rows.append(
            {
                "set": folder.name,
                "model": name,
                "chunks": timing["chunks"],
                "ingest_s": timing["wall_s"],
                "chunks/s": timing["chunks_per_s"],
                "peak_rss_mb": timing["peak_rss_mb"],
                "load": f"{timing['load_before']}-{timing['load_after']}",
                "bm25s": base,
                "semantic": semantic,
                "hybrid": hybrid,
                "hybrid-bm25s": hybrid - base,
            }
        )
        raws[name] = (index, {q: queries[q] for q in qids}, qrels, doc_of_file, drop_self)
    return rows, raws


def sweep(raws: tuple) -> list[dict]:
    """Hybrid nDCG@10 of every GRID setting on one set, for one model, through
    `query.rank.search.mode_scores` (the shipped hybrid with page-level and name evidence) with
    the index's recorded settings set aside and the GRID values in force."""
    from query.score import fusion

    index, queries, qrels, doc_of_file, drop_self = raws
    known = {f.name for f in fields(fusion.PARAMS)}
    meta = index.snapshot.meta
    recorded = meta.get("fusion")
    meta["fusion"] = {}  # the grid's values, not those recorded at ingest
    rows = []
    try:
        for values in itertools.product(*GRID.values()):
            settings = {k: v for k, v in zip(GRID, values, strict=True) if k in known}
            with fusion.overridden(**settings):
                runs = mdvdb_runs(index, queries, list(queries), doc_of_file, HYBRID, drop_self)
            judged = {q: qrels[q] for q in queries}
            rows.append({**settings, "ndcg@10": evaluate(runs["hybrid"], judged)["ndcg@10"]})
    finally:
        meta["fusion"] = recorded
    return rows


def leave_one_out(grid: dict[str, list[dict]]) -> tuple[list[dict], dict]:
    """grid: set -> sweep rows (same order). For each set, the setting with the best mean over
    the other sets, scored on this one; and the setting best over all sets (what ships)."""
    sets = list(grid)
    keys = [k for k in grid[sets[0]][0] if k != "ndcg@10"]
    n = len(grid[sets[0]])
    score = {s: np.array([r["ndcg@10"] for r in grid[s]]) for s in sets}
    rows = []
    for held in sets:
        others = np.mean([score[s] for s in sets if s != held], axis=0)
        pick = int(np.argmax(others))
        setting = {k: grid[held][pick][k] for k in keys}
        rows.append({"held_out": held, **setting, "held_out_ndcg@10": float(score[held][pick])})
    overall = int(np.argmax(np.mean([score[s] for s in sets], axis=0)))
    del n
    chosen = {k: grid[sets[0]][overall][k] for k in keys}
    per_set = [{"set": s, **chosen, "ndcg@10": float(score[s][overall])} for s in sets]
    return rows, per_set


def runtime_ratio(root: Path, count: int) -> list[dict]:
    """NumPy reference vs onnxruntime on the same chunk texts, same process, one after the
    other (twice, alternating, to even out the machine's load)."""
    from kernel.config import load_config
    from kernel.providers.minilm import MiniLMProvider
    from query import open_index

    index = open_index(config=load_config(root, environ={}))
    texts = [str(t) for t in index.snapshot.table("chunks").column("text").to_pylist()[:count]]
    providers = {r: MiniLMProvider("all-minilm-l6-v2", runtime=r) for r in ("numpy", "onnx")}
    seconds = {r: [] for r in providers}
    vectors = {}
    for _ in range(2):
        for runtime, provider in providers.items():
            start = time.perf_counter()
            vectors[runtime] = provider.embed(texts)
            seconds[runtime].append(time.perf_counter() - start)
    cosines = (vectors["numpy"] * vectors["onnx"]).sum(axis=1)
    rows = []
    for runtime, secs in seconds.items():
        rows.append(
            {
                "runtime": runtime,
                "texts": len(texts),
                "chunks/s": len(texts) / min(secs),
                "vs numpy": min(seconds["numpy"]) / min(secs),
                "cos min": float(cosines.min()),
                "cos mean": float(cosines.mean()),
                "load": load(),
            }
        )
    return rows


def batching(root: Path, count: int, rounds: int = 3) -> list[dict]:
    """The int8 graph over the same `count` chunk texts, four ways, alternating `rounds`
    times in one process (the best round of each): one text per run on one worker per core
    (what ships), one text per run on one worker with every core as intra-op threads, and
    length-sorted padded batches (up to minilm.TOKENS_PER_PASS tokens) on either layout.
    Texts/s, the ratio to what ships, and the CPU seconds each took."""
    from kernel.config import load_config
    from kernel.providers import encoder_onnx
    from kernel.providers.minilm import TOKENS_PER_PASS, MiniLMProvider
    from query import open_index

    index = open_index(config=load_config(root, environ={}))
    texts = [str(t) for t in index.snapshot.table("chunks").column("text").to_pylist()[:count]]
    cores = os.cpu_count() or 1
    provider = MiniLMProvider("all-minilm-l6-v2", runtime="onnx")
    spec, path = provider.spec, provider.encoder.path
    ways = {}
    for label, threads, workers, per_pass in (
        ("1 text/run, workers = cores", 1, cores, 1),
        ("1 text/run, threads = cores", cores, 1, 1),
        ("padded batches, threads = cores", cores, 1, TOKENS_PER_PASS),
        ("padded batches, workers = cores", 1, cores, TOKENS_PER_PASS),
    ):
        encoder = encoder_onnx.OnnxEncoder(path, spec, threads)
        encoder.workers, encoder.tokens_per_pass = workers, per_pass
        ways[label] = encoder
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for label, encoder in ways.items():
            provider.encoder = encoder
            cpu, start = time.process_time(), time.perf_counter()
            provider.embed(texts)
            wall, used = time.perf_counter() - start, time.process_time() - cpu
            if label not in best or wall < best[label][0]:
                best[label] = (wall, used)
    shipped = best["1 text/run, workers = cores"][0]
    return [
        {
            "way": label,
            "texts": len(texts),
            "texts/s": len(texts) / wall,
            "vs shipped": shipped / wall,
            "cpu_s": round(used, 1),
            "load": load(),
        }
        for label, (wall, used) in best.items()
    ]


def latency(roots: dict, runs: int) -> list[dict]:
    """Per model, on the same set: a cold `mdvdb search` process (median wall and CPU time of
    `runs`, interleaved across the models so they share the machine's load), a warm
    in-process `Index.search` and the query embedding alone (medians of 20 after one
    warm-up), same queries, same run. CPU time (user + system of the child) is what to
    compare on a loaded machine: wall time there is mostly waiting for a core."""
    import resource
    import statistics

    from kernel.config import load_config
    from query import open_index
    from query.rank.search import query_vector

    queries = ["extract a tar archive", "vitamin d and bone fractures", "rotate an api key"]
    env = {**os.environ, "MDVDB_NO_WARM": "1"}  # never answered by a warm server
    cold: dict[str, list[float]] = {name: [] for name in roots}
    cpu: dict[str, list[float]] = {name: [] for name in roots}
    for i in range(runs):
        for name, (root, _paths, _timing) in roots.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "mdvdb", "search", queries[i % 3], "--root", str(root)],
                capture_output=True,
                text=True,
                env=env,
            )
            cold[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if done.returncode != 0:
                raise SystemExit(f"search failed: {done.stderr}")
    rows = []
    for name, (root, _paths, _timing) in roots.items():
        index = open_index(config=load_config(root, environ={}))
        index.search("warm up")
        warm, embed = [], []
        for i in range(20):
            start = time.perf_counter()
            index.search(f"{queries[i % 3]} {i}")
            warm.append(time.perf_counter() - start)
            start = time.perf_counter()
            query_vector(index, f"{queries[i % 3]} {i}")
            embed.append(time.perf_counter() - start)
        rows.append(
            {
                "model": name,
                "chunks": int(index.snapshot.vectors.shape[0]),
                "cold_cli_ms": statistics.median(cold[name]) * 1000,
                "cold_cpu_ms": statistics.median(cpu[name]) * 1000,
                "warm_ms": statistics.median(warm) * 1000,
                "embed_ms": statistics.median(embed) * 1000,
                "load": load(),
            }
        )
    return rows


def windows(raws: dict, width: int = 256, stride: int = 192) -> list[dict]:
    """MiniLM: chunks longer than `width` word-pieces re-embedded as the mean of windows of
    `width` every `stride`, then the same semantic and hybrid runs as with the cut vectors."""
    from kernel.providers.base import normalize_rows
    from kernel.providers.minilm import MiniLMProvider
    from query.score.fusion import PARAMS, hybrid
    from query.score.lexical import lexical_index

    index, queries, qrels, doc_of_file, drop_self = raws
    provider = MiniLMProvider("all-minilm-l6-v2")
    tokenizer = provider.tokenizer
    texts = [str(t) for t in index.snapshot.table("chunks").column("text").to_pylist()]
    tokenizer.no_truncation()
    try:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    finally:
        tokenizer.enable_truncation(max_length=provider.encoder.max_tokens)
    inner = width - 2
    long_rows, pieces, owners = [], [], []
    for row, enc in enumerate(encodings):
        if len(enc.ids) <= inner:
            continue
        long_rows.append(row)
        for start in range(0, max(1, len(enc.ids) - inner + stride), stride):
            span = enc.offsets[start : start + inner]
            if not span:
                break
            pieces.append(texts[row][span[0][0] : span[-1][1]])
            owners.append(row)
    started = time.perf_counter()
    piece_vectors = provider.embed(pieces) if pieces else np.zeros((0, provider.dimensions))
    seconds = time.perf_counter() - started
    vectors = np.array(index.snapshot.vectors, copy=True)
    owners_arr = np.asarray(owners)
    for row in long_rows:
        vectors[row] = piece_vectors[owners_arr == row].mean(axis=0)
    if long_rows:
        vectors[long_rows] = normalize_rows(vectors[long_rows])
    lexical = lexical_index(index)
    chunk_doc = index.snapshot.chunk_file_ids
    runs = {"semantic": {}, "hybrid": {}}
    for q, text in queries.items():
        bm25, vector = lexical.scores(text), index.provider().embed_query(text)
        cosine = vectors @ vector
        runs["semantic"][q] = [doc_of_file[i] for i in rank_documents(cosine, chunk_doc, None)]
        fused, _ = hybrid(lexical, vectors, vector, bm25, PARAMS)
        order = rank_documents(fused.scores, chunk_doc, fused.scores > 0)
        runs["hybrid"][q] = [doc_of_file[i] for i in order]
    return [
        {
            "long_chunks": len(long_rows),
            "of_chunks": len(texts),
            "windows": len(pieces),
            "extra_embed_s": round(seconds, 1),
            "semantic": evaluate(runs["semantic"], qrels)["ndcg@10"],
            "hybrid": evaluate(runs["hybrid"], qrels)["ndcg@10"],
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="BEIR-layout folders")
    parser.add_argument("--models", default="wordllama,minilm")
    parser.add_argument("--fresh", action="store_true", help="re-ingest every set")
    parser.add_argument("--runtimes", type=int, default=0, metavar="N")
    parser.add_argument("--windows", action="store_true")
    parser.add_argument(
        "--batching", type=int, default=0, metavar="N", help="onnx: batches vs 1 text/run"
    )
    parser.add_argument("--latency", type=int, default=0, metavar="RUNS", help="query latency")
    parser.add_argument("--sweep", default="wordllama,minilm", help="models whose fusion to sweep")
    parser.add_argument(
        "--sweep-queries", type=int, default=0, metavar="N", help="first N queries per set (0: all)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="a set's saved quality rows and sweep, if there"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    swept = [m for m in args.sweep.split(",") if m in models]
    rows, grids, baseline, extra, speed = [], {m: {} for m in swept}, {}, [], []
    for folder in args.folders:
        folder = folder.resolve()
        roots = {m: ingest(folder, m, MODELS[m], args.fresh) for m in models}
        if args.latency:
            speed.extend({"set": folder.name} | r for r in latency(roots, args.latency))
        saved = WORK / "encoders" / folder.name / f"result-{'-'.join(models)}.json"
        if args.reuse and saved.is_file() and not args.windows:
            result = json.loads(saved.read_text(encoding="utf-8"))
            baseline[folder.name] = result["bm25s"]
            rows.extend(result["rows"])
            for m in swept:
                grids[m][folder.name] = result["grids"][m]
            print(f"{folder.name}: reused {saved}", file=sys.stderr, flush=True)
            continue
        set_rows, raws = quality(folder, roots, baseline)
        rows.extend(set_rows)
        for m in swept:
            index, queries, qrels, doc_of_file, drop_self = raws[m]
            if args.sweep_queries:
                queries = dict(itertools.islice(queries.items(), args.sweep_queries))
            grids[m][folder.name] = sweep((index, queries, qrels, doc_of_file, drop_self))
        result = {"bm25s": baseline[folder.name], "rows": set_rows, "grids": {}}
        result["grids"] = {m: grids[m][folder.name] for m in swept}
        result["sweep_queries"] = args.sweep_queries
        saved.write_text(json.dumps(result), encoding="utf-8")
        if args.windows and "minilm" in raws:
            cut = next(r for r in set_rows if r["model"] == "minilm")
            for r in windows(raws["minilm"]):
                head = {"set": folder.name, "cut semantic": cut["semantic"]}
                head["cut hybrid"] = cut["hybrid"]
                renamed = {"semantic": "windows semantic", "hybrid": "windows hybrid"}
                tail = {renamed.get(k, k): v for k, v in r.items()}
                extra.append(head | tail)
        print(f"{folder.name}: done (load {load()})", file=sys.stderr, flush=True)
    print_table("Encoders through the pipeline: ingest and nDCG@10", rows, args.json)
    for m in swept:
        if len(grids[m]) > 1:
            loso, per_set = leave_one_out(grids[m])
            for row in loso:
                row["vs bm25s"] = row["held_out_ndcg@10"] - baseline[row["held_out"]]
            for row in per_set:
                row["vs bm25s"] = row["ndcg@10"] - baseline[row["set"]]
            print_table(f"Fusion for {m}: leave one set out", loso, args.json)
            print_table(f"Fusion for {m}: best over all sets, per set", per_set, args.json)
    if speed:
        print_table("Query latency: cold CLI process and warm in-process search", speed, args.json)
    if extra:
        print_table("MiniLM: cut at 256 word-pieces vs mean of windows", extra, args.json)
    if args.batching and "minilm" in models:
        root = WORK / "encoders" / args.folders[0].resolve().name / "minilm"
        print_table("MiniLM int8 graph: runs and batches", batching(root, args.batching), args.json)
    if args.runtimes and "minilm" in models:
        root = WORK / "encoders" / args.folders[0].resolve().name / "minilm"
        print_table("MiniLM runtimes, same texts", runtime_ratio(root, args.runtimes), args.json)


if __name__ == "__main__":
    main()
