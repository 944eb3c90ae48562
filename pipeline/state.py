"""The write side's caches: one SQLite database in the state folder, in WAL mode, each batch
one transaction. What the published index holds leaves it after each pack (`State.hand_over`;
docs/architecture.md, "The pipeline: doit tasks, one per stage", the cache bullets). Every SQL
statement on it is a method of `State`; its shape is built by `MIGRATIONS`, each step once."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # NumPy only where vectors are read: a no-op ingest never imports it
    import numpy as np


class StateDamaged(RuntimeError):
    """The cache database fails a check; `pipeline.ingest` sets it aside and runs again from
    the files (docs/security.md, "Round two")."""


# SQLite's result codes for a damaged file (not its "locked", "full" or "read-only" ones)
DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


# What Python's sqlite3 raises for a text cell that is not UTF-8: every text this cache holds
# was written as UTF-8, so such a cell is damage inside a page SQLite's own checks pass.
NOT_UTF8 = "Could not decode to UTF-8"


def stored_wrong(exc: BaseException) -> bool:
    """A stored value that is not what was written (no SQLite check can confirm it)."""
    return isinstance(exc, StateDamaged) or (
        isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(NOT_UTF8)
    )


def is_damage(exc: BaseException) -> bool:
    return stored_wrong(exc) or (
        isinstance(exc, sqlite3.DatabaseError)
        and getattr(exc, "sqlite_errorcode", None) in DAMAGE_CODES
    )


def _loads(data: Any) -> Any:
    """A stored JSON value; one that does not decode is damage, not a user error."""
    try:
        return json.loads(data)
    except (ValueError, TypeError):
        raise StateDamaged("a stored value is not JSON") from None


def _script(db: sqlite3.Connection, sql: str) -> None:
    """Statements one by one: `executescript` would commit the migration's transaction."""
    for statement in sql.split(";"):
        if statement.strip():
            db.execute(statement)


