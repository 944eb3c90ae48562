"""Parse, chunk and embed new files, in this process or over a process pool; only the parent
writes the caches, in the order sent, so the index is the same whatever the number of workers
(docs/benchmarks.md, "Parallel ingest: `MDVDB_WORKERS` (issue 18 item 1)"). Ray:
pipeline/ray_executor.py."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kernel.config import Config
    from kernel.providers.local import LocalProvider
    from pipeline.pack.lexical import Store

POOL_MIN_FILES = 1000  # fewer files run in this process: workers would cost more than they save
BATCH_FILES = 128  # files per worker task
IN_FLIGHT_PER_WORKER = 3  # batches in flight per worker, to keep each busy while the parent writes


class WorkerDied(RuntimeError):
    """A worker process ended without an answer (killed, out of memory)."""


class ExecutorUnavailable(RuntimeError):
    """The executor cannot run here (a missing extra, an unreachable cluster): one line."""


def worker_count(config: Config) -> int:
    """MDVDB_WORKERS, or the CPUs this process may run on when it is 0."""
    if config.workers:
        return config.workers
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class EmbedSpec:
    """What a worker needs to build its own copy of the local model."""

    model: str
    dimensions: int
    cache_dir: str | None


@dataclass(frozen=True)
class Spec:
    root: str
    max_tokens: int
    overlap: int
    embed: EmbedSpec | None  # None: chunk only (the embed stage embeds)
    lexical: bool = True  # analyse each chunk's words for the lexical postings
    label_words: bool = False  # each file's cluster label words (`pipeline.cluster.topics`)
    follow_outside: bool = False  # MDVDB_FOLLOW_SYMLINKS_OUTSIDE_ROOT
    max_bytes: int = 10 << 20  # MDVDB_MAX_FILE_BYTES


@dataclass
class Batch:
    """What one batch of files gave: per file (path, sha, problem or None, failed), the chunk
    records of the files parsed, and the usable vectors of their chunks."""

    files: list[tuple[str, str, str | None, bool]] = field(default_factory=list)
    records: list[tuple[str, str]] = field(default_factory=list)  # (file sha, record JSON)
    chunks: int = 0
    vector_shas: list[bytes] = field(default_factory=list)
    vectors: np.ndarray | None = None
    embedded: list[str] = field(default_factory=list)  # file shas whose chunks all have one
    lexical: Store | None = None  # every chunk's lexical analysis, when asked
    label_words: list[tuple[str, str]] = field(default_factory=list)  # (file sha, words)
    # With the label words, each file's document vector (`cluster.DocVectors`): row -1, none.
    doc_shas: list[str] = field(default_factory=list)
    doc_rows: list[int] = field(default_factory=list)
    doc_matrix: np.ndarray | None = None

    def add_vectors(
        self, shas: list[bytes], vectors: np.ndarray, files: list[tuple[str, list[bytes]]]
    ) -> None:
        """The usable rows of `vectors` (one per chunk sha), and the files whose chunks all got
        one (the rest are left to the embed stage, which asks again and reports them)."""
        from pipeline.embed import usable_rows

        ok = usable_rows(vectors)
        self.vector_shas = [s for s, good in zip(shas, ok, strict=True) if good]
        self.vectors = vectors[ok]
        bad = {s for s, good in zip(shas, ok, strict=True) if not good}
        self.embedded = [sha for sha, mine in files if not bad.intersection(mine)]


def embed_spec(provider: object) -> EmbedSpec | None:
    """The local WordLlama model embeds in the workers; any other provider is left to the
    embed stage (its own concurrency, or too big to load once per worker)."""
    from kernel.providers.local import LocalProvider

    if type(provider) is not LocalProvider:
        return None
    cache = provider.cache_dir  # type: ignore[attr-defined]
    return EmbedSpec(
        provider.model,  # type: ignore[attr-defined]
        provider.dimensions,  # type: ignore[attr-defined]
        None if cache is None else str(cache),
    )


@lru_cache(maxsize=2)
def _provider(spec: EmbedSpec) -> LocalProvider:
    from pathlib import Path

    from kernel.providers.local import LocalProvider

    cache = None if spec.cache_dir is None else Path(spec.cache_dir)
    return LocalProvider(spec.model, spec.dimensions, cache, use_cache=cache is not None)


def prepare_batch(
    spec: Spec, items: list[tuple[str, str]], contents: list[bytes | str] | None = None
) -> Batch:
    """Read, check, parse, chunk (and embed) each (path, sha); a worker's task, also run in
    this process. `contents`: the files' bytes read by the caller (Ray)."""
    from pipeline.chunking import chunk_with_token_ids, token_ids
    from pipeline.cluster.topics import label_text, label_words
    from pipeline.links import extract_links
    from pipeline.pack.lexical import chunk_fields, chunk_keys, store_of, title_field
    from pipeline.parse import parse_document

    out = Batch()
    # The lexical analysis needs each file's title and per chunk its file, heading and sha.
    lex_titles: list[str] = []
    lex_file: list[int] = []
    lex_heads: list[str] = []
    lex_shas: list[str] = []
    lex: list[tuple[str, list[str], str]] = []
    texts: dict[bytes, int] = {}  # chunk sha -> row in `ids`
    ids: list[list[int] | str] = []  # token ids, or the text to tokenize
    file_chunks: list[tuple[str, list[bytes]]] = []
    for n, (path, sha) in enumerate(items):
        raw = read_file(spec, path) if contents is None else contents[n]
        if isinstance(raw, str):
            out.files.append((path, sha, raw, True))
            continue
        if hashlib.sha256(raw).hexdigest() != sha:
            # Changed between discover and parse: the next run picks the new version up.
            out.files.append((path, sha, "changed while indexing; indexed at next run", True))
            continue
        try:
            doc = parse_document(raw, path)
        except Exception as exc:  # noqa: BLE001 - a parser bug must not lose the run
            out.files.append((path, sha, f"cannot parse: {type(exc).__name__}: {exc}", True))
            continue
        out.files.append((path, sha, doc.error, False))
        chunks, counted = chunk_with_token_ids(doc, spec.max_tokens, spec.overlap)
        record = {
            "title": doc.title,
            "metadata": doc.metadata,
            "error": doc.error,
            "aliases": doc.aliases,
            "tags": doc.tags,
            "chunks": [c.to_json() for c in chunks],
            "links": extract_links(doc),
        }
        out.records.append((sha, json.dumps(record)))
        out.chunks += len(chunks)
        if spec.label_words and chunks:
            text = label_text(doc.title or "", [c.text for c in chunks])
            out.label_words.append((sha, " ".join(label_words(text))))
        if spec.lexical and chunks:
            title = title_field(doc.title or "", doc.aliases)
            lex_titles.append(title)
            for c in chunks:
                lex_file.append(len(lex_titles) - 1)
                lex_heads.append(c.heading)
                lex_shas.append(c.sha256)
                lex.append((title, chunk_fields(title, c.heading_path or []), c.text))
        if spec.embed is not None:
            mine = []
            for chunk, known in zip(chunks, counted, strict=True):
                key = bytes.fromhex(chunk.sha256)
                mine.append(key)
                if key not in texts:
                    texts[key] = len(ids)
                    ids.append(known if known is not None else chunk.embed_text)
            file_chunks.append((sha, mine))
    if spec.lexical:
        # Every chunk of the batch keyed and analysed at once.
        keys = chunk_keys(lex_titles, np.asarray(lex_file, dtype=np.int64), lex_heads, lex_shas)
        out.lexical = store_of(keys, lex)
    if spec.embed is not None and texts:
        strings = [i for i, v in enumerate(ids) if isinstance(v, str)]
        tokenized = token_ids([ids[i] for i in strings])  # type: ignore[misc]
        for i, tokens in zip(strings, tokenized, strict=True):
            ids[i] = tokens
        vectors = _provider(spec.embed).embed_token_ids(ids)  # type: ignore[arg-type]
        out.add_vectors(list(texts), vectors, file_chunks)
    if spec.label_words and spec.embed is not None:
        _document_vectors(out, vectors if texts else None, texts, file_chunks)
    return out


