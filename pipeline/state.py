"""The write side's caches: one SQLite database in the state folder.

SQLite in WAL mode gives what the caches need without code of ours: every batch is committed
as one transaction (an interrupted run keeps every batch that finished), a SIGKILL mid-write
leaves a torn WAL tail that SQLite discards by its own checksums on the next open, and readers
of the index never touch this file. Deleting the state folder only costs a full rebuild.

Tables:
- manifest:   path -> (size, mtime_ns, sha256) of every file the last discover saw
- parsed:     file sha256 -> parse result (JSON)
- chunks:     (file sha256, chunking key) -> chunk list (JSON)
- embeddings: (model key, chunk sha256) -> float32 vector bytes
- embedded:   (model key, file sha256) of files whose chunks all have vectors
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS manifest (
    path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, sha256 TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS manifest_sha ON manifest(sha256);
CREATE TABLE IF NOT EXISTS parsed (sha256 TEXT PRIMARY KEY, data TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    sha256 TEXT, key TEXT, data TEXT NOT NULL, PRIMARY KEY (sha256, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT, sha256 BLOB, vector BLOB NOT NULL, PRIMARY KEY (model, sha256)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS embedded (
    model TEXT, sha256 TEXT, PRIMARY KEY (model, sha256)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
"""


class ManifestEntry(NamedTuple):
    """A NamedTuple, not a dataclass: 38k of them are built on every run."""

    path: str
    size: int
    mtime_ns: int
    sha256: str


