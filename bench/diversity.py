"""Result diversity on ray-docs-qa: repeated sections in the top 5, with and without collapse.

For every query of the set (queries.jsonl, page-level qrels), each mode runs the request the
CLI and MCP run (`query.request`) twice in the same process: as before (no near-duplicate
collapse, no per-file cap) and as shipped (collapse + MDVDB_SEARCH_PER_FILE). Reported:

- repeated@5: share of the top-5 sections that repeat a higher-ranked one, judged
  independently of the index's SimHash groups: word 3-shingle Jaccard >= 0.8 of the visible
  text (digits dropped, as a reader would judge "the same section");
- pages@5: distinct pages in the top 5; hit@5 and MRR@10 by page (the set's gold page), and
  hit@5 counting a page listed in a result's `also_in` (the same text under another name);
- the median time of a request.

    python bench/diversity.py --set PATH/ray-docs-qa [--root INGESTED_COPY_OF_ITS_md] [--json]
    python bench/diversity.py --latency INGESTED_TLDR --compare OTHER_CHECKOUT [--rounds 4]

The second form times warm searches on tldr (`Index.search`, and the whole request the CLI
and MCP run) with this checkout's code and another's (e.g. an export of main), alternating
rounds in fresh processes so both see the same machine load.

(`--set`: the unpacked set, e.g. `../shared/corpora/unpack.sh DEST ray-docs-qa`; without
`--root` its md/ folder is copied under MDVDB_BENCH_DIR and ingested there.)
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import unquote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, print_table  # noqa: E402

_WORD = re.compile(r"[^\W\d_]+")


def shingles(text: str) -> frozenset[int]:
    from kernel.plain_text import plain

    words = _WORD.findall(plain(text).casefold())
    if len(words) < 3:
        return frozenset([hash(tuple(words))])
    return frozenset(hash(tuple(words[i : i + 3])) for i in range(len(words) - 2))


def repeated(sets: list[frozenset[int]], threshold: float = 0.8) -> int:
    count = 0
    for j in range(1, len(sets)):
        for i in range(j):
            union = len(sets[i] | sets[j])
            if union and len(sets[i] & sets[j]) / union >= threshold:
                count += 1
                break
    return count


def load_set(folder: Path) -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    gold: dict[str, set[str]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if float(score) > 0:
            gold.setdefault(qid, set()).add(doc)
    return [(q["_id"], q["text"]) for q in queries if q["_id"] in gold], gold


def page_id(path: str) -> str:
    return unquote(Path(path).name.removesuffix(".md"))


def run(root: Path, folder: Path, k: int, modes: list[str]) -> list[dict]:
    from query import open_index
    from query.request import SearchRequest, run_request

    queries, gold = load_set(folder)
    index = open_index(root)
    texts = index.snapshot.table("chunks").column("text")
    cache: dict[int, frozenset[int]] = {}
    rows = []
    for mode in modes:
        run_request(index, SearchRequest(query="warm up", mode=mode))
        for shipped in (False, True):
            rep = shown = pages = hits = copy_hits = 0
            rr, times = 0.0, []
            for qid, text in queries:
                request = SearchRequest(
                    query=text,
                    limit=10,
                    mode=mode,
                    collapse=shipped,
                    per_file=None if shipped else 0,
                )
                start = time.perf_counter()
                with index.pinned():
                    outcome = run_request(index, request)
                times.append(time.perf_counter() - start)
                hits_ = [hit for _, hit in outcome.tiers.results]
                top = hits_[:k]
                for hit in top:
                    if hit.chunk_id not in cache:
                        cache[hit.chunk_id] = shingles(texts[hit.chunk_id].as_py())
                rep += repeated([cache[hit.chunk_id] for hit in top])
                shown += len(top)
                pages += len({hit.path for hit in top})
                ranked_pages = list(dict.fromkeys(page_id(hit.path) for hit in hits_))
                hits += any(p in gold[qid] for p in ranked_pages[:k])
                # a copy listed in `also_in` is the same text under another page's name
                with_copies = [
                    {page_id(hit.path), *(page_id(c["path"]) for c in hit.also_in)} for hit in hits_
                ]
                seen_pages: list[set[str]] = []
                for names in with_copies:
                    if not any(names & earlier for earlier in seen_pages):
                        seen_pages.append(names)
                copy_hits += any(names & gold[qid] for names in seen_pages[:k])
                for rank, p in enumerate(ranked_pages[:10], 1):
                    if p in gold[qid]:
                        rr += 1 / rank
                        break
            n = len(queries)
            rows.append(
                {
                    "mode": mode,
                    "results": "collapse + per-file cap" if shipped else "before (neither)",
                    "queries": n,
                    f"repeated@{k}": rep / shown if shown else 0.0,
                    f"pages@{k}": pages / n,
                    f"hit@{k}": hits / n,
                    f"hit@{k}+also_in": copy_hits / n,
                    "mrr@10": rr / n,
                    "median_ms": statistics.median(times) * 1000,
                }
            )
    return rows


LATENCY_SCRIPT = r"""
import json, random, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from bench.query import QUERIES
from query import open_index
import query.request as requests
from query.request import SearchRequest
run_request = getattr(requests, "run_request", None) or requests.run  # an older checkout: run
index = open_index(sys.argv[2])
rng = random.Random(1)
queries = [rng.choice(QUERIES) + f" {i % 7}" for i in range(int(sys.argv[3]))]
index.search(queries[0]); run_request(index, SearchRequest(query=queries[0]))
out = {}
for what in ("Index.search", "request"):
    times = []
    for q in queries:
        start = time.perf_counter()
        if what == "Index.search":
            index.search(q, limit=10)
        else:
            with index.pinned():
                run_request(index, SearchRequest(query=q, limit=10))
        times.append(time.perf_counter() - start)
    out[what] = statistics.median(times) * 1000
