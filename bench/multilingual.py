"""Questions in other languages (issue 32, item 5): tldr-pages in French, German, Spanish and
Russian, questions written in each language, through the code path of `mdvdb search`.

    python bench/multilingual.py [--tldr PATH] [--languages fr,de] [--model NAME] [--json]
    python bench/multilingual.py --reference OTHER_CHECKOUT    # its code too, in the same run

`--tldr`: a tldr-pages checkout (or unpacked archive: `pages.fr/`, `pages.de/`...) or the bare
git directory of a clone, read at the pinned commit (`TLDR_COMMIT`); by default the tldr
archive of ../shared/corpora (the same commit), unpacked under $MDVDB_BENCH_DIR (default
/tmp/mdvdb-bench). The pages are not part of the project: `bench/multilingual/questions.jsonl`
holds the questions (language, question, the page of that language's folder that answers it,
each checked by reading it). Each language is its own folder, `pages.<lang>` copied under
$MDVDB_BENCH_DIR/multilingual/<code label>/<lang>, ingested by
`pipeline.ingest.ingest_folder` as `mdvdb ingest` does and kept: a folder of one language is
what a user has, and a folder of every language would make each page's translations compete
with it (the answer is one language's page).

Per language: hit@1, hit@5, MRR@10 and nDCG@10 (one relevant page) of the files `mdvdb search
--files -n 100` ranks, in the default mode, lexical and semantic, and, in the same run, the
two arms of bench/quality.py with that language's Snowball stemmer and stop words: `bm25s`
and `fusion` (bm25s + WordLlama over whole pages). `--reference DIR` runs the same with DIR's
code (another checkout: main's analyser, for a before/after) in a subprocess, its own index
folders, and prints both. `--model` builds the indexes with that embedding model (own folders).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import SHARED, WORK, print_table  # noqa: E402

QUESTIONS = REPO / "bench" / "multilingual" / "questions.jsonl"
TLDR_COMMIT = "08e345f42639f67d99282813247ac670dc6e87cb"  # tldr-pages/tldr, CC BY 4.0
# language -> (tldr folder, PyStemmer algorithm, bm25s stop words)
LANGUAGES = {
    "fr": ("pages.fr", "french", "fr"),
    "de": ("pages.de", "german", "de"),
    "es": ("pages.es", "spanish", "es"),
    "ru": ("pages.ru", "russian", "ru"),
}
MODES = ("default", "lexical", "semantic")
DEPTH = 100


def questions(path: Path = QUESTIONS) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def tldr_pages(source: Path | None) -> Path:
    """A folder holding `pages.<lang>/`: `source` itself, or `source` a bare git directory
    read at TLDR_COMMIT, or the shared archive; unpacked under WORK once."""
    if source is not None and (source / "pages.fr").is_dir():
        return source
    target = WORK / "multilingual" / "tldr"
    if (target / "pages.fr").is_dir():
        return target
    target.mkdir(parents=True, exist_ok=True)
    if source is not None:  # a git directory (what the fetch tool or `git clone --bare` gives)
        folders = [spec[0] for spec in LANGUAGES.values()]
        archive = subprocess.run(
            ["git", "--git-dir", str(source), "archive", TLDR_COMMIT, *folders],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
        return target
    with tarfile.open(SHARED / "tldr.tar.gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("tldr/pages.")]
        tar.extractall(WORK / "multilingual", members=members, filter="data")
    return target


def available(source: Path | None = None) -> bool:
    """Whether tldr's pages can be had here (a test skips without them)."""
    if source is not None:
        return (source / "pages.fr").is_dir() or (source / "HEAD").exists()
    return (WORK / "multilingual" / "tldr" / "pages.fr").is_dir() or (
        SHARED / "tldr.tar.gz"
    ).exists()


