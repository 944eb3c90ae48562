"""Generate a synthetic Markdown corpus: N files with frontmatter, headings and prose.

Deterministic for a seed. Words come from a fixed vocabulary so lexical and semantic search
have something to find; every file has 2-4 sections, so chunks ~= 3 x files.

    python bench/generate.py DEST --files 10000
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

TOPICS = {
    "archive": "tar gzip zip compress extract archive bundle unpack file folder",
    "network": "socket port dns address route packet firewall latency bandwidth host",
    "git": "commit branch merge rebase remote push pull tag history diff",
    "cooking": "flour water yeast oven bake dough salt knead starter loaf",
    "python": "function class module import package virtualenv pip test decorator list",
    "database": "table index query join transaction schema row column replica backup",
    "garden": "soil seed water compost prune bloom harvest mulch sunlight root",
    "finance": "budget invoice tax ledger expense revenue audit payment account balance",
}
FILLER = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "with",
    "on",
    "as",
    "by",
    "this",
    "that",
    "it",
    "from",
    "at",
    "be",
    "are",
    "or",
    "can",
]
STATUSES = ["draft", "review", "published"]


def make_file(rng: random.Random, i: int) -> tuple[str, str]:
    topic = rng.choice(list(TOPICS))
    words = TOPICS[topic].split()
    sections = rng.randint(2, 4)
    lines = [
        "---",
        f"title: {topic.title()} note {i}",
        f"tags: [{topic}, {rng.choice(words)}]",
        f"category: {topic}",
        f"status: {rng.choice(STATUSES)}",
        f"rating: {rng.randint(800, 3000)}",
        f"updated: 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "---",
        f"# {topic.title()} note {i}",
        "",
    ]
    for s in range(sections):
        lines.append(f"## {rng.choice(words).title()} {s}")
        lines.append("")
        for _ in range(rng.randint(2, 5)):
            sentence = [rng.choice(words if rng.random() < 0.4 else FILLER) for _ in range(14)]
            lines.append(" ".join(sentence).capitalize() + ".")
        lines.append("")
    folder = f"{topic}/{i % 100:02d}"
    return f"{folder}/note-{i}.md", "\n".join(lines)


def generate(dest: Path, files: int, seed: int = 7) -> Path:
    rng = random.Random(seed)
    marker = dest / f".generated-{files}-{seed}"
    if marker.exists():
        return dest
    for i in range(files):
        rel, text = make_file(rng, i)
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    marker.write_text("")
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    generate(args.dest, args.files, args.seed)
    print(f"{args.files} files in {args.dest}")


if __name__ == "__main__":
    main()
