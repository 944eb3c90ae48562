"""The index file: its layout, its Arrow schemas and its version, owned here only.

Layout, checks and writing: docs/architecture.md, "The index file". A footer's table layout
is {"schema", "rows", "h", "columns": [{"n", "z", "b", "h", "c"}]}.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import struct
import sys
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT_VERSION = 5
MAGIC = b"MDVDBIX\x00"
HEADER = struct.Struct("<8sII")
TRAILER = struct.Struct("<QQ8s")  # footer length, footer xxh3-64, magic
DAMAGED = "index damaged: run `mdvdb ingest --full`"
ALIGN = 64
TEMP_SUFFIX = ".tmp"

# Frontmatter fields get typed columns in `files` named with this prefix (docs/architecture.md,
# "The index file"); the two helpers below are the encoding pack and the filters share.
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


# The tables' schemas (docs/architecture.md, "The index file"), built on first use
# (`__getattr__`) so that importing this module does not import pyarrow. `lexical`: one row
# per distinct term hash, sorted, its chunk ids ascending. `links`: resolved in a one-file
# index only (docs/links.md).
def _build_schema(name: str) -> pa.Schema:
    import pyarrow as pa

    text, texts, i32 = pa.string(), pa.list_(pa.string()), pa.int32()
    fields = {
        "FILES_SCHEMA": [
            ("file_id", i32),
            ("path", text),  # relative to the project root, POSIX style
            ("sha256", text),  # hex digest of the file's bytes
            ("size", pa.int64()),
            ("mtime", pa.float64()),
            ("title", text),
            ("frontmatter", text),  # JSON object
            ("parse_error", text),  # null when the file parsed cleanly
            ("cluster_id", i32),  # -1 when clustering is off or pending
            ("aliases", texts),  # format 5 (`kernel.conventions`): frontmatter aliases
            ("tags", texts),  # and the body's inline #tags without `#`
        ],
        "CLUSTERS_SCHEMA": [
            ("cluster_id", i32),
            ("label", text),
            ("keywords", texts),
            ("size", i32),
            ("representative_paths", texts),
            ("centroid", pa.list_(pa.float32())),
        ],
        "SCHEMA_TABLE_SCHEMA": [
            ("field", text),
            ("type", text),  # the effective type: declared if the overlay gives one
            ("inferred_type", text),  # string, number, boolean, date, list, object, mixed, none
            ("type_counts", text),  # JSON {type: files}; more than one key means mixed
            ("files", pa.int64()),  # files with a non-null value for the field
            ("distinct", pa.int64()),  # distinct values (list fields: distinct elements)
            ("values", text),  # JSON [[value, count], ...] for low-cardinality fields
            ("description", text),
            ("allowed", texts),
            ("required", pa.bool_()),
            ("declared", pa.bool_()),  # the overlay names the field
            ("column", text),  # typed column in `files`, null when there is none
        ],
        # Files that break the overlay (documentation, not enforcement).
        "SCHEMA_PROBLEMS_SCHEMA": [("path", text), ("field", text), ("problem", text)],
        "LEXICAL_SCHEMA": [("term", pa.uint64()), ("df", i32), ("chunk_ids", pa.list_(i32))],
        "LEXICAL_FORWARD_SCHEMA": [("postings", pa.list_(i32))],
        "LINKS_SCHEMA": [
            ("file_id", i32),
            ("line", i32),  # 1-based, in the original file
            ("kind", text),  # wikilink, embed, markdown or image
            ("target", text),
            ("anchor", text),
            ("label", text),
            ("resolved", text),  # null when it names no indexed file
            ("broken", pa.bool_()),  # resolves to nothing and names a note (not an image)
        ],
    }[name]
    return pa.schema(fields)


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


LINKS_TABLE = "links"
LINKS_META_KEY = "links"
# Document ids (kernel/doc_ids.py): the meta key of {path: lengthened id} for colliding ids.
DOC_IDS_META_KEY = "doc_ids"

# The clusters table's schema metadata key (JSON: k, silhouette, candidates, pending...).
CLUSTERS_META_KEY = "mdvdb.clusters"


class IndexFormatError(RuntimeError):
    """The file is missing, foreign, torn or of another format version."""


class IndexTooNew(IndexFormatError):
    """Written by a newer mdvdb: neither damaged nor to be replaced by an older writer."""

    def __init__(self, path: Path | str, version: int):
        self.version = version
        super().__init__(
            f"{path} was written by a newer mdvdb (index format {version}; this one reads "
            f"format {FORMAT_VERSION}): upgrade mdvdb (pip install -U markdown-vdb)"
        )


def written_by_newer(path: Path | str) -> int | None:
    """The format version of the index at `path` when a newer mdvdb wrote it, else None.
    Reads its header only, never through a link, a FIFO or a device."""
    from kernel.safe_open import open_regular

    try:
        fd = open_regular(path)
    except OSError:  # absent, or refused
        return None
    try:
        head = os.pread(fd, HEADER.size, 0)
    finally:
        os.close(fd)
    if len(head) < HEADER.size:
        return None
    magic, version, _ = HEADER.unpack(head)
    return version if magic == MAGIC and version > FORMAT_VERSION else None


class IndexDamaged(IndexFormatError):
    """The file is ours but its bytes are not the ones written."""

    def __init__(self, path: Path | str, detail: str = ""):
        self.detail = detail
        super().__init__(f"{DAMAGED} ({path}{': ' + detail if detail else ''})")


def _xxh3(parts: Any) -> int:
    import xxhash

    h = xxhash.xxh3_64()
    for part in parts:
        h.update(memoryview(part).cast("B") if not isinstance(part, bytes) else part)
    return h.intdigest()


@dataclass(eq=False, repr=False)
class IndexFile:
    """A mapped index: tables open zero-copy over one memory map."""

    path: Path
    meta: dict[str, Any]
    tables: dict[str, pa.Table] = field(default_factory=dict)
    size: int = 0
    mtime_ns: int = 0
    inode: int = 0
    device: int = 0
    # The map and its address: `write_index` copies buffers that lie in it file-to-file.
    source: Any = field(default=None, repr=False)
    base_address: int = 0
    # The footer's table layouts and the file's buffer region, for `verify_checksums`.
    layouts: dict[str, Any] = field(default_factory=dict, repr=False)
    body: Any = field(default=None, repr=False)
    # The whole map, and its first and last bytes as they were read (`changed_in_place`).
    whole: Any = field(default=None, repr=False)
    ends: bytes = field(default=b"", repr=False)

    def table(self, name: str) -> pa.Table | None:
        return self.tables.get(name)


def column_array(table: pa.Table, name: str) -> pa.Array:
    """One column as one Array, still over the map (`combine_chunks()` would copy even a
    single chunk)."""
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def arrow_array(table: pa.Table, name: str) -> pa.Array:
    """`column_array`, always a pyarrow Array (a lite-read table's column built with pyarrow
    over the same map): for `pyarrow.compute`, which takes nothing else."""
    real = getattr(table, "arrow", None)
    return column_array(real() if real is not None else table, name)


def list_parts(table: pa.Table, name: str) -> tuple[Any, Any]:
    """(offsets, values) of a list column of a fixed-width type as NumPy arrays over the map,
    rebased so that row i is values[offsets[i]:offsets[i + 1]]."""
    import numpy as np

    kind = table.schema.field(name).type.value_type.to_pandas_dtype()
    if table.num_rows == 0:
        return np.zeros(1, np.int32), np.zeros(0, kind)
    array = column_array(table, name)
    offsets = array.offsets.to_numpy(zero_copy_only=True)
    values = array.values.to_numpy(zero_copy_only=True)
    if offsets[0]:
        return offsets - offsets[0], values[offsets[0] : offsets[-1]]
    return offsets, values


def vector_matrix(file: IndexFile) -> Any:
    """The chunk vectors as one (chunks, dims) float32 NumPy view over the map: no copy."""
    import numpy as np

    chunks = file.tables["chunks"]
    dims = int(file.meta.get("dimensions") or 0)
    if not chunks.num_rows:
        return np.zeros((0, dims), dtype=np.float32)
    column = column_array(chunks, "vector")
    # `.values` ignores a slice offset (`flatten()` imports pyarrow.compute): applied here.
    flat = column.values.to_numpy(zero_copy_only=True)
    start = column.offset * dims
    return flat[start : start + chunks.num_rows * dims].reshape(chunks.num_rows, dims)


def _footer(path: Path, view: memoryview) -> tuple[int, dict, dict]:
    """Both readers' header and footer checks: (where the footer starts, the tables'
    layout, the index's meta)."""
    size = view.nbytes
    if size < HEADER.size + TRAILER.size:
        raise IndexFormatError(f"{path} is not a Markdown VDB index (too short)")
    magic, version, _ = HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise IndexFormatError(f"{path} is not a Markdown VDB index (unknown header)")
    if version > FORMAT_VERSION:
        raise IndexTooNew(path, version)
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{path} has index format {version}; this mdvdb reads format {FORMAT_VERSION}: "
            "run `mdvdb ingest --full` to rebuild it"
        )
    footer_len, footer_hash, end_magic = TRAILER.unpack_from(view, size - TRAILER.size)
    if end_magic != MAGIC or footer_len > size - HEADER.size - TRAILER.size:
        raise IndexDamaged(path, "torn or truncated")
    footer_at = size - TRAILER.size - footer_len
    footer_bytes = bytes(view[footer_at : footer_at + footer_len])
    if _xxh3([footer_bytes]) != footer_hash:
        raise IndexDamaged(path, "the footer does not match its checksum")
    try:
        footer = json.loads(footer_bytes)
        tables_layout = footer["tables"]
        meta = footer.get("meta", {})
        if not isinstance(tables_layout, dict) or not isinstance(meta, dict):
            raise TypeError("footer of the wrong shape")
    except (ValueError, KeyError, TypeError):
        raise IndexDamaged(path, "unreadable footer") from None
    return footer_at, tables_layout, meta