def _m001_caches(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE IF NOT EXISTS manifest (
            path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, sha256 TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS parsed (sha256 TEXT PRIMARY KEY, data TEXT NOT NULL)
            WITHOUT ROWID;
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
        """,
    )


def _m002_drop_manifest_sha_index(db: sqlite3.Connection) -> None:
    """That index cost much of the state folder for one query (`State.prune` scans instead)."""
    db.execute("DROP INDEX IF EXISTS manifest_sha")


def _m003_clusters(db: sqlite3.Connection) -> None:
    """The cluster stage's result; its document-vector cache went (the index holds them)."""
    _script(
        db,
        """
        DROP TABLE IF EXISTS cluster_vectors;
        CREATE TABLE IF NOT EXISTS cluster_docs (
            path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, cluster_id INTEGER NOT NULL,
            similarity REAL NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS cluster_topics (
            cluster_id INTEGER PRIMARY KEY, label TEXT NOT NULL, keywords TEXT NOT NULL,
            centroid BLOB NOT NULL
        );
        """,
    )


# The database's shape, as steps run once each, in order, recorded by name in `_migrations`.
# A new shape is a new function at the end, never an edit of one that shipped.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _m001_caches,
    _m002_drop_manifest_sha_index,
    _m003_clusters,
)


def migrate(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    done = {r[0] for r in db.execute("SELECT name FROM _migrations")}
    for step in MIGRATIONS:
        name = step.__name__.lstrip("_")
        if name in done:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while this one waited for the lock.
            if db.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone():
                db.execute("COMMIT")
                continue
            step(db)
            db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


class ManifestEntry(NamedTuple):
    """A NamedTuple, not a dataclass: one is built per file on every run."""

    path: str
    size: int
    mtime_ns: int
    sha256: str


# A big first build keeps its records, vectors and `embedded` marks in memory up to this many
# bytes (`State.hold`); past it, everything held is written and the rest writes through.
HOLD_BYTES = 256 * 2**20

# Files whose chunk records a stage decodes at once (docs/benchmarks.md, "Ingest memory
# (issue 37)"); a multiple of 500, the reads' part (`State._rows_in`).
RECORDS_BATCH = 2000


class _Held:
    """What `State.hold` keeps in memory instead of the chunks, embeddings and embedded rows."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], str] = {}  # (chunk key, file sha) -> record JSON
        self.vectors: dict[tuple[str, bytes], Any] = {}  # (model, chunk sha) -> float32 row
        self.embedded: set[tuple[str, str]] = set()  # (build key, file sha)
        self.bytes = 0


class State:
    """A thin, typed layer over the cache database; one per ingest run."""

    def __init__(self, folder: Path, index_path: Path | None = None, records: bool = True):
        """`index_path`: the published index, read as a cache (None: only this database).
        `records=False` (`ingest --full`): take only vectors from it."""
        from kernel import private

        private.make_dir(folder)
        private.touch(folder / "cache.sqlite3")  # 0600; SQLite gives -wal/-shm the same mode
        self.folder = folder
        self.published = Published(index_path, records) if index_path is not None else None
        self.db = sqlite3.connect(folder / "cache.sqlite3", timeout=60, isolation_level=None)
        try:
            # Only takes effect on a new database: freed pages go back to the disk.
            self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self.db.execute("PRAGMA journal_mode=WAL")
            # Debian's SQLite zeroes every freed page, writing a hand-over's frees through
            # the WAL again; FAST clears only within pages written anyway (the file is 0600).
            self.db.execute("PRAGMA secure_delete=FAST")
            self.db.execute("PRAGMA synchronous=NORMAL")
            migrate(self.db)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            if is_damage(exc):
                raise StateDamaged(str(exc)) from None
            raise
        self._held: _Held | None = None
        # A pooled first build's label words and document vectors from its workers, and a
        # full clustering's fit still in the helper process (`pipeline.cluster.topics`).
        self.label_words: Any = None
        self.doc_vectors: Any = None
        self.clusters_due: Any = None

    def close(self) -> None:
        # A run that stops before its hand-over (an error in a later stage) keeps its work.
        self.spill()
        self.db.close()

    # -- a first build's records held in memory ---------------------------------------------
    def hold(self) -> None:
        """Keep what `put_prepared` is given in memory (up to `HOLD_BYTES`) until the
        hand-over (docs/benchmarks.md, "Session 7: a first build's records held in memory").
        A SIGKILLed run loses what was held; an error or Ctrl-C writes it first (`close`)."""
        if self._held is None:
            self._held = _Held()

    def spill(self) -> None:
        """Write everything held to the database and stop holding."""
        held, self._held = self._held, None
        if held is None or not (held.records or held.vectors or held.embedded):
            return
        self._write(
            ((sha, key, data) for (key, sha), data in held.records.items()),
            ((model, sha, row.tobytes()) for (model, sha), row in held.vectors.items()),
            held.embedded,
        )

    def _write(
        self, records: Iterable[tuple], vectors: Iterable[tuple], marks: Iterable[tuple]
    ) -> None:
        """Chunk records, vectors and `embedded` marks as rows, in one transaction."""
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?)", records)
            self.db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)", vectors)
            self.db.executemany("INSERT OR IGNORE INTO embedded VALUES (?, ?)", marks)

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- manifest -------------------------------------------------------------------------
    def manifest(self) -> dict[str, ManifestEntry]:
        rows = self.db.execute("SELECT path, size, mtime_ns, sha256 FROM manifest")
        return {r[0]: ManifestEntry(*r) for r in rows}

    def manifest_in_folders(self, folders: Iterable[str]) -> dict[str, ManifestEntry]:
        """The entries of the files directly in these folders ("": the root)."""
        out: dict[str, ManifestEntry] = {}
        columns = "SELECT path, size, mtime_ns, sha256 FROM manifest WHERE"
        for folder in folders:
            if folder:
                rows = self.db.execute(
                    f"{columns} path > ? AND path < ? AND instr(substr(path, ?), '/') = 0",
                    (folder + "/", folder + "0", len(folder) + 2),  # "0" sorts right after "/"
                )
            else:
                rows = self.db.execute(f"{columns} instr(path, '/') = 0")
            out.update((r[0], ManifestEntry(*r)) for r in rows)
        return out

    def manifest_rows(self, paths: Iterable[str]) -> dict[str, ManifestEntry]:
        """The entries of these paths that the manifest holds."""
        sql = "SELECT path, size, mtime_ns, sha256 FROM manifest WHERE ? IS NULL AND path"
        return {r[0]: ManifestEntry(*r) for r in self._rows_in(sql, None, paths)}

    def has_path(self, rel: str) -> bool:
        """A file at `rel` or anything under the folder `rel` is in the manifest."""
        row = self.db.execute(
            "SELECT 1 FROM manifest WHERE path = ? OR (path > ? AND path < ?) LIMIT 1",
            (rel, rel + "/", rel + "0"),  # "0" sorts right after "/"
        ).fetchone()
        return row is not None

    def manifest_shas(self) -> dict[str, str]:
        """path -> sha256 of every current file, in path order."""
        return dict(self.db.execute("SELECT path, sha256 FROM manifest ORDER BY path"))

    def manifest_size(self) -> int:
        return self.db.execute("SELECT count(*) FROM manifest").fetchone()[0]

    def replace_manifest(
        self, upserts: Iterable[ManifestEntry], removed: Iterable[str], digest: str | None = None
    ) -> None:
        """`digest`: of the manifest this leaves, kept with it; None drops any stored one."""
        upserts, removed = list(upserts), list(removed)
        if not upserts and not removed and digest == self.get_value("manifest_digest"):
            return  # a no-op: no write transaction
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO manifest VALUES (?, ?, ?, ?)",
                ((e.path, e.size, e.mtime_ns, e.sha256) for e in upserts),
            )
            self.db.executemany("DELETE FROM manifest WHERE path = ?", ((p,) for p in removed))
            if digest is None:
                self.db.execute("DELETE FROM kv WHERE key = 'manifest_digest'")
            elif self.get_value("manifest_digest") != digest:
                self.set_value("manifest_digest", digest)

    # -- chunks ----------------------------------------------------------------------------
    def file_contents(self) -> list[tuple[str, str]]:
        """(path, sha256) of each distinct content in the manifest, by its first path."""
        return self.db.execute("SELECT MIN(path), sha256 FROM manifest GROUP BY sha256").fetchall()

    def forget_records(self) -> None:
        """`ingest --full`: every chunk record goes (vectors stay)."""
        if self._held is not None:
            self._held.records.clear()
        with self.transaction():
            self.db.execute("DELETE FROM chunks")

    def missing_chunks_of(self, key: str, shas: list[str]) -> list[str]:
        known = self.chunked(key, shas)
        return [s for s in shas if s not in known]

    def chunked(self, key: str, shas: Iterable[str]) -> set[str]:
        """Which of `shas` have a chunk record for `key`, here or in the published index."""
        shas = list(shas)
        sql = "SELECT sha256 FROM chunks WHERE key = ? AND sha256"
        known = {r[0] for r in self._rows_in(sql, key, shas)}
        if self._held is not None:
            known.update(s for s in shas if (key, s) in self._held.records)
        if self.published is not None and len(known) < len(shas):
            known |= self.published.files_with(key, [s for s in shas if s not in known])
        return known

    def missing_chunks(self, key: str) -> list[str]:
        rows = self.db.execute(
            "SELECT DISTINCT sha256 FROM manifest WHERE sha256 NOT IN "
            "(SELECT sha256 FROM chunks WHERE key = ?)",
            (key,),
        )
        shas = [r[0] for r in rows]
        if self._held is not None:
            shas = [s for s in shas if (key, s) not in self._held.records]
        if self.published is None or not shas:
            return shas
        held = self.published.files_with(key, shas)
        return [s for s in shas if s not in held]

    def put_chunks(self, key: str, items: Iterable[tuple[str, str]]) -> None:
        """Chunk records, each (file sha, the record as JSON)."""
        self._write(((sha, key, data) for sha, data in items), (), ())

    def put_prepared(
        self,
        key: str,
        records: list[tuple[str, str]],
        model: str,
        vector_shas: list[bytes],
        vectors: np.ndarray,
        embedded: list[str],
    ) -> None:
        """One batch of `pipeline.workers` in one transaction: chunk records as JSON, chunk
        vectors for `model`, and the `embedded` marks of the files whose chunks all got one."""
        import numpy as np

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        held = self._held
        if held is not None:
            size = sum(len(d) + 100 for _, d in records) + len(vector_shas) * 100
            if held.bytes + size + vectors.nbytes <= HOLD_BYTES:
                held.bytes += size + vectors.nbytes
                for sha, data in records:
                    held.records[(key, sha)] = data
                for i, sha in enumerate(vector_shas):
                    held.vectors[(model, sha)] = vectors[i]
                held.embedded.update((f"{model}|{key}", s) for s in embedded)
                return
            self.spill()
        self._write(
            ((sha, key, data) for sha, data in records),
            ((model, sha, vectors[i].tobytes()) for i, sha in enumerate(vector_shas)),
            ((f"{model}|{key}", s) for s in embedded),
        )

    def get_chunks(self, key: str, shas: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Chunk records by file sha, from this database or rebuilt from the published index."""
        shas = list(shas)
        found: dict[str, dict[str, Any]] = {}
        if self._held is not None:
            records = self._held.records
            for sha in shas:
                data = records.get((key, sha))
                if data is not None:
                    found[sha] = _loads(data)
            if len(found) == len(shas):
                return found
            shas = [s for s in shas if s not in found]
        rows = self._rows_in("SELECT sha256, data FROM chunks WHERE key = ? AND sha256", key, shas)
        found.update((sha, _loads(data)) for sha, data in rows)
        if self.published is not None and len(found) < len(shas):
            found.update(self.published.documents(key, [s for s in shas if s not in found]))
        return found

    # -- embeddings -----------------------------------------------------------------------
    def known_embeddings(self, model: str, shas: Iterable[bytes]) -> set[bytes]:
        shas = list(shas)
        known: set[bytes] = set()
        if self._held is not None:
            known.update(s for s in shas if (model, s) in self._held.vectors)
            shas = [s for s in shas if s not in known]
        rows = self._rows_in(
            "SELECT sha256 FROM embeddings WHERE model = ? AND sha256", model, shas
        )
        known.update(r[0] for r in rows)
        if self.published is not None and len(known) < len(shas):
            rest = [s for s in shas if s not in known]
            known.update(rest[i] for i in self.published.vector_rows(model, rest))
        return known

    def put_embeddings(self, model: str, shas: list[bytes], vectors: np.ndarray) -> None:
        import numpy as np

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._write((), ((model, sha, vectors[i].tobytes()) for i, sha in enumerate(shas)), ())

    def get_embeddings(
        self,
        model: str,
        shas: list[bytes],
        dimensions: int,
        missing_ok: bool = False,
        adopt: bool = False,
    ) -> np.ndarray:
        """Vectors in the order of `shas`; raises KeyError naming a missing one, or with
        `missing_ok` gives it a zero row. `adopt` (pack's plan): the held vectors become rows
        of the matrix returned, their one copy."""
        import numpy as np

        index = {sha: i for i, sha in enumerate(shas)}
        out = np.zeros((len(shas), dimensions), dtype=np.float32)
        seen = np.zeros(len(shas), dtype=bool)
        asked: Iterable[bytes] = index
        if self._held is not None:
            vectors = self._held.vectors
            for sha, i in index.items():
                row = vectors.get((model, sha))
                if row is not None:
                    out[i] = row
                    seen[i] = True
                    if adopt:  # the worker's batch goes once none of its rows is held
                        vectors[(model, sha)] = out[i]
            asked = [sha for sha, i in index.items() if not seen[i]]
        sql = "SELECT sha256, vector FROM embeddings WHERE model = ? AND sha256"
        for sha, blob in self._rows_in(sql, model, asked):
            i = index[sha]
            if not isinstance(blob, bytes) or (dimensions and len(blob) != 4 * dimensions):
                raise StateDamaged(f"a stored vector that is not {dimensions} float32 values")
            out[i] = np.frombuffer(blob, dtype=np.float32)
            seen[i] = True
        firsts = np.fromiter(index.values(), dtype=np.int64, count=len(index))
        if self.published is not None and not seen[firsts].all():
            rest = firsts[~seen[firsts]]
            found = self.published.vector_rows(model, [shas[int(i)] for i in rest])
            if found:
                at = rest[np.fromiter(found, dtype=np.int64, count=len(found))]
                out[at] = self.published.vectors(np.fromiter(found.values(), np.int64))
                seen[at] = True
        if not missing_ok and not seen[firsts].all():
            missing = shas[int(firsts[~seen[firsts]][0])].hex()
            raise KeyError(f"no embedding cached for chunk {missing}")
        if len(index) != len(shas):  # the same text in several places: copy its vector
            rows = np.fromiter((index[sha] for sha in shas), dtype=np.int64, count=len(shas))
            again = np.flatnonzero(rows != np.arange(len(shas)))
            out[again] = out[rows[again]]  # in place: no second matrix of every vector
        return out

    def files_to_embed(self, model: str, among: list[str] | None = None) -> list[str]:
        """Current file shas whose chunks are not all known to have vectors for `model`."""
        if among is not None:
            sql = "SELECT sha256 FROM embedded WHERE model = ? AND sha256"
            known = {r[0] for r in self._rows_in(sql, model, among)}
            todo = [s for s in among if s not in known]
        else:
            rows = self.db.execute(
                "SELECT DISTINCT sha256 FROM manifest WHERE sha256 NOT IN "
                "(SELECT sha256 FROM embedded WHERE model = ?)",
                (model,),
            )
            todo = [r[0] for r in rows]
        if self._held is not None and todo:
            todo = [s for s in todo if (model, s) not in self._held.embedded]
        if self.published is not None and todo:
            # The mark is the build key: every file of an index built with it is complete.
            held = self.published.files_built_with(model, todo)
            todo = [s for s in todo if s not in held]
        return todo

    def mark_embedded(self, model: str, shas: list[str]) -> None:
        self._write((), (), ((model, s) for s in shas))

    # -- small values ---------------------------------------------------------------------
    def get_value(self, key: str) -> Any:
        row = self.db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return _loads(row[0]) if row else None

    def set_value(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, json.dumps(value)))

    def delete_value(self, key: str) -> None:
        self.db.execute("DELETE FROM kv WHERE key = ?", (key,))

    # -- clusters -------------------------------------------------------------------------
    def clear_clusters(self, info_key: str) -> None:
        """Forget every assignment and topic and the summary stored under `info_key`."""
        with self.transaction():
            self.db.execute("DELETE FROM cluster_docs")
            self.db.execute("DELETE FROM cluster_topics")
            self.delete_value(info_key)

    def cluster_changes(self) -> tuple[list[tuple[str, str]], list[str]]:
        """(path, sha) of current files assigned to no cluster for their content, and the
        assigned paths that left the manifest, both in path order."""
        changed = self.db.execute(
            "SELECT m.path, m.sha256 FROM manifest m LEFT JOIN cluster_docs c ON c.path = m.path "
            "WHERE c.sha256 IS NULL OR c.sha256 != m.sha256 ORDER BY m.path"
        ).fetchall()
        removed = [
            r[0]
            for r in self.db.execute(
                "SELECT path FROM cluster_docs WHERE path NOT IN (SELECT path FROM manifest) "
                "ORDER BY path"
            )
        ]
        return changed, removed

    def replace_clusters(
        self,
        docs: Iterable[tuple[str, str, int, float]],
        topics: Iterable[tuple[int, str, str, bytes]],
    ) -> None:
        """A full clustering: every (path, sha, cluster id, similarity) and topic row."""
        with self.transaction():
            self.db.execute("DELETE FROM cluster_docs")
            self.db.execute("DELETE FROM cluster_topics")
            self.db.executemany("INSERT INTO cluster_docs VALUES (?, ?, ?, ?)", docs)
            self.db.executemany("INSERT INTO cluster_topics VALUES (?, ?, ?, ?)", topics)

    def update_cluster_docs(
        self, removed: Iterable[str], docs: Iterable[tuple[str, str, int, float]]
    ) -> None:
        with self.transaction():
            self.db.executemany("DELETE FROM cluster_docs WHERE path = ?", ((p,) for p in removed))
            self.db.executemany("INSERT OR REPLACE INTO cluster_docs VALUES (?, ?, ?, ?)", docs)

    def cluster_docs(self) -> list[tuple[str, int, float, str]]:
        """(path, cluster id, similarity, sha256) of every assigned document."""
        return self.db.execute(
            "SELECT path, cluster_id, similarity, sha256 FROM cluster_docs"
        ).fetchall()

    def cluster_docs_of(self, paths: Iterable[str]) -> dict[str, tuple[int, float, str]]:
        """path -> (cluster id, similarity, sha256) of these paths' assignments."""
        sql = "SELECT path, cluster_id, similarity, sha256 FROM cluster_docs WHERE ? IS NULL AND"
        sql += " path"
        return {r[0]: (r[1], r[2], r[3]) for r in self._rows_in(sql, None, paths)}

    def cluster_topics(self) -> list[tuple[int, str, str, bytes]]:
        """(cluster id, label, keywords JSON, centroid bytes), by id."""
        return self.db.execute(
            "SELECT cluster_id, label, keywords, centroid FROM cluster_topics ORDER BY cluster_id"
        ).fetchall()

    def prune(self, chunk_key: str, shas: Iterable[str] | None = None) -> None:
        """Drop chunk records no current file needs (vectors are kept). `shas`: only these
        candidates, instead of scanning the table against the manifest."""
        with self.transaction():
            if shas is None:
                self.db.execute(
                    "DELETE FROM chunks WHERE key != ? "
                    "OR sha256 NOT IN (SELECT sha256 FROM manifest)",
                    (chunk_key,),
                )
                return
            # One scan of the manifest per 500 candidates: it has no index on sha256 (`_m002`).
            shas = list(shas)
            sql = "SELECT DISTINCT sha256 FROM manifest WHERE ? IS NULL AND sha256"
            current = {r[0] for r in self._rows_in(sql, None, shas)}
            self._delete_in(
                "DELETE FROM chunks WHERE sha256", (), [s for s in shas if s not in current]
            )

    def hand_over(self, chunk_key: str, model: str, keep_vectors: bool) -> None:
        """After a publish: forget what the new index holds (records, `embedded` marks and,
        unless `keep_vectors`, vectors), then give the freed pages back (docs/benchmarks.md,
        "The hand-over after a first build (issue 18, scale)")."""
        if self.published is None:
            self.spill()
            return
        # A reader of everything the new index holds, even after `--full`.
        published = Published(self.published.path)
        build_key = f"{model}|{chunk_key}"
        self._forget_held(published, chunk_key, model, build_key, keep_vectors)
        plans: list[tuple[str, str, tuple, list[Any]]] = []
        for table, where, params in (
            ("chunks", "key = ?", (chunk_key,)),
            ("embedded", "model = ?", (build_key,)),
        ):
            sql = f"SELECT DISTINCT sha256 FROM {table} WHERE {where}"
            rows = [r[0] for r in self.db.execute(sql, params)]
            held = published.files_built_with(build_key, rows)
            plans.append((table, where, params, list(held)))
        if not keep_vectors:
            sql = "SELECT sha256 FROM embeddings WHERE model = ?"
            rows = [r[0] for r in self.db.execute(sql, (model,))]
            held = published.vectors_held(model, rows)
            plans.append(("embeddings", "model = ?", (model,), held))
        with self.transaction():
            for table, where, params, held in plans:
                if not held:
                    continue
                total = self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                if len(held) * 2 >= total:
                    self._rebuild_without(table, where, params, held)
                    continue
                self._delete_in(f"DELETE FROM {table} WHERE {where} AND sha256", params, held)
        self.reclaim()

    def _forget_held(
        self, published: Published, chunk_key: str, model: str, build_key: str, keep: bool
    ) -> None:
        """The held part of the hand-over: what the new index holds is dropped, the rest written."""
        held = self._held
        if held is None:
            return
        files = [sha for key, sha in held.records if key == chunk_key]
        files += [sha for key, sha in held.embedded if key == build_key]
        gone = published.files_built_with(build_key, files)
        records = held.records.items()
        held.records = {k: v for k, v in records if k[0] != chunk_key or k[1] not in gone}
        held.embedded = {k for k in held.embedded if k[0] != build_key or k[1] not in gone}
        if not keep:
            mine = [sha for m, sha in held.vectors if m == model]
            dropped = set(published.vectors_held(model, mine))
            held.vectors = {
                k: v for k, v in held.vectors.items() if k[0] != model or k[1] not in dropped
            }
        self.spill()

    def _rebuild_without(self, table: str, where: str, params: tuple, gone: list[Any]) -> None:
        """Replace `table` by a copy without the `where` rows whose sha256 is in `gone`: costs
        the rows that stay (`DROP TABLE` frees the old pages without rewriting them)."""
        import re

        (ddl,) = self.db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        fresh = f"{table}__kept"
        self.db.execute(f"DROP TABLE IF EXISTS {fresh}")
        self.db.execute(
            re.sub(r"^CREATE TABLE\s+(IF NOT EXISTS\s+)?\"?\w+\"?", f"CREATE TABLE {fresh}", ddl)
        )
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS _gone (sha256 PRIMARY KEY) WITHOUT ROWID")
        self.db.execute("DELETE FROM temp._gone")
        self.db.executemany("INSERT OR IGNORE INTO temp._gone VALUES (?)", ((k,) for k in gone))
        self.db.execute(
            f"INSERT INTO {fresh} SELECT * FROM {table} WHERE NOT ({where} AND sha256 IN "
            "(SELECT sha256 FROM temp._gone))",
            params,
        )
        self.db.execute("DELETE FROM temp._gone")
        self.db.execute(f"DROP TABLE {table}")
        self.db.execute(f"ALTER TABLE {fresh} RENAME TO {table}")

    def reclaim(self) -> None:
        """Give free pages back once they are a quarter of the file: one VACUUM when they are
        most of it (or auto_vacuum is off), else the incremental vacuum."""
        free = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        pages = self.db.execute("PRAGMA page_count").fetchone()[0]
        if free < 64 or free * 4 < pages:
            return
        if self.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0 or free * 2 >= pages:
            self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self.db.execute("VACUUM")
        else:
            # sqlite3_exec steps it to the end (execute() would free a single page).
            self.db.executescript("PRAGMA incremental_vacuum;")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # -- helpers --------------------------------------------------------------------------
    def transaction(self) -> _Transaction:
        return _Transaction(self.db)

    def _rows_in(self, sql: str, first: object, keys: Iterable[Any]) -> Iterator[tuple]:
        """Rows of `sql + " IN (...)"` for all `keys`, 500 at a time; `first` binds the one
        `?` before the list."""
        keys = list(keys)
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            yield from self.db.execute(f"{sql} IN ({marks})", (first, *part))

    def _delete_in(self, sql: str, params: tuple, keys: list[Any]) -> None:
        """`sql + " IN (...)"` for all `keys`, 500 at a time, after `params`."""
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            self.db.execute(f"{sql} IN ({','.join('?' * len(part))})", (*params, *part))


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def embed_text_of(heading_path: list[str], text: str) -> str:
    """A chunk's embedded and hashed text: its parent headings, then its text."""
    context = " > ".join(heading_path[:-1])
    return f"{context}\n{text}" if context else text


# Up to this many keys are looked for in a fixed-width sha column by comparing bytes with
# NumPy (an edit's few shas), without importing `pyarrow.compute`.
FEW_KEYS = 16


def few_fixed_width_rows(values: Any, keys: list[str]) -> dict[str, int] | None:
    """key -> first row holding it, for the keys `values` holds; None when NumPy cannot
    answer (many keys, mixed widths, a NUL, nulls or uneven strings): ask Arrow."""
    import numpy as np

    wanted = {k.encode("utf-8"): k for k in keys}
    widths = {len(k) for k in wanted}
    if len(wanted) > FEW_KEYS or len(widths) != 1 or values.null_count:
        return None
    width, n = widths.pop(), len(values)
    if not width or any(b"\0" in raw for raw in wanted):
        return None
    if not n:
        return {}
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset :][: n + 1]
    first = int(offsets[0])
    if int(offsets[-1]) - first != n * width or np.any(np.diff(offsets) != width):
        return None
    data = np.frombuffer(values.buffers()[2], dtype=f"S{width}", count=n, offset=first)
    found: dict[str, int] = {}
    for raw, key in wanted.items():
        rows = np.flatnonzero(data == raw)
        if len(rows):
            found[key] = int(rows[0])
    return found


