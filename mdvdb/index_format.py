"""The index file: its layout, its Arrow schemas and its version. Owned here, and only here.

Layout (all integers little-endian):

    [MAGIC 8 bytes][version u32][reserved u32]            16-byte header
    [Arrow IPC stream] ... one per table, each starting on a 64-byte boundary
    [footer: UTF-8 JSON {"version", "tables": {name: [offset, length]}, "meta": {...}}]
    [footer length u64][MAGIC 8 bytes]                     16-byte trailer

Arrow IPC streams (no internal offsets, so a slice reads as-is) are written uncompressed,
so a reader maps the file once (`pyarrow.memory_map`) and
opens every table zero-copy from a slice; the `vector` column of `chunks` is one contiguous
float32 buffer that NumPy views as an (n, d) matrix without a copy.

A writer never touches the published file: it writes a temp file in the same folder, fsyncs it
and `os.replace`s it over the old one, so a reader holds either the old snapshot or the new one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT_VERSION = 1
MAGIC = b"MDVDBIX\x00"
HEADER = struct.Struct("<8sII")
TRAILER = struct.Struct("<Q8s")
ALIGN = 64
TEMP_SUFFIX = ".tmp"

# Frontmatter fields get typed columns in `files` named with this prefix (filters read them).
# Column types follow the field's schema type: number -> float64, boolean -> bool, date ->
# timestamp[us] (naive UTC), string -> string, list and mixed -> list<string> (a scalar in a
# mixed field is a one-item list), object -> JSON string. Values that do not fit are null.
# The two helpers below are the encoding both sides agree on (pack writes, filters compare).
FRONTMATTER_COLUMN_PREFIX = "fm:"
ISO_DATE = re.compile(
    r"^\d{4}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$"
)


def frontmatter_text(value: Any) -> str:
    """How a frontmatter value reads in string and list columns: YAML spelling for
    booleans, no `.0` on whole numbers, JSON for nested values."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def frontmatter_date(value: Any) -> dt.datetime | None:
    """An ISO date or datetime as a naive UTC datetime (dates at midnight); else None."""
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and ISO_DATE.match(value.strip()):
        try:
            moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment


def _build_files_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("file_id", pa.int32()),
            ("path", pa.string()),  # relative to the project root, POSIX style
            ("sha256", pa.string()),  # hex digest of the file's bytes
            ("size", pa.int64()),
            ("mtime", pa.float64()),
            ("title", pa.string()),
            ("frontmatter", pa.string()),  # JSON object
            ("parse_error", pa.string()),  # null when the file parsed cleanly
            ("cluster_id", pa.int32()),  # -1 when clustering is off or pending
        ]
    )


def chunks_schema(dimensions: int) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("chunk_id", pa.int32()),
            ("file_id", pa.int32()),
            ("heading", pa.string()),
            ("heading_path", pa.list_(pa.string())),
            ("start_line", pa.int32()),  # 1-based, inclusive, in the original file
            ("end_line", pa.int32()),
            ("text", pa.string()),
            ("token_count", pa.int32()),
            ("sha256", pa.string()),  # hex digest of the embedded text
            ("vector", pa.list_(pa.float32(), dimensions)),
        ]
    )


def _build_clusters_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("cluster_id", pa.int32()),
            ("label", pa.string()),
            ("keywords", pa.list_(pa.string())),
            ("size", pa.int32()),
            ("representative_paths", pa.list_(pa.string())),
            ("centroid", pa.list_(pa.float32())),
        ]
    )


# The merged frontmatter schema (inferred on every ingest + the optional overlay), one row a
# field. Types: string, number, boolean, date, list, object, mixed, or "none" for a field that
# only the overlay declares. `column` names the typed column of `files` filters read.
def _build_schema_table_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("field", pa.string()),
            ("type", pa.string()),  # the effective type: declared if the overlay gives one
            ("inferred_type", pa.string()),
            ("type_counts", pa.string()),  # JSON {type: files}; more than one key means mixed
            ("files", pa.int64()),  # files with a non-null value for the field
            ("distinct", pa.int64()),  # distinct values (list fields: distinct elements)
            (
                "values",
                pa.string(),
            ),  # JSON [[value, count], ...] for low-cardinality fields, else null
            ("description", pa.string()),
            ("allowed", pa.list_(pa.string())),
            ("required", pa.bool_()),
            ("declared", pa.bool_()),  # the overlay names the field
            ("column", pa.string()),  # typed column in `files`, null when there is none
        ]
    )