def read_index(path: Path | str, lite: bool = False, lazy: bool = False) -> IndexFile:
    """Map the index and open every table zero-copy; damage that could make a native call
    read outside the map raises IndexDamaged. `lite`: without pyarrow (`kernel.arrow_lite`),
    same checks. `lazy`: each table opened on first use (a sharded index's shards)."""
    # A second reader: a cold search is faster with it (docs/benchmarks.md, "One
    # implementation (issue 33), session 15").
    if lite and not os.environ.get(ARROW_READER_ENV):
        return _read_index_lite(Path(path))
    import pyarrow as pa

    path = Path(path)
    try:
        checked = _regular_stat(path)  # never a link, a FIFO or a device
        source = pa.memory_map(str(path), "r")
        stat = os.fstat(source.fileno())
        if (stat.st_dev, stat.st_ino) != (checked.st_dev, checked.st_ino):
            raise OSError("replaced while opened")
    except OSError as exc:
        raise _unopenable(path, exc) from None
    size = source.size()
    whole = source.read_buffer(size)  # zero-copy view of the whole map
    with memoryview(whole) as view:
        footer_at, tables_layout, meta = _footer(path, view)
    body = whole.slice(0, footer_at)
    tables: Any = _LazyTables(path, body, tables_layout)
    if not lazy:
        tables = {name: tables[name] for name in tables_layout}
    index = _mapped(path, stat, source, whole, body, meta, tables_layout, size)
    index.tables, index.base_address = tables, whole.address
    return _register(index)