def _document_vectors(
    out: Batch, vectors: np.ndarray | None, row_of: dict[bytes, int], file_chunks: list
) -> None:
    """Each file's document vector for the full clustering after a pooled first build, so
    that it decodes no record for them."""
    from pipeline.cluster.topics import document_vectors
    from pipeline.embed import usable_rows

    picks: list[int] = []
    owners: list[int] = []
    files = 0
    for sha, mine in file_chunks:
        out.doc_shas.append(sha)
        if not mine:
            out.doc_rows.append(-1)
            continue
        out.doc_rows.append(files)
        picks.extend(row_of[key] for key in mine)
        owners.extend([files] * len(mine))
        files += 1
    if vectors is None:
        out.doc_matrix = np.zeros((0, 0), dtype=np.float32)
        return
    usable = np.where(usable_rows(vectors)[:, None], vectors, 0).astype(np.float32)
    out.doc_matrix = document_vectors(
        usable[np.asarray(picks, dtype=np.int64)], np.asarray(owners, dtype=np.int64), files
    )


def read_file(spec: Spec, path: str) -> bytes | str:
    """A file's bytes, or the problem that stopped reading it (`kernel.safe_open.read_source`:
    a regular file, a link only inside the root, at most MDVDB_MAX_FILE_BYTES)."""
    from kernel.safe_open import read_problem, read_source

    try:
        within = None if spec.follow_outside else spec.root
        return read_source(os.path.join(spec.root, path), within, spec.max_bytes)
    except OSError as exc:
        return read_problem(exc)


