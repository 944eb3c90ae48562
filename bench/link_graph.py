"""How much link graph each evaluation set has, as mdvdb reads and resolves links: whether a
link-based ranking prior (in-degree, links among the top results) has anything to act on.

    python bench/link_graph.py [--extra powershell-docs]

For each of the five sets of bench/quality.py: pages, links found (pipeline/links.py),
links that resolve to another page of the set (pipeline/pack/links.py) and pages with an
in-degree above 0; the qrels' relevant pages among those. `--extra` adds corpora without
questions (a folder of Markdown), with the CPU time extraction costs against parsing.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import SHARED, corpus  # noqa: E402
from bench.quality import ARCHIVES, NESTED, SETS  # noqa: E402
from pipeline.links import extract_links  # noqa: E402
from pipeline.pack.links import Resolver  # noqa: E402
from pipeline.parse import parse_document  # noqa: E402


def _pages(name: str) -> tuple[dict[str, bytes], set[str]]:
    """{path: Markdown} of a set as bench/quality.py writes it, and its relevant paths."""
    pages: dict[str, bytes] = {}
    relevant: set[str] = set()
    with tarfile.open(SHARED / ARCHIVES[name]) as tar:
        for member in tar:
            if member.name.endswith("corpus.jsonl"):
                for line in tar.extractfile(member):
                    doc = json.loads(line)
                    path = doc["_id"] + ".md"
                    text = f"# {doc.get('title', '')}\n\n{doc.get('text', '')}\n"
                    pages[path if name in NESTED else path.replace("/", "_")] = text.encode()
            elif "qrels" in member.name and member.name.endswith(".tsv"):
                for row in tar.extractfile(member).read().decode().splitlines()[1:]:
                    parts = row.split("\t")
                    if len(parts) >= 3 and parts[2].strip() not in ("0", ""):
                        relevant.add(parts[1] + ".md")
    return pages, relevant


def graph(pages: dict[str, bytes]) -> dict[str, float]:
    paths = sorted(pages)
    start = time.process_time()
    docs = [parse_document(pages[p], p) for p in paths]
    parse_cpu = time.process_time() - start
    start = time.process_time()
    found = [extract_links(d) for d in docs]
    extract_cpu = time.process_time() - start
    resolver = Resolver(paths)
    indegree: collections.Counter[str] = collections.Counter()
    resolved = 0
    for path, links in zip(paths, found, strict=True):
        for _, kind, target, _, _ in links:
            wiki = kind in ("wikilink", "embed")
            hit = (resolver.wikilink if wiki else resolver.markdown)(target, path)
            if hit is not None and hit != path:
                resolved += 1
                indegree[hit] += 1
    return {
        "pages": len(paths),
        "links": sum(map(len, found)),
        "resolved": resolved,
        "linked_pages": len(indegree),
        "parse_cpu_s": round(parse_cpu, 2),
        "extract_cpu_s": round(extract_cpu, 2),
        "indegree": indegree,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", action="append", default=[], help="a shared corpus name")
    args = parser.parse_args()
    for name in SETS:
        pages, relevant = _pages(name)
        found = graph(pages)
        linked = sum(1 for path in relevant if found["indegree"].get(path))
        found.pop("indegree")
        print(json.dumps({"set": name, **found, "relevant_linked": linked}))
    for name in args.extra:
        folder = corpus(name)
        pages = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*.md")}
        found = graph(pages)
        found.pop("indegree")
        print(json.dumps({"set": name, **found}))


if __name__ == "__main__":
    main()
