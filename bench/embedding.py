"""Remote embedding: throughput with 1, 4 and 16 batches in flight, and the cost of a re-ingest
after switching provider and back.

The server is `tests/fake_embeddings.py` in its own process (so it does not share the client's
GIL), answering every request after a fixed sleep (`--latency`, default 50 ms, about what
OpenAI takes for a small batch) and caching its encoded answers, so that after a warm-up
pass it costs the client next to nothing. Throughput is measured through the pipeline's own
`embed_missing` (HTTP, decoding, the per-batch SQLite commit), on paragraphs of the tldr
corpus, with a fresh cache each time.

    python bench/embedding.py [--texts 4096] [--latency 0.05] [--files 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, corpus, print_table  # noqa: E402


class Server:
    """The fake embeddings server in a child process."""

    def __init__(self, latency: float, dims: int):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests" / "fake_embeddings.py"),
                "--latency",
                str(latency),
                "--dims",
                str(dims),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/stats") as response:
            return json.loads(response.read())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def paragraphs(count: int) -> dict[bytes, str]:
    """Distinct paragraphs of the tldr pages, keyed like chunks (sha256 of the text)."""
    import hashlib

    texts: dict[bytes, str] = {}
    for path in sorted(corpus("tldr").rglob("*.md")):
        for part in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            part = part.strip()
            if len(part) > 20:
                texts.setdefault(hashlib.sha256(part.encode()).digest(), part)
            if len(texts) >= count:
                return texts
    return texts


def throughput(
    server: Server,
    texts: dict[bytes, str],
    provider_name: str,
    concurrency: int,
    batch_size: int,
    dims: int,
) -> float:
    from kernel.config import load_config
    from kernel.providers import get_provider
    from pipeline.embed import embed_missing
    from pipeline.state import State

    with tempfile.TemporaryDirectory(prefix="mdvdb-embed-bench-") as folder:
        env = {
            "MDVDB_EMBEDDING_PROVIDER": provider_name,
            "MDVDB_EMBEDDING_DIMENSIONS": str(dims),
            "MDVDB_EMBEDDING_CONCURRENCY": str(concurrency),
            "MDVDB_EMBEDDING_BATCH_SIZE": str(batch_size),
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": server.url,
            "OLLAMA_HOST": server.url,
            "MDVDB_EMBEDDING_ENDPOINT": server.url,
        }
        config = load_config(folder, environ=env)
        provider = get_provider(config)
        state = State(Path(folder) / "state")
        try:
            started = time.perf_counter()
            done = embed_missing(state, provider, texts, batch_size)
            elapsed = time.perf_counter() - started
        finally:
            state.close()
            provider.close()
    assert done == len(texts), (done, len(texts))
    return len(texts) / elapsed


def project(files: int) -> Path:
    """A project of the first `files` tldr pages (by path), rebuilt for each bench run."""
    import shutil

    source = corpus("tldr")
    root = Path(tempfile.mkdtemp(prefix="mdvdb-switch-bench-"))
    for path in sorted(source.rglob("*.md"))[:files]:
        target = root / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return root


def ingest(root: Path, env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(root)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"ingest failed: {result.stderr.strip()}")
    return time.perf_counter() - started, json.loads(result.stdout)


def switching(openai_server: Server, ollama_server: Server, files: int, dims: int) -> list[dict]:
    import shutil

    root = project(files)
    common = {"MDVDB_EMBEDDING_DIMENSIONS": str(dims), "MDVDB_EMBEDDING_CONCURRENCY": "4"}
    envs = {
        "openai": {
            **common,
            "MDVDB_EMBEDDING_PROVIDER": "openai",
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_BASE_URL": openai_server.url,
        },
        "ollama": {
            **common,
            "MDVDB_EMBEDDING_PROVIDER": "ollama",
            "OLLAMA_HOST": ollama_server.url,
        },
    }
    servers = {"openai": openai_server, "ollama": ollama_server}
    rows = []
    try:
        for step, name in enumerate(("openai", "ollama", "openai", "ollama"), 1):
            before = servers[name].stats()["requests"]
            seconds, report = ingest(root, envs[name])
            rows.append(
                {
                    "step": f"{step}. ingest with {name}",
                    "chunks": report["chunks"],
                    "embedded": report["chunks_embedded"],
                    "requests": servers[name].stats()["requests"] - before,
                    "seconds": round(seconds, 2),
                }
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--dims", type=int, default=768)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    texts = paragraphs(args.texts)
    server = Server(args.latency, args.dims)
    other = Server(args.latency, args.dims)
    try:
        rows = []
        base = None
        for provider_name in ("openai", "custom"):
            # Warm the server's answer cache so that it costs the client nothing.
            throughput(server, texts, provider_name, 16, args.batch_size, args.dims)
            for concurrency in (1, 4, 16):
                samples = [
                    throughput(
                        server, texts, provider_name, concurrency, args.batch_size, args.dims
                    )
                    for _ in range(args.repeat)
                ]
                rate = statistics.median(samples)
                base = rate if concurrency == 1 else base
                rows.append(
                    {
                        "provider (wire format)": provider_name
                        + (" (base64)" if provider_name == "openai" else " (JSON floats)"),
                        "in flight": concurrency,
                        "chunks/s (median)": round(rate),
                        "vs 1 in flight": round(rate / base, 2),
                        "latency bound": round(concurrency * args.batch_size / args.latency),
                    }
                )
        title = (
            f"Embedding throughput: {len(texts)} tldr paragraphs, batches of {args.batch_size}, "
            f"{args.dims} dims, fake server {args.latency * 1000:.0f} ms a request, "
            f"median of {args.repeat}"
        )
        print_table(title, rows, args.json)
        switch_rows = switching(server, other, args.files, args.dims)
        print_table(
            f"Re-ingest after switching provider and back ({args.files} tldr pages)",
            switch_rows,
            args.json,
        )
    finally:
        server.close()
        other.close()


if __name__ == "__main__":
    main()