def processes_for(config: Config, files: int) -> int:
    """Worker processes a run of `files` files gets: 1 when too small or not `pool_is_safe`."""
    if files < POOL_MIN_FILES or not pool_is_safe():
        return 1
    return max(1, min(worker_count(config), -(-files // BATCH_FILES)))


def batches_of(todo: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    return [todo[i : i + BATCH_FILES] for i in range(0, len(todo), BATCH_FILES)]


def spec_of(
    config: Config, embed: EmbedSpec | None, label_words: bool = False, lexical: bool = True
) -> Spec:
    """The per-file work's settings; a sharded pack analyses each shard's chunks itself."""
    return Spec(
        str(config.root),
        config.chunk_max_tokens,
        config.chunk_overlap_tokens,
        embed,
        lexical=lexical and config.shards <= 1,
        label_words=label_words and config.shards <= 1,
        follow_outside=config.follow_outside_root,
        max_bytes=config.max_file_bytes,
    )


def in_order(
    batches: list[list[tuple[str, str]]],
    submit: Callable[[list[tuple[str, str]]], Any],
    result: Callable[[Any], Batch],
    in_flight: int,
    progress: Callable[[int], None] | None,
) -> Iterator[Batch]:
    """The results of `submit(items)` for each batch, in the order sent, at most `in_flight`
    ahead; the next is submitted before each result is handed back."""
    pending: deque[tuple[Any, int]] = deque()
    todo = iter(batches)
    for items in islice(todo, in_flight):
        pending.append((submit(items), len(items)))
    done = 0
    while pending:
        handle, size = pending.popleft()
        batch = result(handle)
        for items in islice(todo, 1):
            pending.append((submit(items), len(items)))
        yield batch
        done += size
        if progress:
            progress(done)


def prepare(
    config: Config,
    todo: list[tuple[str, str]],
    embed: EmbedSpec | None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Batch]:
    """The batches of `todo`, in order: in this process or from a pool."""
    batches = batches_of(todo)
    workers = processes_for(config, len(todo))
    spec = spec_of(config, embed, workers > 1 and config.clustering_enabled)
    if workers <= 1:
        from kernel.text_analysis import forget

        yield from in_order(batches, lambda items: items, partial(prepare_batch, spec), 1, progress)
        forget()
        return
    yield from _pooled(spec, batches, workers, progress)


def _pooled(
    spec: Spec,
    batches: list[list[tuple[str, str]]],
    workers: int,
    progress: Callable[[int], None] | None,
) -> Iterator[Batch]:
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(
        workers, mp_context=_context(), initializer=_start_worker, initargs=(os.getpid(),)
    )

    def result(future: Future[Batch]) -> Batch:
        try:
            return future.result()
        except BrokenProcessPool:
            raise WorkerDied(
                "an ingest worker process died (out of memory?); the previous index is "
                "intact; MDVDB_WORKERS=1 runs without worker processes"
            ) from None

    try:
        submit = partial(pool.submit, prepare_batch, spec)
        yield from in_order(batches, submit, result, workers * IN_FLIGHT_PER_WORKER, progress)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def pool_is_safe() -> bool:
    """Workers are forked: only on Linux, from a single-threaded process (a threaded one
    could fork while another thread holds a lock; spawning would re-import its main module)."""
    import threading

    return sys.platform.startswith("linux") and threading.active_count() == 1


def _context():
    import multiprocessing

    # The tokenizer's own threads would fight the workers, and warn in each forked child.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return multiprocessing.get_context("fork")


def _start_worker(parent: int) -> None:
    """A worker dies with the parent, even a SIGKILLed one (`kernel.lifeline`), and ignores
    Ctrl-C (the parent shuts the pool down)."""
    import signal

    from kernel.lifeline import die_with_parent

    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
