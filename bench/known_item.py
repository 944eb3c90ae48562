"""Known-item search on tldr: can a page be found from its own one-line description?

    python bench/known_item.py [--root TLDR] [--pages 300] [--variant stub_length=40]

The five sets of bench/quality.py have almost no short page that answers a query (ArguAna's
shortest arguments are ~40 indexed words), so a ranking change that penalises short pages looks
free there. tldr is full of short real answers (a command page of three examples), so this
check guards against that: a fixed sample of English pages (`pages/common`, `pages/linux`;
alias pages left out), each page's `> description` line as the query, and the rank of that
page among files ranked by their best section (hybrid, `query.rank.search.mode_scores`, the
scoring `bench/quality.py --fast` uses). Reported: MRR@10 and hit@1 over all queries, and
MRR@10 over the pages shorter than 40 indexed words. Variants are the ones of
bench/quality.py (named, or `field=value,...`), each against the default in one process.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import corpus, print_table  # noqa: E402
from bench.quality import variant_settings  # noqa: E402

SHORT = 40  # indexed (field-weighted) words: a "short page"
DEPTH = 200  # sections looked at to rank files


def queries(root: Path, index, n_pages: int, seed: int) -> list[tuple[int, str]]:
    """(file id, description) for a fixed random sample of English command pages."""
    files = index.snapshot.table("files")
    ids = files.column("file_id").to_pylist()
    paths = files.column("path").to_pylist()
    wanted = ("pages/common/", "pages/linux/")
    pages = [(i, p) for i, p in zip(ids, paths, strict=True) if p.startswith(wanted)]
    out = []
    for file_id, path in random.Random(seed).sample(pages, min(n_pages, len(pages))):
        found = re.search(r"^> (.+)$", (root / path).read_text(encoding="utf-8"), re.M)
        if found and "alias" not in found[1].lower():
            out.append((file_id, found[1].strip().rstrip(".")))
    return out


def score(index, items: list[tuple[int, str]], lengths: np.ndarray) -> dict:
    from query.rank.search import mode_scores

    chunk_file = index.snapshot.chunk_file_ids
    rr, hit1, rr_short = [], [], []
    for file_id, text in items:
        scores, _ = mode_scores(index, text, "hybrid")
        top = np.argsort(-scores)[:DEPTH]
        rank: dict[int, int] = {}
        for chunk in top:
            rank.setdefault(int(chunk_file[chunk]), len(rank) + 1)
        r = rank.get(file_id)
        value = 1.0 / r if r and r <= 10 else 0.0
        rr.append(value)
        hit1.append(r == 1)
        if lengths[file_id] < SHORT:
            rr_short.append(value)
    return {
        "queries": len(items),
        "mrr@10": round(float(np.mean(rr)), 4),
        "hit@1": round(float(np.mean(hit1)), 4),
        "short_pages": len(rr_short),
        "mrr@10_short": round(float(np.mean(rr_short)), 4) if rr_short else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="an ingested tldr folder")
    parser.add_argument("--pages", type=int, default=300, help="pages sampled")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        variants = {v: variant_settings(v) for v in args.variant}
    except ValueError as err:
        parser.error(str(err))
    root = args.root or corpus("tldr")
    if not (root / ".markdownvdb.index").exists():
        parser.error(f"{root}: no index (run `mdvdb ingest --root {root}` first)")

    from kernel.config import load_config
    from query import open_index
    from query.score import fusion
    from query.score.lexical import lexical_index

    index = open_index(config=load_config(root, environ={}))
    lengths = lexical_index(index).page_lengths()
    items = queries(root, index, args.pages, args.seed)
    rows = [{"run": "default", **score(index, items, lengths)}]
    for name, settings in variants.items():
        with fusion.overridden(**settings):
            rows.append({"run": name, **score(index, items, lengths)})
    print_table("Known-item search on tldr (a page from its description)", rows, args.json)


if __name__ == "__main__":
    main()