# Files that break the overlay (documentation, not enforcement: they are indexed anyway).
def _build_schema_problems_schema():
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("field", pa.string()), ("problem", pa.string())])


# Lexical postings, CSC-like and zero-copy: one row per distinct term, sorted by `term` (the
# analyzer's 64-bit hash, see `mdvdb.text_analysis`). The two list columns are Arrow list
# arrays, i.e. one offsets buffer (term -> start, end) over flat `chunk_ids` and `weights`
# buffers: a reader finds a term by `searchsorted` and adds its precomputed BM25F weights to a
# score vector. Row order inside a term is by chunk_id. The index meta key `lexical` records the
# analyzer version and the BM25F parameters the weights were computed with; a reader refuses
# postings of another analyzer version.
def _build_lexical_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("term", pa.uint64()),
            ("df", pa.int32()),  # chunks holding the term
            ("chunk_ids", pa.list_(pa.int32())),
            ("weights", pa.list_(pa.float32())),  # idf * saturated field-weighted tf
        ]
    )


# The forward view of the same postings, for pseudo-relevance feedback: row i is chunk i, with
# the rows of its terms in `lexical` and each term's share of the chunk's field-weighted length
# (p(term | chunk), the relevance-model estimate).
def _build_lexical_forward_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("term_rows", pa.list_(pa.int32())),
            ("shares", pa.list_(pa.float32())),
        ]
    )


# The clusters table's schema metadata key: JSON with k, silhouette, the candidates tried,
# documents assigned since the last full clustering ("pending") and unclustered documents.
CLUSTERS_META_KEY = "mdvdb.clusters"

# Table names a reader may find; unknown extra tables are ignored by older readers.
TABLES = (
    "files",
    "chunks",
    "lexical",
    "lexical_forward",
    "clusters",
    "schema",
    "schema_problems",
)


class IndexFormatError(RuntimeError):
    """The file is missing, foreign, torn or of another format version."""


@dataclass
class IndexFile:
    """A mapped index: tables open zero-copy over one memory map."""

    path: Path
    meta: dict[str, Any]
    tables: dict[str, pa.Table] = field(default_factory=dict)
    size: int = 0
    mtime_ns: int = 0
    inode: int = 0

    def table(self, name: str) -> pa.Table | None:
        return self.tables.get(name)


def column_array(table: pa.Table, name: str) -> pa.Array:
    """One column as one Array, still over the map. `combine_chunks()` copies even a single
    chunk (41 MB of vectors on tldr, ~60 ms a cold query); every table here is written as
    one record batch, so the copy is only for tables someone built in several pieces."""
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def read_index(path: Path | str) -> IndexFile:
    import pyarrow as pa

    path = Path(path)
    try:
        source = pa.memory_map(str(path), "r")
        stat = os.fstat(source.fileno())
    except FileNotFoundError:
        raise IndexFormatError(f"no index at {path}: run `mdvdb ingest` first") from None
    except OSError as exc:
        raise IndexFormatError(f"cannot open index {path}: {exc}") from None
    size = source.size()
    whole = source.read_buffer(size)  # zero-copy view of the whole map
    if size < HEADER.size + TRAILER.size:
        raise IndexFormatError(f"{path} is not a Markdown VDB index (too short)")
    magic, version, _ = HEADER.unpack(whole.slice(0, HEADER.size).to_pybytes())
    if magic != MAGIC:
        raise IndexFormatError(f"{path} is not a Markdown VDB index (unknown header)")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{path} has index format {version}; this mdvdb reads format {FORMAT_VERSION}: "
            "run `mdvdb ingest --full` to rebuild it"
        )
    footer_len, end_magic = TRAILER.unpack(
        whole.slice(size - TRAILER.size, TRAILER.size).to_pybytes()
    )
    if end_magic != MAGIC or footer_len > size - HEADER.size - TRAILER.size:
        raise IndexFormatError(f"{path} is torn or truncated: run `mdvdb ingest --full`")
    footer_at = size - TRAILER.size - footer_len
    try:
        footer = json.loads(whole.slice(footer_at, footer_len).to_pybytes())
    except ValueError:
        raise IndexFormatError(
            f"{path} has an unreadable footer: run `mdvdb ingest --full`"
        ) from None
    tables = {}
    for name, (offset, length) in footer["tables"].items():
        if offset + length > footer_at:
            raise IndexFormatError(f"{path}: table {name} lies outside the file")
        reader = pa.ipc.open_stream(whole.slice(offset, length))
        tables[name] = reader.read_all()
    return IndexFile(
        path=path,
        meta=footer.get("meta", {}),
        tables=tables,
        size=size,
        mtime_ns=stat.st_mtime_ns,
        inode=stat.st_ino,
    )