def page_corpus(folder: Path) -> dict[str, tuple[str, str]]:
    """Every page of a language folder: relative path -> (title, whole text)."""
    out = {}
    for path in sorted(folder.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        first = text.split("\n", 1)[0]
        out[path.relative_to(folder).as_posix()] = (first.lstrip("# ").strip(), text)
    return out


def metrics(runs: dict[int, list[str]], relevant: dict[int, str]) -> dict[str, float]:
    """hit@1, hit@5, MRR@10 and nDCG@10 of one relevant page per question."""
    ranks = []
    for q, page in relevant.items():
        ranked = runs[q][:DEPTH]
        ranks.append(ranked.index(page) + 1 if page in ranked else None)

    def mean(values) -> float:
        return float(np.mean(list(values))) if ranks else 0.0

    return {
        "hit@1": mean(r == 1 for r in ranks),
        "hit@5": mean(r is not None and r <= 5 for r in ranks),
        "mrr@10": mean(1.0 / r if r is not None and r <= 10 else 0.0 for r in ranks),
        "ndcg@10": mean(1.0 / np.log2(r + 1) if r is not None and r <= 10 else 0.0 for r in ranks),
    }


def arms(corpus: dict, asked: dict[int, str], language: str) -> dict[str, dict[int, list[str]]]:
    """bench/quality.py's `bm25s` and `fusion` arms with the language's stemmer."""
    from bench.quality import baselines

    _, stemmer, stop = LANGUAGES[language]
    runs = baselines(corpus, asked, list(asked), False, stemmer=stemmer, stopwords=stop)
    return {arm: {q: ranked for q, ranked in found.items()} for arm, found in runs.items()}


def run_language(language: str, root: Path, asked: list[dict], env: dict) -> tuple[list, dict]:
    """One language's rows (the modes and the arms) and its ingest figures."""
    from kernel.config import load_config
    from pipeline.ingest import ingest_folder
    from query import open_index
    from query.request import SearchRequest, run_request

    config = load_config(root, environ=env)
    started = time.perf_counter()
    report = ingest_folder(config)
    ingest_s = time.perf_counter() - started
    index = open_index(config=config)
    relevant = {i: q["page"] for i, q in enumerate(asked)}
    text = {i: q["question"] for i, q in enumerate(asked)}
    rows = []
    for mode in MODES:
        runs = {}
        started = time.perf_counter()
        for i, query in text.items():
            request = SearchRequest(
                query=query, limit=DEPTH, files=True, mode=None if mode == "default" else mode
            )
            runs[i] = [hit.path for hit in run_request(index, request).files or []]
        per_query = (time.perf_counter() - started) / max(len(text), 1)
        rows.append({"language": language, "run": mode, **metrics(runs, relevant)})
        rows[-1]["ms"] = round(per_query * 1000, 1)
    corpus = page_corpus(root)
    for arm, runs in arms(corpus, text, language).items():
        rows.append({"language": language, "run": arm, **metrics(runs, relevant), "ms": None})
    snap = index.snapshot
    info = {
        "language": language,
        "pages": len(corpus),
        "questions": len(asked),
        "chunks": int(snap.vectors.shape[0]),
        "ingest_s": round(ingest_s, 1),
        "chunks_embedded": report.chunks_embedded,
        "model": snap.meta.get("model"),
        "analyzer": (snap.meta.get("lexical") or {}).get("analyzer"),
    }
    return rows, info


def prepare(pages: Path, language: str, root: Path) -> None:
    """The language's folder: its tldr pages copied once (the index lands beside them)."""
    if (root / ".copied").exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pages / LANGUAGES[language][0], root)
    (root / ".copied").write_text("")


def run_all(args) -> dict:
    pages = tldr_pages(args.tldr)
    env = {"MDVDB_EMBEDDING_MODEL": args.model} if args.model else {}
    label = args.label + (f".{args.model}" if args.model else "")
    asked = questions()
    rows, infos = [], []
    for language in args.languages.split(","):
        root = WORK / "multilingual" / label / language
        prepare(pages, language, root)
        mine = [q for q in asked if q["language"] == language]
        r, info = run_language(language, root, mine, env)
        rows += r
        infos.append({"code": label, **info})
        print(f"{language}: default ndcg@10 {r[0]['ndcg@10']:.3f}", file=sys.stderr)
    rows += _means(rows)
    for row in rows:
        row["code"] = label
    return {"rows": rows, "runs": infos}


def _means(rows: list[dict]) -> list[dict]:
    out = []
    for run in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == run]
        keys = ("hit@1", "hit@5", "mrr@10", "ndcg@10")
        means = {k: float(np.mean([r[k] for r in mine])) for k in keys}
        out.append({"language": "mean", "run": run, **means})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tldr", type=Path, default=None, help="tldr checkout or git dir")
    parser.add_argument("--languages", default=",".join(LANGUAGES))
    parser.add_argument("--model", help="MDVDB_EMBEDDING_MODEL of the indexes (own folders)")
    parser.add_argument("--reference", type=Path, help="another checkout, run in the same run")
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)  # --reference's child
    parser.add_argument("--label", default="this", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.code is not None:  # the reference's side: its packages, this script's bench code
        sys.path.insert(0, str(args.code))
        print(json.dumps(run_all(args)))
        return
    found = run_all(args)
    if args.reference is not None:
        child = [sys.executable, __file__, "--code", str(args.reference), "--label", "reference"]
        for flag in ("tldr", "languages", "model"):
            if getattr(args, flag):
                child += [f"--{flag}", str(getattr(args, flag))]
        out = subprocess.run(child, check=True, capture_output=True, text=True, env=os.environ)
        other = json.loads(out.stdout)
        found = {k: other[k] + found[k] for k in found}
    title = "Questions in other languages (files ranked by `mdvdb search --files`)"
    print_table(title, found["rows"], args.json)
    print_table("Runs", found["runs"], args.json)


if __name__ == "__main__":
    main()