print(json.dumps({"code": __import__("query").__file__, **out}))
"""


def latency(root: Path, other: Path, rounds: int, queries: int) -> list[dict]:
    import subprocess
    import tempfile

    here = Path(__file__).resolve().parents[1]
    samples: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as cwd:  # not a checkout: sys.path[0] decides
        for _ in range(rounds):
            for code in (other, here):
                done = subprocess.run(
                    [sys.executable, "-c", LATENCY_SCRIPT, str(code), str(root), str(queries)],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=cwd,
                )
                found = json.loads(done.stdout.strip().splitlines()[-1])
                assert found["code"].startswith(str(code)), found["code"]
                for what in ("Index.search", "request"):
                    samples.setdefault(str(code), {}).setdefault(what, []).append(found[what])
    rows = []
    for what in ("Index.search", "request"):
        base = statistics.median(samples[str(other)][what])
        mine = statistics.median(samples[str(here)][what])
        rows.append(
            {
                "call": what,
                "other_ms": base,
                "this_ms": mine,
                "ratio": mine / base,
                "rounds": rounds,
                "queries": queries,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, help="the unpacked ray-docs-qa set")
    parser.add_argument("--latency", type=Path, help="an ingested tldr: time warm searches")
    parser.add_argument("--compare", type=Path, help="another checkout to time (--latency)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--root", type=Path, help="an ingested copy of the set's md/ folder")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--modes", nargs="+", default=["hybrid", "lexical", "semantic"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.latency:
        rows = latency(args.latency, args.compare, args.rounds, args.queries)
        print_table("warm search latency, median ms: this checkout vs another", rows, args.json)
        return
    if args.set is None:
        parser.error("--set (or --latency) is required")
    root = args.root
    if root is None:
        import shutil
        import subprocess

        root = WORK / "diversity-ray-docs-qa"
        if not root.exists():
            shutil.copytree(args.set / "md", root)
        if not (root / ".markdownvdb.index").exists():
            subprocess.run(["mdvdb", "ingest", "--quiet", "--root", str(root)], check=True)
    rows = run(root, args.set, args.k, args.modes)
    print_table("ray-docs-qa: repeated sections and pages in the top k", rows, args.json)


if __name__ == "__main__":
    main()
