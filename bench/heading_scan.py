"""The fast heading scan against markdown-it on every Markdown file of the corpora: the
headings must be the same on every file (any difference is listed and the exit code is 1),
and the table says how many files the scan took and the CPU each way.

    python bench/heading_scan.py [--corpora DIR ...] [--json]

Default: every folder under /work/corpora (`MDVDB_CORPORA`), else the shared archives
unpacked by `bench.common.corpus`. Reads the files only; writes nothing next to them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ARCHIVES, corpus, print_table  # noqa: E402
from pipeline.parse import (  # noqa: E402
    _cut_long_lines,
    decode,
    headings_of,
    parsed_headings,
    plain_headings,
    split_frontmatter,
)


def _bodies(root: Path) -> list[tuple[Path, list[str], int]]:
    out = []
    for path in sorted(root.rglob("*.md")):
        if any(part.startswith(".markdownvdb") for part in path.parts):
            continue
        text, _ = decode(path.read_bytes())
        _, body_start, _ = split_frontmatter(text)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        _cut_long_lines(lines)
        out.append((path, lines, body_start))
    return out


def measure(name: str, root: Path) -> tuple[dict, list[str]]:
    docs = _bodies(root)
    bodies = ["\n".join(lines[start - 1 :]) for _, lines, start in docs]
    started = time.process_time()
    reference = [parsed_headings(b) for b in bodies]
    markdown_it_s = time.process_time() - started
    started = time.process_time()
    fast = [plain_headings(b) for b in bodies]
    scan_s = time.process_time() - started
    started = time.process_time()
    for _, lines, start in docs:
        headings_of(lines, start)
    both_s = time.process_time() - started
    wrong = [
        str(path)
        for (path, _, _), f, r in zip(docs, fast, reference, strict=True)
        if f is not None and f != r
    ]
    taken = sum(f is not None for f in fast)
    return {
        "corpus": name,
        "files": len(docs),
        "scan_taken": taken,
        "taken_pct": round(100 * taken / max(len(docs), 1), 1),
        "different": len(wrong),
        "markdown_it_cpu_s": round(markdown_it_s, 2),
        "scan_cpu_s": round(scan_s, 2),
        "headings_of_cpu_s": round(both_s, 2),
    }, wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="*", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    roots = args.corpora
    if roots is None:
        base = Path(os.environ.get("MDVDB_CORPORA", "/work/corpora"))
        roots = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
        if not roots:
            roots = [corpus(name) for name in ARCHIVES]
    rows, wrong = [], []
    for root in roots:
        row, bad = measure(root.name, root)
        rows.append(row)
        wrong += bad
    print_table("Heading scan vs markdown-it, every Markdown file", rows, args.json)
    for path in wrong:
        print("different headings:", path, file=sys.stderr)
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