def _mapped(path: Path, stat, source, whole, body, meta, layouts, size: int) -> IndexFile:
    return IndexFile(
        path=path,
        meta=meta,
        size=size,
        mtime_ns=stat.st_mtime_ns,
        inode=stat.st_ino,
        device=stat.st_dev,
        source=source,
        layouts=layouts,
        body=body,
        whole=whole,
        ends=_ends_of(whole),
    )


def _register(index: IndexFile) -> IndexFile:
    _OPENED.append(weakref.ref(index))
    del _OPENED[:-8]
    return index


def _unopenable(path: Path, exc: Exception) -> IndexFormatError:
    from kernel.safe_open import Refused

    if isinstance(exc, FileNotFoundError):
        return IndexFormatError(f"no index at {path}: run `mdvdb ingest` first")
    if isinstance(exc, Refused):  # a link, a FIFO, a device where the index should be
        return IndexFormatError(
            f"{path}: {exc.strerror}; run `mdvdb ingest`, which replaces it with an index"
        )
    return IndexFormatError(f"cannot open index {path}: {exc}")


def _regular_stat(path: Path) -> os.stat_result:
    """The stat of the regular file at `path`, checked through a descriptor opened with
    `O_NOFOLLOW | O_NONBLOCK` (kernel.safe_open); the map opened next must be that file."""
    from kernel.safe_open import open_regular

    fd = open_regular(path)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _ends_of(whole: Any) -> bytes:
    with memoryview(whole) as view:
        return bytes(view[: HEADER.size]) + bytes(view[view.nbytes - TRAILER.size :])


def changed_in_place(index: IndexFile) -> bool:
    """Whether the index's file was overwritten in place since it was mapped, which its inode
    and mtime may not show: its size, then its header and trailer against those read at open."""
    if index.whole is None or not index.ends:
        return False
    try:
        st = os.stat(index.path)
    except OSError:
        return False  # gone: the reader keeps what it mapped
    if st.st_ino != index.inode:
        return False  # replaced by a rename since the caller's stat: a new publish
    if st.st_size != index.size:
        return True
    return _ends_of(index.whole) != index.ends


class _LazyTables(Mapping):
    """An index's tables, each opened (and checked, as `read_index` does) on first use."""

    def __init__(self, path: Path, body: Any, layouts: dict[str, Any]):
        self._path, self._body, self._layouts = path, body, layouts
        self._open: dict[str, Any] = {}

    def __getitem__(self, name: str):
        found = self._open.get(name)
        if found is None:
            import pyarrow as pa

            layout = self._layouts[name]  # KeyError: no such table, as a dict says
            try:
                found = self._open[name] = _open_table(self._body, layout)
            except (*_OPEN_ERRORS, pa.ArrowException) as exc:
                raise IndexDamaged(self._path, f"table {name}: {exc}") from None
        return found

    def __iter__(self):
        return iter(self._layouts)

    def __len__(self) -> int:
        return len(self._layouts)


def _region(body: pa.Buffer | memoryview, where: list[int]) -> pa.Buffer | memoryview:
    offset, length = where
    if not (isinstance(offset, int) and isinstance(length, int)):
        raise TypeError("a buffer location is not a pair of integers")
    size = body.nbytes if isinstance(body, memoryview) else body.size
    if offset < 0 or length < 0 or offset + length > size:
        raise ValueError("a buffer lies outside the file")
    if isinstance(body, memoryview):  # the lite reader's map
        return body[offset : offset + length]
    return body.slice(offset, length)


# Set (to anything) to open indexes with pyarrow where the lite reader would serve.
ARROW_READER_ENV = "MDVDB_ARROW_READER"

# What a damaged footer or buffer can raise while a table opens (OSError: Arrow's IO errors).
_OPEN_ERRORS = (KeyError, TypeError, ValueError, IndexError, OverflowError, OSError)


def _read_index_lite(path: Path) -> IndexFile:
    """`read_index` without pyarrow: the same header, footer, schema, bounds and offsets
    checks, tables of `kernel.arrow_lite` columns over an `mmap`."""
    import mmap

    from kernel.safe_open import open_regular

    try:
        with open(open_regular(path), "rb") as handle:  # never a link, a FIFO or a device
            stat = os.fstat(handle.fileno())
            source = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if stat.st_size else b""
    except (OSError, ValueError) as exc:
        raise _unopenable(path, exc) from None
    whole = memoryview(source)
    footer_at, tables_layout, meta = _footer(path, whole)
    index = _mapped(path, stat, source, whole, whole[:footer_at], meta, tables_layout, whole.nbytes)
    for name, layout in tables_layout.items():
        try:
            index.tables[name] = _open_table_lite(index, name, layout)
        except _OPEN_ERRORS as exc:
            raise IndexDamaged(path, f"table {name}: {exc}") from None
    return _register(index)