class State:
    """A thin, typed layer over the cache database; one per ingest run."""

    def __init__(self, folder: Path):
        from mdvdb import private

        private.make_dir(folder)
        private.touch(folder / "cache.sqlite3")  # 0600; SQLite gives -wal/-shm the same mode
        self.folder = folder
        self.db = sqlite3.connect(folder / "cache.sqlite3", timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- manifest -------------------------------------------------------------------------
    def manifest(self) -> dict[str, ManifestEntry]:
        rows = self.db.execute("SELECT path, size, mtime_ns, sha256 FROM manifest")
        return {r[0]: ManifestEntry(*r) for r in rows}

    def has_path(self, rel: str) -> bool:
        """A file at `rel` or anything under the folder `rel` is in the manifest."""
        row = self.db.execute(
            "SELECT 1 FROM manifest WHERE path = ? OR (path > ? AND path < ?) LIMIT 1",
            (rel, rel + "/", rel + "0"),  # "0" sorts right after "/"
        ).fetchone()
        return row is not None

    def replace_manifest(self, upserts: Iterable[ManifestEntry], removed: Iterable[str]) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO manifest VALUES (?, ?, ?, ?)",
                ((e.path, e.size, e.mtime_ns, e.sha256) for e in upserts),
            )
            self.db.executemany("DELETE FROM manifest WHERE path = ?", ((p,) for p in removed))

    # -- parsed and chunks ----------------------------------------------------------------
    def missing_parsed(self) -> list[tuple[str, str]]:
        """(path, sha256) of manifest files with no parse result yet (one path per sha)."""
        rows = self.db.execute(
            "SELECT MIN(path), sha256 FROM manifest WHERE sha256 NOT IN "
            "(SELECT sha256 FROM parsed) GROUP BY sha256"
        )
        return list(rows)

    def get_parsed_shas(self, shas: list[str]) -> list[str]:
        return [sha for sha, _ in self._select_in("parsed", "1", shas)]

    def missing_chunks_of(self, key: str, shas: list[str]) -> list[str]:
        known = set(self.get_chunks(key, shas))
        return [s for s in shas if s not in known]

    def put_parsed(self, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO parsed VALUES (?, ?)",
                ((sha, json.dumps(data, default=str)) for sha, data in items),
            )

    def get_parsed(self, shas: Iterable[str]) -> dict[str, dict[str, Any]]:
        return {sha: json.loads(data) for sha, data in self._select_in("parsed", "data", shas)}

    def missing_chunks(self, key: str) -> list[str]:
        rows = self.db.execute(
            "SELECT DISTINCT sha256 FROM manifest WHERE sha256 NOT IN "
            "(SELECT sha256 FROM chunks WHERE key = ?)",
            (key,),
        )
        return [r[0] for r in rows]

    def put_chunks(self, key: str, items: Iterable[tuple[str, list[dict[str, Any]]]]) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?)",
                ((sha, key, json.dumps(data)) for sha, data in items),
            )

    def get_chunks(self, key: str, shas: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        rows = self._rows_in("SELECT sha256, data FROM chunks WHERE key = ? AND sha256", key, shas)
        return {sha: json.loads(data) for sha, data in rows}

    # -- embeddings -----------------------------------------------------------------------
    def known_embeddings(self, model: str, shas: Iterable[bytes]) -> set[bytes]:
        rows = self._rows_in(
            "SELECT sha256 FROM embeddings WHERE model = ? AND sha256", model, shas
        )
        return {r[0] for r in rows}

    def put_embeddings(self, model: str, shas: list[bytes], vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                ((model, sha, vectors[i].tobytes()) for i, sha in enumerate(shas)),
            )

    def get_embeddings(self, model: str, shas: list[bytes], dimensions: int) -> np.ndarray:
        """Vectors in the order of `shas`; raises KeyError naming a missing one."""
        index = {sha: i for i, sha in enumerate(shas)}
        out = np.zeros((len(shas), dimensions), dtype=np.float32)
        seen = np.zeros(len(shas), dtype=bool)
        sql = "SELECT sha256, vector FROM embeddings WHERE model = ? AND sha256"
        for sha, blob in self._rows_in(sql, model, index):
            i = index[sha]
            out[i] = np.frombuffer(blob, dtype=np.float32)
            seen[i] = True
        firsts = np.fromiter(index.values(), dtype=np.int64, count=len(index))
        if not seen[firsts].all():
            missing = shas[int(firsts[~seen[firsts]][0])].hex()
            raise KeyError(f"no embedding cached for chunk {missing}")
        if len(index) != len(shas):  # the same text in several places: copy its vector
            rows = np.fromiter((index[sha] for sha in shas), dtype=np.int64, count=len(shas))
            out = out[rows]
        return out

    def files_to_embed(self, model: str, among: list[str] | None = None) -> list[str]:
        """Current file shas whose chunks are not all known to have vectors for `model`."""
        if among is not None:
            sql = "SELECT sha256 FROM embedded WHERE model = ? AND sha256"
            known = {r[0] for r in self._rows_in(sql, model, among)}
            return [s for s in among if s not in known]
        rows = self.db.execute(
            "SELECT DISTINCT sha256 FROM manifest WHERE sha256 NOT IN "
            "(SELECT sha256 FROM embedded WHERE model = ?)",
            (model,),
        )
        return [r[0] for r in rows]

    def mark_embedded(self, model: str, shas: list[str]) -> None:
        with self.transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO embedded VALUES (?, ?)", ((model, s) for s in shas)
            )

    # -- small values ---------------------------------------------------------------------
    def get_value(self, key: str) -> Any:
        row = self.db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_value(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, json.dumps(value)))

    def prune(self, chunk_key: str, shas: Iterable[str] | None = None) -> None:
        """Drop parse and chunk results no current file needs (embeddings are kept: a file
        reverted or a provider switched back costs nothing). `shas`: only these candidates
        (the old versions of what a run changed or removed), instead of scanning both
        tables against the manifest."""
        with self.transaction():
            if shas is None:
                self.db.execute(
                    "DELETE FROM parsed WHERE sha256 NOT IN (SELECT sha256 FROM manifest)"
                )
                self.db.execute(
                    "DELETE FROM chunks WHERE key != ? "
                    "OR sha256 NOT IN (SELECT sha256 FROM manifest)",
                    (chunk_key,),
                )
                return
            orphans = [s for s in shas if not self.db.execute(_IN_MANIFEST, (s,)).fetchone()]
            for start in range(0, len(orphans), 500):
                part = orphans[start : start + 500]
                marks = ",".join("?" * len(part))
                self.db.execute(f"DELETE FROM parsed WHERE sha256 IN ({marks})", part)
                self.db.execute(f"DELETE FROM chunks WHERE sha256 IN ({marks})", part)

    # -- helpers --------------------------------------------------------------------------
    def transaction(self) -> _Transaction:
        return _Transaction(self.db)

    def _select_in(self, table: str, column: str, shas: Iterable[str]) -> Iterator[tuple]:
        sql = f"SELECT sha256, {column} FROM {table} WHERE ? IS NULL AND sha256"
        return self._rows_in(sql, None, shas)

    def _rows_in(self, sql: str, first: object, keys: Iterable[Any]) -> Iterator[tuple]:
        """Rows of `sql + " IN (...)"` for all `keys`, 500 at a time (SQLite's limit on
        parameters); `first` binds the one `?` that precedes the list."""
        keys = list(keys)
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            yield from self.db.execute(f"{sql} IN ({marks})", (first, *part))


_IN_MANIFEST = "SELECT 1 FROM manifest WHERE sha256 = ? LIMIT 1"


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
