"""Query benchmark: warm in-process search (p50/p95) and a cold `mdvdb search` process.

Reference alternatives in the same run: brute force over a float32 copy of the vectors in RAM
(the query embedded, `M @ v` with NumPy's default threads, argsort), the `M @ v` scan alone, and
`rg -l` for the cold process (the cheapest thing a user could run instead).

    python bench/query.py [--corpus tldr] [--queries 200] [--json]
    python bench/query.py --models wordllama,minilm --minilm-root /tmp/tldr-minilm --bm25s

"Warm" is a process that holds the index open and has answered queries before: `mdvdb
serve`, `mdvdb mcp`, a library `Index`. Here: one `Index`, one search to map the index and load
the model, then `Index.warm_up()` (what serve and mcp run at start; a library Index does it by
itself from its second query, in the background), then the timed searches, p50 and p95.
`--models` times each embedding model's index of the corpus in the same run (MiniLM's is
`--minilm-root`, or a copy of the corpus ingested with MDVDB_EMBEDDING_MODEL=all-minilm-l6-v2
under $MDVDB_BENCH_DIR), with the query embedding alone as its own row; `--bm25s` adds plain
BM25 (bm25s, top 10 over the same chunk texts, query tokenised and scored per call).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, corpus, p95_ms, print_table, run  # noqa: E402
from bench.ingest import MDVDB, _rg, prepare  # noqa: E402

QUERIES = [
    "extract a tar archive",
    "list open network ports",
    "change file permissions",
    "show disk usage of a folder",
    "download a file over http",
    "search text in files recursively",
    "kill a process by name",
    "create a git branch",
    "compress images",
    "convert video to gif",
    "schedule a recurring job",
    "show system memory",
]


MODELS = {"wordllama": "wordllama-l2-supercat", "minilm": "all-minilm-l6-v2"}


def model_root(name: str, model: str, given: Path | None) -> Path:
    """The corpus folder indexed with `model`: the default model's is the corpus itself;
    another's is `given`, else a copy under WORK whose `.markdownvdb` names the model."""
    if model == "wordllama":
        return prepare(name) if name.startswith("gen") else corpus(name)
    if given is not None:
        return given
    root = WORK / f"corpora-{model}" / name
    if not root.exists():
        import shutil

        shutil.copytree(corpus(name), root, ignore=shutil.ignore_patterns(".markdownvdb*"))
        (root / ".markdownvdb").write_text(f"MDVDB_EMBEDDING_MODEL={MODELS[model]}\n")
    return root


def queries_for(n_queries: int) -> list[str]:
    rng = random.Random(1)
    return [rng.choice(QUERIES) + f" {i % 7}" for i in range(n_queries)]