def _open_table_lite(index: IndexFile, name: str, layout: dict[str, Any]) -> Any:
    """One table as `arrow_lite` columns; a schema or column type it does not decode is opened
    with pyarrow over the same map (a column on first use)."""
    from kernel import arrow_lite

    body = index.body
    schema_bytes = _region(body, layout["schema"])
    if _xxh3([schema_bytes]) != layout["h"]:
        raise ValueError("the schema does not match its checksum")
    try:
        schema = arrow_lite.read_schema(schema_bytes)
    except arrow_lite.Unsupported:
        return _real_table(index, name)
    columns = layout["columns"]
    if len(columns) != len(schema):
        raise ValueError(f"{len(columns)} columns for {len(schema)} fields")
    rows = layout["rows"]
    opened = []
    for i, (field_, desc) in enumerate(zip(schema, columns, strict=True)):
        if field_.type.kind == "other":
            opened.append(None)  # pyarrow builds (and checks) it on first use
            continue
        array = _open_array_lite(field_.type, desc, body, _real_column(index, name, i))
        if len(array) != rows:
            raise ValueError(f"{len(array)} rows, the footer says {rows}")
        opened.append(array)

    def column(i: int) -> Any:
        return opened[i] if opened[i] is not None else _real_table(index, name).column(i)

    return arrow_lite.LiteTable(schema, rows, column, lambda: _real_table(index, name))


def _real_table(index: IndexFile, name: str) -> Any:
    """The pyarrow form of one table of a lite-opened index, built once over the same map."""
    cache = index.__dict__.setdefault("_real_tables", {})
    found = cache.get(name)
    if found is None:
        import pyarrow as pa

        try:
            found = _open_table(pa.py_buffer(index.body), index.layouts[name])
        except (*_OPEN_ERRORS, pa.ArrowException) as exc:
            raise IndexDamaged(index.path, f"table {name}: {exc}") from None
        cache[name] = found
    return found


def _real_column(index: IndexFile, name: str, i: int):
    return lambda: column_array(_real_table(index, name), i)