def read_meta(path: Path | str) -> dict[str, Any]:
    """Only the footer's metadata: cheap enough for `status` on a large index."""
    return read_index(path).meta


def write_index(path: Path | str, tables: dict[str, pa.Table], meta: dict[str, Any]) -> int:
    """Write all tables to a temp file beside `path`, fsync, and atomically replace `path`.

    Returns the size of the published file. On any error the temp file is removed and the
    previous index is left untouched.
    """
    import pyarrow as pa

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    # mkstemp makes the file 0600; readers running as other users need the usual mode.
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    try:
        offsets: dict[str, list[int]] = {}
        with pa.OSFile(tmp_name, "wb") as sink:
            sink.write(HEADER.pack(MAGIC, FORMAT_VERSION, 0))
            for name, table in tables.items():
                _pad(sink)
                start = sink.tell()
                with pa.ipc.new_stream(sink, table.schema) as writer:
                    writer.write_table(table.combine_chunks(), max_chunksize=max(1, table.num_rows))
                offsets[name] = [start, sink.tell() - start]
            full_meta = {
                "format_version": FORMAT_VERSION,
                "written_at": time.time(),
                **meta,
            }
            footer = json.dumps(
                {"version": FORMAT_VERSION, "tables": offsets, "meta": full_meta},
                separators=(",", ":"),
                default=str,
            ).encode()
            sink.write(footer)
            sink.write(TRAILER.pack(len(footer), MAGIC))
            size = sink.tell()
        _fsync_file(tmp_name)
        os.replace(tmp_name, path)
        _fsync_dir(path.parent)
        return size
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def temp_files(path: Path | str) -> list[Path]:
    """Temp files `write_index` leaves beside `path` when its process is killed mid-write.
    Only the writer-lock holder may delete them: another writer's temp file is live."""
    path = Path(path)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    prefix = f".{path.name}."
    return [path.parent / n for n in names if n.startswith(prefix) and n.endswith(TEMP_SUFFIX)]


def _umask() -> int:
    """The process umask; read from /proc where possible, because setting it to read it
    back is not thread-safe."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _pad(sink: pa.NativeFile) -> None:

    remainder = sink.tell() % ALIGN
    if remainder:
        sink.write(b"\x00" * (ALIGN - remainder))


def _fsync_file(name: str) -> None:
    fd = os.open(name, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_LAZY_SCHEMAS = {
    "FILES_SCHEMA": _build_files_schema,
    "CLUSTERS_SCHEMA": _build_clusters_schema,
    "SCHEMA_TABLE_SCHEMA": _build_schema_table_schema,
    "SCHEMA_PROBLEMS_SCHEMA": _build_schema_problems_schema,
    "LEXICAL_SCHEMA": _build_lexical_schema,
    "LEXICAL_FORWARD_SCHEMA": _build_lexical_forward_schema,
}


def __getattr__(name: str):
    """The Arrow schemas are built on first use, so that importing this module (to name a
    temp file, read a constant) does not import pyarrow: 140 ms of a no-op ingest."""
    if name in _LAZY_SCHEMAS:
        value = _LAZY_SCHEMAS[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