def bench(
    name: str,
    n_queries: int,
    cold_runs: int,
    against: dict | None = None,
    model: str = "wordllama",
    root: Path | None = None,
) -> list[dict]:
    root = model_root(name, model, root)
    if not (root / ".markdownvdb.index").exists():
        run([*MDVDB, "ingest", "--root", str(root)])
    from kernel.config import load_config
    from query import open_index

    index = open_index(config=load_config(root))
    queries = queries_for(n_queries)
    index.search(queries[0])  # load the model and map the index
    fast_queries = index.warm_up()  # as `mdvdb serve` / `mdvdb mcp` do at start
    warm, other, embed = [], [], []
    from query.score import fusion

    for q in queries:
        start = time.perf_counter()
        index.search(q, limit=10)
        warm.append(time.perf_counter() - start)
        if against is not None:  # the same query with other ranking settings, interleaved
            with fusion.overridden(**against):
                start = time.perf_counter()
                index.search(q, limit=10)
                other.append(time.perf_counter() - start)

    from query import query_vector

    for q in queries:
        start = time.perf_counter()
        query_vector(index, q)
        embed.append(time.perf_counter() - start)

    import numpy as np

    matrix = np.array(index.snapshot.vectors)  # a private copy in RAM: no map
    provider = index.provider()
    brute, scan = [], []
    for q in queries:
        start = time.perf_counter()
        v = provider.embed([q])[0]
        scores = matrix @ v
        np.argsort(-scores)[:10]
        brute.append(time.perf_counter() - start)
        start = time.perf_counter()
        matrix @ v
        scan.append(time.perf_counter() - start)

    cold = []
    for q in QUERIES[:cold_runs]:
        start = time.perf_counter()
        result = run([*MDVDB, "search", q, "--root", str(root), "--json"])
        cold.append(time.perf_counter() - start)
        assert result.returncode == 0, result.stderr
    rg = []
    for q in QUERIES[:cold_runs]:
        start = time.perf_counter()
        run([_rg(), "-l", "-i", q.split()[-1], str(root)])
        rg.append(time.perf_counter() - start)
    chunks = index.snapshot.vectors.shape[0]

    def row(what: str, samples: list[float]) -> dict:
        p50 = statistics.median(samples) * 1000 if samples else float("nan")
        return {
            "corpus": name,
            "model": model,
            "what": what,
            "chunks": chunks,
            "p50_ms": p50,
            "p95_ms": p95_ms(samples) if samples else float("nan"),
        }

    settings = ", ".join(f"{k}={v}" for k, v in (against or {}).items())
    embedder = "reference"
    if fast_queries:
        embedder = "onnxruntime, float32 graph"
    return [
        row("mdvdb search, warm, in-process", warm),
        *([row(f"mdvdb search, warm, in-process ({settings})", other)] if other else []),
        row(f"query embedding alone, warm ({embedder})", embed),
        row("brute force: embed, M @ v, argsort (RAM copy)", brute),
        row("M @ v alone, float32 RAM copy (NumPy default threads)", scan),
        *([row("mdvdb search, cold process", cold)] if cold_runs else []),
        *([row("rg -l -i WORD, cold process", rg)] if cold_runs else []),
    ]


def bench_bm25s(name: str, n_queries: int) -> list[dict]:
    """Plain BM25 (bm25s) over the corpus's chunk texts as mdvdb indexed them: top 10 per
    query, the query tokenised (English stop-words, Snowball) and scored at each call."""
    import bm25s
    import Stemmer

    from kernel.config import load_config
    from query import open_index

    index = open_index(config=load_config(model_root(name, "wordllama", None)))
    texts = index.snapshot.table("chunks").column("text").to_pylist()
    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25()
    model.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    samples = []
    for q in queries_for(n_queries):
        start = time.perf_counter()
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
        model.retrieve(tokens, k=10, show_progress=False, n_threads=1)
        samples.append(time.perf_counter() - start)
    return [
        {
            "corpus": name,
            "model": "bm25s",
            "what": "bm25s retrieve top 10, warm, in-process",
            "chunks": len(texts),
            "p50_ms": statistics.median(samples) * 1000,
            "p95_ms": p95_ms(samples),
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=["tldr"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also time warm search with these query.score.fusion settings, interleaved",
    )
    parser.add_argument(
        "--models", default="wordllama", help=f"comma-separated, of {', '.join(MODELS)}"
    )
    parser.add_argument(
        "--minilm-root", type=Path, default=None, help="the corpus already ingested with MiniLM"
    )
    parser.add_argument("--bm25s", action="store_true", help="also time plain BM25 (bm25s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    if unknown := [m for m in models if m not in MODELS]:
        parser.error(f"unknown model: {', '.join(unknown)}")
    against = None
    if args.against:
        from query.score.fusion import PARAMS

        against = {}
        for item in args.against:
            name, _, value = item.partition("=")
            against[name] = type(getattr(PARAMS, name))(value)
    rows = []
    for name in args.corpus:
        for model in models:
            root = args.minilm_root if model == "minilm" else None
            rows.extend(bench(name, args.queries, args.cold, against, model, root))
        if args.bm25s:
            rows.extend(bench_bm25s(name, args.queries))
    print_table("mdvdb search latency", rows, args.json)


if __name__ == "__main__":
    main()