def _open_array_lite(kind: Any, desc: dict[str, Any], body: memoryview, real) -> Any:
    """`_open_array`'s checks by hand: lengths, buffer bounds and sizes, offsets."""
    from kernel import arrow_lite

    n, nulls = desc["n"], desc["z"]
    if not (isinstance(n, int) and isinstance(nulls, int)) or n < 0 or not -1 <= nulls <= n:
        raise ValueError("bad array length or null count")
    buffers = [None if b is None else _region(body, b) for b in desc["b"]]
    expected = {"fixed": 2, "bool": 2, "utf8": 3, "list": 2, "fixed_size_list": 1}[kind.kind]
    if len(buffers) != expected:
        raise ValueError(f"{len(buffers)} buffers for a {kind.name} column")
    child_kinds = [kind.child] if kind.child is not None else []
    if len(desc["c"]) != len(child_kinds):
        raise ValueError(f"{len(desc['c'])} children for a {kind.name} column")
    children = [
        _open_array_lite(t, c, body, lambda: real().values)
        for t, c in zip(child_kinds, desc["c"], strict=True)
    ]

    def short(buffer, need: int) -> bool:
        return need > 0 and (buffer is None or buffer.nbytes < need)

    if nulls and buffers[0] is not None and short(buffers[0], (n + 7) // 8):
        raise ValueError("validity bitmap too short")
    if nulls == -1:  # unknown: counted, as pyarrow does on first use
        bitmap = buffers[0]
        valid = int.from_bytes(bitmap[: (n + 7) // 8], "little") if bitmap is not None else -1
        nulls = n - bin(valid & ((1 << n) - 1)).count("1")
    if nulls and buffers[0] is None:
        raise ValueError("nulls without a validity bitmap")
    if kind.kind == "fixed" and short(buffers[1], n * kind.width):
        raise ValueError("data buffer too short")
    if kind.kind == "bool" and short(buffers[1], (n + 7) // 8):
        raise ValueError("data buffer too short")
    if kind.kind == "fixed_size_list" and len(children[0]) < n * kind.list_size:
        raise ValueError("values shorter than the list length")
    if kind.kind in ("utf8", "list") and n:
        import numpy as np

        if short(buffers[1], 4 * (n + 1)):
            raise ValueError("offsets buffer too short")
        offsets = np.frombuffer(buffers[1], dtype=np.int32, count=n + 1)
        if kind.kind == "list":
            limit = len(children[0])
        else:
            limit = buffers[2].nbytes if buffers[2] is not None else 0
        if offsets[0] < 0 or offsets[-1] > limit or (np.diff(offsets) < 0).any():
            raise ValueError("an offset lies outside its values")
    return arrow_lite.LiteArray(kind, n, nulls, buffers, children, real)


def _open_table(body: pa.Buffer, layout: dict[str, Any]) -> pa.Table:
    import pyarrow as pa

    # The schema decides how every buffer is read: checked on every open (a few hundred
    # bytes), so a flipped type can never send a native call the wrong way through a buffer.
    schema_bytes = _region(body, layout["schema"])
    if _xxh3([schema_bytes]) != layout["h"]:
        raise ValueError("the schema does not match its checksum")
    schema = pa.ipc.read_schema(schema_bytes)
    columns = [
        _open_array(f.type, desc, body) for f, desc in zip(schema, layout["columns"], strict=True)
    ]
    table = pa.Table.from_arrays(columns, schema=schema)
    if table.num_rows != layout["rows"]:
        raise ValueError(f"{table.num_rows} rows, the footer says {layout['rows']}")
    return table


def _open_array(kind: pa.DataType, desc: dict[str, Any], body: pa.Buffer) -> pa.Array:
    """One column from its buffers, zero-copy: `validate` checks the buffers' lengths,
    `_check_offsets` the offsets (`validate(full=True)` would also check UTF-8, far dearer)."""
    import pyarrow as pa

    n, nulls = desc["n"], desc["z"]
    if not (isinstance(n, int) and isinstance(nulls, int)) or n < 0 or not -1 <= nulls <= n:
        raise ValueError("bad array length or null count")
    buffers = [None if b is None else _region(body, b) for b in desc["b"]]
    children = [
        _open_array(t, child, body) for t, child in zip(_child_types(kind), desc["c"], strict=True)
    ]
    if len(buffers) != _buffer_count(kind):
        raise ValueError(f"{len(buffers)} buffers for a {kind} column")
    array = pa.Array.from_buffers(kind, n, buffers, null_count=nulls, children=children or None)
    array.validate()
    if _has_offsets(kind) and n:
        _check_offsets(kind, array, buffers)
    return array


def _child_types(kind: pa.DataType) -> list[pa.DataType]:
    import pyarrow as pa

    return [kind.value_type] if _is_list(kind) or pa.types.is_fixed_size_list(kind) else []


def _buffer_count(kind: pa.DataType) -> int:
    import pyarrow as pa

    if pa.types.is_fixed_size_list(kind):
        return 1
    return 3 if _has_offsets(kind) and not _is_list(kind) else 2


def _is_list(kind: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(kind)


def _check_offsets(kind: pa.DataType, array: pa.Array, buffers: list) -> None:
    import numpy as np

    offsets = np.frombuffer(buffers[1], dtype=np.int32)[: len(array) + 1]
    if _is_list(kind):
        limit = len(array.values)
    else:
        limit = buffers[2].size if buffers[2] is not None else 0
    if offsets[0] < 0 or offsets[-1] > limit or (np.diff(offsets) < 0).any():
        raise ValueError("an offset lies outside its values")


# The last few indexes this process opened (`damage_message`).
_OPENED: list[weakref.ref] = []


def verify_checksums(index: IndexFile) -> list[str]:
    """Hash every buffer and compare with the footer: the problems, by table and column.
    Reads the whole file."""
    problems: list[str] = []
    body, layouts = index.body, index.layouts
    if body is None:
        return ["this index was not read from a file"]
    regions: list[list[int]] = []
    for name, layout in layouts.items():
        regions.append(layout["schema"])
        _regions_of(layout["columns"], regions)
        schema = index.tables[name].schema
        for field_, desc in zip(schema, layout["columns"], strict=True):
            bad = _bad_buffers(desc, body)
            if bad:
                problems.append(
                    f"table {name}: column {field_.name}: {bad} buffer(s) differ from "
                    "their checksum"
                )
    # Every other byte (the header's reserved word, the padding between buffers) is zero:
    # with that, a flip anywhere in the file is found.
    import numpy as np

    whole = np.frombuffer(body, dtype=np.uint8)
    at, stray = HEADER.size, False
    for offset, length in sorted(regions):
        stray = stray or (offset > at and bool(whole[at:offset].any()))
        at = max(at, offset + length)
    stray = stray or bool(whole[at:].any())
    reserved = HEADER.unpack(bytes(memoryview(body)[: HEADER.size]))[2]
    if reserved or stray:
        problems.append("bytes outside every buffer (header, padding) are not the ones written")
    return problems


# -- checksum verdicts, once per file (device, inode, size, mtime) and process: a writer
# reuses bytes only of a file whose checksums hold; a file this process wrote is trusted.

_VERDICTS: dict[tuple[int, int, int, int], Any] = {}


def _identity(index: IndexFile) -> tuple[int, int, int, int]:
    return (index.device, index.inode, index.size, index.mtime_ns)


class _Pending:
    """A verdict being computed on a thread (`check_soon`)."""

    def __init__(self) -> None:
        import threading

        self.done = threading.Event()
        self.problems: list[str] | None = None  # None when the thread could not check


def checksum_problems(index: IndexFile) -> list[str]:
    """`verify_checksums(index)`, computed at most once per file in this process (a check
    begun by `check_soon` is waited for)."""
    key = _identity(index)
    got = _VERDICTS.get(key)
    if isinstance(got, _Pending):
        got.done.wait()
        got = got.problems
    if got is None:
        got = verify_checksums(index)
        _remember(key, got)
    return list(got)


def _remember(key: tuple[int, int, int, int], problems: Any) -> None:
    _VERDICTS[key] = problems
    while len(_VERDICTS) > 16:  # a long-lived writer (the watcher) publishes many files
        _VERDICTS.pop(next(iter(_VERDICTS)))


def check_soon(path: Path | str) -> None:
    """Begin `checksum_problems` of the index at `path`, if any, on a thread (xxh3 lets go
    of the GIL): a run that reuses its bytes waits later only for what is left."""
    try:
        st = os.stat(path)
    except OSError:
        return
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _VERDICTS:
        return
    import threading

    import pyarrow  # noqa: F401 - here, not on the thread: one importer of it at a time

    pending = _Pending()
    _remember(key, pending)

    def run() -> None:
        try:
            index = read_index(path)
            if _identity(index) == key:
                pending.problems = verify_checksums(index)
        except Exception:  # noqa: BLE001 - the asker opens and checks the file itself
            pass
        finally:
            if _VERDICTS.get(key) is pending:
                if pending.problems is None:
                    del _VERDICTS[key]
                else:
                    _VERDICTS[key] = pending.problems
            pending.done.set()

    threading.Thread(target=run, name="index-check", daemon=True).start()


def _regions_of(columns: list[dict[str, Any]], out: list[list[int]]) -> None:
    for desc in columns:
        out.extend(b for b in desc["b"] if b is not None)
        _regions_of(desc["c"], out)


def _bad_buffers(desc: dict[str, Any], body: pa.Buffer) -> int:
    bad = 0
    hashes = desc.get("h") or []
    if len(hashes) != len(desc["b"]):
        return len(desc["b"]) or 1
    for where, expected in zip(desc["b"], hashes, strict=True):
        if where is None:
            bad += expected is not None
        elif _xxh3([_region(body, where)]) != expected:
            bad += 1
    return bad + sum(_bad_buffers(child, body) for child in desc["c"])


def damage_message() -> str | None:
    """After an unexpected error on the read path: DAMAGED when an index this process has
    open fails its checksums, else None (a bug)."""
    for ref in reversed(_OPENED):
        index = ref()
        if index is None:
            continue
        try:
            if verify_checksums(index):
                return f"{DAMAGED} ({index.path})"
        except Exception:  # noqa: BLE001 - a footer that cannot even be walked is damage
            return f"{DAMAGED} ({index.path})"
    return None


def read_meta(path: Path | str) -> dict[str, Any]:
    """Only the footer's metadata, checked as every open checks it, without pyarrow."""
    import mmap

    from kernel.safe_open import open_regular

    path = Path(path)
    with open(open_regular(path), "rb") as fh:  # never a link, a FIFO or a device
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise IndexFormatError(f"{path} is not a Markdown VDB index (too short)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return _footer(path, view)[2]
            finally:
                view.release()


# -- writing: a column's buffers are the concatenation of its chunks' parts, never combined
# in memory (docs/architecture.md, "The index file").


@dataclass(eq=False, repr=False)
class _Plan:
    """One array to write: its length, null count, buffers (each a list of parts, or None
    for an absent validity bitmap) and children."""

    length: int
    nulls: int
    buffers: list[list[Any] | None]
    children: list[_Plan] = field(default_factory=list)


def _plan(kind: pa.DataType, chunks: list[pa.Array]) -> _Plan:
    import pyarrow as pa

    chunks = [c for c in chunks if len(c)]
    length = sum(len(c) for c in chunks)
    nulls = sum(c.null_count for c in chunks)
    validity = [_bitmap([c.is_valid() for c in chunks])] if nulls else None
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        parts = [c.values.slice(c.offset * size, len(c) * size) for c in chunks]
        return _Plan(length, nulls, [validity], [_plan(kind.value_type, parts)])
    if _has_offsets(kind):
        offsets, spans = _offsets(chunks)
        if _is_list(kind):
            parts = [c.values.slice(a, b - a) for c, (a, b) in zip(chunks, spans, strict=True)]
            return _Plan(length, nulls, [validity, [offsets]], [_plan(kind.value_type, parts)])
        data = [
            c.buffers()[2].slice(a, b - a) for c, (a, b) in zip(chunks, spans, strict=True) if b > a
        ]
        return _Plan(length, nulls, [validity, [offsets], data])
    if pa.types.is_boolean(kind):
        return _Plan(length, nulls, [validity, [_bitmap(chunks)]])
    try:
        width = kind.bit_width
    except ValueError:
        width = 0
    if width <= 0 or width % 8:
        raise TypeError(f"the index cannot store columns of type {kind}")
    step = width // 8
    data = [c.buffers()[1].slice(c.offset * step, len(c) * step) for c in chunks]
    return _Plan(length, nulls, [validity, data])


def _has_offsets(kind: pa.DataType) -> bool:
    """Strings and lists, the variable-size types the index stores (32-bit offsets)."""
    import pyarrow as pa

    return _is_list(kind) or pa.types.is_string(kind)


def _offsets(chunks: list[pa.Array]) -> tuple[Any, list[tuple[int, int]]]:
    """The concatenated offsets buffer of variable-size chunks, and each chunk's span in its
    own values."""
    import numpy as np

    dtype = np.int32
    pieces, spans, at = [np.zeros(1, dtype=dtype)], [], 0
    for c in chunks:
        raw = np.frombuffer(c.buffers()[1], dtype=dtype)[c.offset : c.offset + len(c) + 1]
        first, last = int(raw[0]), int(raw[-1])
        pieces.append(raw[1:] - first + at)
        spans.append((first, last))
        at += last - first
    return np.concatenate(pieces).astype(dtype, copy=False), spans


def _bitmap(masks: list[pa.Array]) -> Any:
    """A validity or boolean bitmap of concatenated boolean arrays (LSB first, as Arrow)."""
    import numpy as np

    bits = [m.to_numpy(zero_copy_only=False) for m in masks]
    flat = np.concatenate(bits) if bits else np.zeros(0, dtype=bool)
    return np.packbits(flat.astype(bool, copy=False), bitorder="little")


# Written bytes are handed to the disk every WRITEBACK_STEP, and at the end of each buffer
# of WRITEBACK_MIN or more (smaller ones are left to the fsync).
WRITEBACK_STEP = 16 << 20
WRITEBACK_MIN = 1 << 20


class _Sink:
    """The temp file being written, by file descriptor, with its position tracked."""

    def __init__(self, fd: int, source: IndexFile | None):
        self.fd = fd
        self.at = 0
        # A flusher starts when the first step is due (a small index never starts one).
        self.flush = True
        self.writeback: _Flusher | None = None
        self.handed = 0  # the file up to here was handed to the flusher
        usable = source is not None and source.source is not None
        # copy_file_range is Linux's; elsewhere the bytes go through memory.
        self.source = source if usable and hasattr(os, "copy_file_range") else None

    def write(self, data: Any) -> None:
        if self.source is not None and self._copy(data):
            return
        view = memoryview(data).cast("B")
        while view:
            done = os.write(self.fd, view[:WRITEBACK_STEP])
            self.at += done
            view = view[done:]
            self.hand_over()

    def hand_over(self, least: int | None = None) -> None:
        """Start the disk writeback of what was written since the last call, once it is
        `least` (WRITEBACK_STEP) bytes or more."""
        least = WRITEBACK_STEP if least is None else least
        if self.flush and self.at - self.handed >= least:
            if self.writeback is None:
                self.writeback = _Flusher.start_for(self.fd)
                self.flush = self.writeback is not None
                if not self.flush:
                    return
            self.writeback.start(self.handed, self.at - self.handed)
            self.handed = self.at

    def _copy(self, data: Any) -> bool:
        """Copy `data` from the source file when it is a slice of the source's map."""
        address = getattr(data, "address", None)
        source = self.source
        if address is None or not source.base_address <= address < source.base_address + (
            source.size
        ):
            return False
        offset, left = address - source.base_address, data.size
        try:
            while left:
                step = min(left, WRITEBACK_STEP)
                done = os.copy_file_range(source.source.fileno(), self.fd, step, offset)
                if done == 0:
                    raise OSError("copy_file_range copied nothing")
                offset, left, self.at = offset + done, left - done, self.at + done
                self.hand_over()
        except OSError:
            # A file system without it: write the rest through memory, from now on.
            os.lseek(self.fd, self.at, os.SEEK_SET)
            self.source = None
            self.write(data.slice(data.size - left) if left else b"")
        return True

    def pad(self) -> None:
        remainder = self.at % ALIGN
        if remainder:
            self.write(b"\x00" * (ALIGN - remainder))

    def region(self, parts: list[Any]) -> tuple[list[int], int]:
        """Write the parts as one buffer: its [offset, length] and its xxh3-64."""
        self.pad()
        start = self.at
        for part in parts:
            self.write(part)
        self.hand_over(WRITEBACK_MIN)
        return [start, self.at - start], _xxh3(p for p in parts if _size(p))


def _size(part: Any) -> int:
    size = getattr(part, "size", None)
    return len(memoryview(part).cast("B")) if size is None or not isinstance(size, int) else size


def _write_array(sink: _Sink, plan: _Plan) -> dict[str, Any]:
    regions = [None if parts is None else sink.region(parts) for parts in plan.buffers]
    return {
        "n": plan.length,
        "z": plan.nulls,
        "b": [None if r is None else r[0] for r in regions],
        "h": [None if r is None else r[1] for r in regions],
        "c": [_write_array(sink, child) for child in plan.children],
    }


def _write_table(sink: _Sink, table: pa.Table) -> dict[str, Any]:
    where, digest = sink.region([table.schema.serialize()])
    layout = {"schema": where, "rows": table.num_rows, "h": digest}
    layout["columns"] = [
        _write_array(sink, _plan(f.type, table.column(i).chunks))
        for i, f in enumerate(table.schema)
    ]
    return layout


def write_index(
    path: Path | str,
    tables: dict[str, pa.Table],
    meta: dict[str, Any],
    source: IndexFile | None = None,
) -> int:
    """Write all tables to a temp file beside `path`, fsync, atomically replace `path`, and
    return the file's size; on any error the previous index is left untouched. Parts of
    `source` (the previous index, still mapped) are copied file-to-file."""
    writer = IndexWriter(path, source)
    try:
        return writer.finish(tables, meta)
    except BaseException:
        writer.abort()
        raise


class IndexWriter:
    """`write_index` in steps (docs/architecture.md, "The index file"): `put` a final table
    to the writer's thread, `finish` the rest and rename, or `abort`. One caller."""

    def __init__(self, path: Path | str, source: IndexFile | None = None):
        from kernel import private

        self.path = Path(path)
        private.make_dir(self.path.parent)  # 0700, when missing
        # mkstemp makes the file 0600 whatever the umask (the index holds the notes' text);
        # `os.replace` renames over a symlink at `path`, never writes through it.
        import tempfile  # the write side only: a search does not pay for its import

        self._fd, self._tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=TEMP_SUFFIX, dir=self.path.parent
        )
        self._layouts: dict[str, Any] = {}
        self.handed_to_disk = 0
        self._thread: Any = None
        self._error: BaseException | None = None
        self._names: set[str] = set()
        self._queue: Any = None
        try:
            self._sink = _Sink(self._fd, source)
            self._sink.write(HEADER.pack(MAGIC, FORMAT_VERSION, 0))
        except BaseException:
            self.abort()
            raise

    def put(self, name: str, table: pa.Table) -> None:
        """Write `table` (final: it is not changed later) on the writer's thread."""
        if name in self._names:
            raise ValueError(f"table {name} is written twice")
        self._names.add(name)
        if self._thread is None:
            import queue
            import threading

            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._drain, name="index-writer", daemon=True)
            self._thread.start()
        self._queue.put((name, table))

    def _drain(self) -> None:
        """The thread: the tables in the order put, until `None`."""
        while (item := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain the queue; `finish` raises the error
            name, table = item
            try:
                self._layouts[name] = _write_table(self._sink, table)
            except BaseException as exc:  # noqa: BLE001 - re-raised by `finish`
                self._error = exc

    def _join(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error

    def finish(self, tables: dict[str, pa.Table], meta: dict[str, Any]) -> int:
        """Write what was not put, the footer and the trailer; fsync; rename over `path`.
        Returns the size of the published file. Every table put must be in `tables`."""
        try:
            return self._finish(tables, meta)
        except OSError as exc:
            if exc.filename is not None:
                raise
            # a write's ENOSPC names no file: the user is told which one (the index)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc

    def _finish(self, tables: dict[str, pa.Table], meta: dict[str, Any]) -> int:
        self._join()
        stray = set(self._layouts) - set(tables)
        if stray:
            raise ValueError(f"tables put but not published: {sorted(stray)}")
        sink = self._sink
        for name, table in tables.items():
            if name not in self._layouts:
                self._layouts[name] = _write_table(sink, table)
        layouts = {name: self._layouts[name] for name in tables}
        full_meta = {"format_version": FORMAT_VERSION, "written_at": time.time(), **meta}
        footer = json.dumps(
            {"version": FORMAT_VERSION, "tables": layouts, "meta": full_meta},
            separators=(",", ":"),
            default=str,
        ).encode()
        sink.write(footer)
        sink.write(TRAILER.pack(len(footer), _xxh3([footer]), MAGIC))
        size = sink.at
        self._stop_flusher()
        os.fsync(self._fd)
        st = os.fstat(self._fd)
        os.close(self._fd)
        self._fd = -1
        os.replace(self._tmp, self.path)
        # Its checksums were computed from the bytes written: nobody checks it again here.
        _remember((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), [])
        self._tmp = None
        _fsync_dir(self.path.parent)
        return size

    def _stop_flusher(self) -> None:
        sink = getattr(self, "_sink", None)
        if sink is not None:
            sink.flush = False
        if sink is not None and sink.writeback is not None:
            sink.writeback.stop()
            # What the kernel began writing before the fsync (a test reads it).
            self.handed_to_disk = sink.writeback.started
            sink.writeback = None

    def abort(self) -> None:
        """Stop: wait for the thread, close and remove the temp file (idempotent)."""
        try:
            self._join()
        except BaseException:  # noqa: BLE001 - aborting anyway
            pass
        self._stop_flusher()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass
            self._tmp = None


class _Flusher:
    """A thread that hands ranges of the file being written to the disk: the kernel's
    request may wait for room in the device's queue, the copy must not."""

    def __init__(self, fd: int):
        import queue
        import threading

        self.fd = fd
        self.started = 0  # bytes the kernel took requests for (what a test checks)
        self._queue: Any = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="index-flusher", daemon=True)
        self._thread.start()

    @classmethod
    def start_for(cls, fd: int) -> _Flusher | None:
        """A flusher for `fd`, or None where the kernel offers no `sync_file_range`."""
        return cls(fd) if _sync_file_range() is not None else None

    def start(self, offset: int, length: int) -> None:
        self._queue.put((offset, length))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if _start_writeback(self.fd, *item):
                self.started += item[1]

    def stop(self) -> None:
        """Wait until every range asked for was handed over (before the fd closes)."""
        self._queue.put(None)
        self._thread.join()


def _start_writeback(fd: int, offset: int, length: int) -> bool:
    """Ask the kernel to start writing a range to disk now (`sync_file_range`); whether it
    took the request. Durability still comes from the fsync."""
    sync = _sync_file_range()
    if sync is None:
        return False
    return sync(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0


_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>


@functools.cache
def _sync_file_range() -> Any:
    """libc's `sync_file_range`, or None where there is none (not Linux, no glibc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        found = ctypes.CDLL(None, use_errno=True).sync_file_range
        found.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        found.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return found


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


_SCHEMAS = {f"{t}_SCHEMA" for t in ("FILES", "CLUSTERS", "SCHEMA_TABLE", "SCHEMA_PROBLEMS")}
_SCHEMAS |= {"LEXICAL_SCHEMA", "LEXICAL_FORWARD_SCHEMA", "LINKS_SCHEMA"}


def __getattr__(name: str):
    """The Arrow schemas, built on first use (a no-op ingest never imports pyarrow)."""
    if name in _SCHEMAS:
        value = globals()[name] = _build_schema(name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