class Published:
    """The published index read as a cache: chunk records (valid for the chunking in its
    build key) and vectors (valid for its model); an unreadable index is no cache."""

    def __init__(self, path: Path, records: bool = True):
        self.path = path
        self.records = records
        self._file: Any = None
        self._stamp: tuple[int, int] | None = None
        self._derived: dict[str, Any] = {}

    def _index(self):
        try:
            st = os.stat(self.path)
        except OSError:
            self._file, self._stamp, self._derived = None, None, {}
            return None
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp != self._stamp:
            from kernel import index_format

            self._derived = {}
            self._stamp = stamp
            try:
                self._file = index_format.read_index(self.path)
            except index_format.IndexFormatError:
                self._file = None
        return self._file

    def _trusted(self) -> bool:
        """Whether the index's checksums hold (checked once a run). Every answer that the
        index holds something waits for this; a "no" does not (it only costs work again)."""
        index = self._index()
        if index is None:
            return False
        trusted = self._derived.get("trusted")
        if trusted is None:
            from kernel import index_format

            trusted = self._derived["trusted"] = not index_format.checksum_problems(index)
        return trusted

    def _build_key(self) -> str:
        index = self._index()
        return str(index.meta.get("build_key") or "") if index is not None else ""

    def _column(self, table: str, name: str):
        from kernel.index_format import column_array

        return column_array(self._index().tables[table], name)

    def _rows_of(self, table: str, column: str, keys: list[str]) -> dict[str, int]:
        """key -> first row of `table` whose `column` equals it, for the keys present."""
        import numpy as np
        import pyarrow as pa

        if not keys:
            return {}
        values = self._column(table, column)
        found_few = few_fixed_width_rows(values, keys)
        if found_few is not None:
            return found_few
        import pyarrow.compute as pc

        hit = np.flatnonzero(
            pc.is_in(values, value_set=pa.array(keys, pa.string())).to_numpy(zero_copy_only=False)
        )
        found: dict[str, int] = {}
        for row, key in zip(hit.tolist(), values.take(pa.array(hit)).to_pylist(), strict=True):
            found.setdefault(key, row)
        return found

    def _keys_in(self, table: str, column: str, keys: list[str]) -> set[str]:
        """The keys that some row of `table` holds in `column` (membership only)."""
        import pyarrow as pa

        if not keys:
            return set()
        values = self._column(table, column)
        found_few = few_fixed_width_rows(values, keys)
        if found_few is not None:
            return set(found_few)
        import pyarrow.compute as pc

        asked = pa.array(keys, pa.string())
        # The hash table is built over the smaller side.
        if len(asked) * 4 < len(values):
            return set(pc.unique(values.filter(pc.is_in(values, value_set=asked))).to_pylist())
        return set(asked.filter(pc.is_in(asked, value_set=values)).to_pylist())

    def files_with(self, chunk_key: str, shas: list[str]) -> set[str]:
        """Which file shas the index holds chunk records of, for this chunking."""
        return self._files(self._build_key().endswith(f"|{chunk_key}"), shas)

    def files_built_with(self, build_key: str, shas: list[str]) -> set[str]:
        return self._files(self._build_key() == build_key, shas)

    def _files(self, usable: bool, shas: list[str]) -> set[str]:
        if not self.records or not usable:
            return set()
        held = self._keys_in("files", "sha256", shas)
        return held if held and self._trusted() else set()

    def vector_rows(self, model: str, shas: list[bytes]) -> dict[int, int]:
        """Position in `shas` -> chunk row holding its vector (finite ones only)."""
        import numpy as np

        if not self._build_key().startswith(f"{model}|") or not shas:
            return {}
        hexes = [s.hex() for s in shas]
        rows = self._rows_of("chunks", "sha256", hexes)
        found = {i: rows[h] for i, h in enumerate(hexes) if h in rows}
        if found and not self._trusted():
            return {}
        if found:
            at = np.fromiter(found.values(), dtype=np.int64, count=len(found))
            finite = np.isfinite(self.vectors(at)).all(axis=1)
            if not finite.all():
                found = {i: r for (i, r), ok in zip(found.items(), finite, strict=True) if ok}
        return found

    def vectors_held(self, model: str, shas: list[bytes]) -> list[bytes]:
        """Those of `shas` the index has a vector of (membership only, for the hand-over)."""
        if not self._build_key().startswith(f"{model}|") or not shas:
            return []
        held = self._keys_in("chunks", "sha256", [s.hex() for s in shas])
        if held and not self._trusted():
            return []
        return [s for s in shas if s.hex() in held]

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The vectors at `rows` (from `vector_rows`)."""
        import numpy as np

        matrix = self._derived.get("vectors")
        if matrix is None:
            from kernel.index_format import vector_matrix

            matrix = vector_matrix(self._index())
            self._derived["vectors"] = matrix
        return np.asarray(matrix[rows], dtype=np.float32)

    def documents(self, chunk_key: str, shas: list[str]) -> dict[str, dict[str, Any]]:
        """The chunk records (as `pipeline.tasks` caches them) of the files the index holds."""
        import numpy as np

        if not self.records or not self._build_key().endswith(f"|{chunk_key}"):
            return {}
        if not self._trusted():
            return {}
        import pyarrow as pa

        rows = self._rows_of("files", "sha256", shas)
        if not rows:
            return {}
        starts = self._derived.get("chunk_starts")
        if starts is None:
            file_ids = self._column("chunks", "file_id").to_numpy()
            n_files = self._index().tables["files"].num_rows
            starts = np.searchsorted(file_ids, np.arange(n_files + 1))
            self._derived["chunk_starts"] = starts
        file_rows = np.fromiter(rows.values(), dtype=np.int64, count=len(rows))
        take = pa.array(file_rows)
        titles = self._column("files", "title").take(take).to_pylist()
        metas = self._column("files", "frontmatter").take(take).to_pylist()
        errors = self._column("files", "parse_error").take(take).to_pylist()
        aliases = self._column("files", "aliases").take(take).to_pylist()
        tags = self._column("files", "tags").take(take).to_pylist()
        counts = starts[file_rows + 1] - starts[file_rows]
        chunk_rows = (
            np.concatenate([np.arange(starts[r], starts[r + 1]) for r in file_rows.tolist()])
            if len(file_rows)
            else np.zeros(0, np.int64)
        )
        ctake = pa.array(chunk_rows.astype(np.int64))
        cols = {
            name: self._column("chunks", name).take(ctake).to_pylist()
            for name in (
                "heading",
                "heading_path",
                "start_line",
                "end_line",
                "text",
                "token_count",
                "sha256",
            )
        }
        from pipeline.links import links_by_file

        links = links_by_file(self._index().tables.get("links"), file_rows.tolist())
        out: dict[str, dict[str, Any]] = {}
        at = 0
        for i, sha in enumerate(rows):
            chunks = []
            for j in range(at, at + int(counts[i])):
                path = cols["heading_path"][j] or []
                chunks.append(
                    {
                        "heading": cols["heading"][j],
                        "heading_path": path,
                        "start_line": cols["start_line"][j],
                        "end_line": cols["end_line"][j],
                        "text": cols["text"][j],
                        "embed_text": embed_text_of(path, cols["text"][j]),
                        "token_count": cols["token_count"][j],
                        "sha256": cols["sha256"][j],
                    }
                )
            at += int(counts[i])
            out[sha] = {
                "title": titles[i],
                "metadata": json.loads(metas[i] or "{}"),
                "error": errors[i],
                "aliases": aliases[i] or [],
                "tags": tags[i] or [],
                "chunks": chunks,
                "links": links[i],
            }
        return out
