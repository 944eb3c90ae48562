"""Arrow columns read without pyarrow: the cold `mdvdb search` path's reader of an index
(docs/architecture.md, "The lite Arrow reader").
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A callable told the attribute name whenever a lite object falls back to pyarrow (tests).
ON_FALLBACK: Callable[[str], None] | None = None


class Unsupported(ValueError):
    """A schema or type this reader does not decode: the caller opens the table with pyarrow."""


@dataclass(frozen=True)
class LiteType:
    """An Arrow type as far as this reader needs it. `code` is a struct/memoryview format
    for fixed-width values ("i" int32, "f" float32, "?" a bit-packed bool...)."""

    kind: str  # "fixed", "bool", "utf8", "list", "fixed_size_list", "other"
    code: str = ""
    width: int = 0  # bytes per value (fixed)
    list_size: int = 0  # fixed_size_list
    child: LiteType | None = None
    name: str = ""  # Arrow's name of the type, for messages

    def to_pandas_dtype(self):
        import numpy as np

        return np.dtype(self.code)

    @property
    def value_type(self) -> LiteType:
        if self.child is None:
            raise AttributeError("value_type")
        return self.child


@dataclass(eq=False, repr=False)
class LiteField:
    """A schema field: its name and decoded type."""

    name: str
    type: LiteType


@dataclass(eq=False, repr=False)
class LiteSchema:
    """A table's decoded schema: its fields, and their names in order."""

    fields: list[LiteField]
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.names = [f.name for f in self.fields]

    def field(self, name: str) -> LiteField:
        return self.fields[self.names.index(name)]

    def __iter__(self):
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)


# -- the serialized schema: an IPC message whose header is a Schema flatbuffer ----------------

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_I16 = struct.Struct("<h")

# Arrow's Type union (Schema.fbs)
_INT, _FLOAT, _UTF8, _BOOL, _LIST, _FIXED_LIST = 2, 3, 5, 6, 12, 16
_INT_CODES = {(8, True): "b", (8, False): "B", (16, True): "h", (16, False): "H"}
_INT_CODES |= {(32, True): "i", (32, False): "I", (64, True): "q", (64, False): "Q"}
_FLOAT_CODES = {1: "f", 2: "d"}  # SINGLE, DOUBLE (HALF is left to pyarrow)


class _Table:
    """One flatbuffer table: its fields by index, with their defaults."""

    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos = buf, pos
        self.vtable = pos - _I32.unpack_from(buf, pos)[0]
        self.vsize = _U16.unpack_from(buf, self.vtable)[0]

    def _at(self, i: int) -> int:
        slot = 4 + 2 * i
        if slot + 2 > self.vsize:
            return 0
        off = _U16.unpack_from(self.buf, self.vtable + slot)[0]
        return self.pos + off if off else 0

    def scalar(self, i: int, fmt: struct.Struct, default: int = 0) -> int:
        at = self._at(i)
        return fmt.unpack_from(self.buf, at)[0] if at else default

    def _indirect(self, i: int) -> int:
        at = self._at(i)
        return at + _U32.unpack_from(self.buf, at)[0] if at else 0

    def table(self, i: int) -> _Table | None:
        at = self._indirect(i)
        return _Table(self.buf, at) if at else None

    def string(self, i: int) -> str:
        at = self._indirect(i)
        if not at:
            return ""
        n = _U32.unpack_from(self.buf, at)[0]
        return self.buf[at + 4 : at + 4 + n].decode("utf-8")

    def tables(self, i: int) -> list[_Table]:
        at = self._indirect(i)
        if not at:
            return []
        n = _U32.unpack_from(self.buf, at)[0]
        items = []
        for k in range(n):
            item = at + 4 + 4 * k
            items.append(_Table(self.buf, item + _U32.unpack_from(self.buf, item)[0]))
        return items


_U8 = struct.Struct("<B")
_BOOL8 = struct.Struct("<?")


def read_schema(data: bytes) -> LiteSchema:
    """The fields of a serialized Arrow schema (`pyarrow.Schema.serialize()`); Unsupported
    for anything but a little-endian schema of the types `_field_type` knows."""
    try:
        if _U32.unpack_from(data, 0)[0] == 0xFFFFFFFF:  # continuation marker, then the length
            size, start = _I32.unpack_from(data, 4)[0], 8
        else:  # the pre-1.0 form: the length alone
            size, start = _I32.unpack_from(data, 0)[0], 4
        buf = bytes(data[start : start + size])
        message = _Table(buf, _U32.unpack_from(buf, 0)[0])
        if message.scalar(1, _U8) != 1:  # header_type: Schema
            raise Unsupported("not a schema message")
        schema = message.table(2)
        if schema is None or schema.scalar(0, _I16) != 0:  # endianness: Little
            raise Unsupported("not a little-endian schema")
        return LiteSchema([LiteField(f.string(0), _field_type(f)) for f in schema.tables(1)])
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise Unsupported(f"unreadable schema: {exc}") from None


def _field_type(f: _Table) -> LiteType:
    if f.table(4) is not None:  # dictionary-encoded
        return LiteType("other", name="dictionary")
    kind, spec = f.scalar(2, _U8), f.table(3)
    children = f.tables(5)
    if kind == _INT and spec is not None:
        bits, signed = spec.scalar(0, _I32), bool(spec.scalar(1, _BOOL8))
        code = _INT_CODES.get((bits, signed))
        if code:
            return LiteType("fixed", code, bits // 8, name=f"int{bits}")
    elif kind == _FLOAT and spec is not None:
        code = _FLOAT_CODES.get(spec.scalar(0, _I16))
        if code:
            return LiteType("fixed", code, 4 if code == "f" else 8, name="float")
    elif kind == _UTF8:
        return LiteType("utf8", name="string")
    elif kind == _BOOL:
        return LiteType("bool", "?", name="bool")
    elif kind in (_LIST, _FIXED_LIST) and len(children) == 1:
        child = _field_type(children[0])
        if child.kind in ("fixed", "utf8"):
            if kind == _LIST:
                return LiteType("list", child=child, name="list")
            size = spec.scalar(0, _I32) if spec is not None else 0
            if child.kind == "fixed" and size > 0:
                return LiteType("fixed_size_list", list_size=size, child=child, name="fsl")
    return LiteType("other", name=f"type {kind}")


# -- arrays ------------------------------------------------------------------------------------


class LiteScalar:
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def as_py(self) -> Any:
        return self.value


class LiteArray:
    """One column (or a list's values) over the map: row i decoded on demand. `real` builds
    the pyarrow Array of the same bytes, for everything this class does not offer."""

    num_chunks = 1
    offset = 0

    def __init__(
        self,
        kind: LiteType,
        length: int,
        null_count: int,
        bufs: list[memoryview | None],
        children: list[LiteArray],
        real: Callable[[], Any],
    ):
        self.type, self._n, self.null_count = kind, length, null_count
        self._bufs, self._children, self._real = bufs, children, real
        bufs = [memoryview(b"") if b is None else b for b in bufs]
        self._valid = bufs[0] if null_count else None
        if kind.kind == "bool":
            self._data = bufs[1]
        if kind.kind in ("utf8", "list"):
            self._offs = bufs[1][: 4 * (length + 1)].cast("i") if length else None
        if kind.kind == "fixed":
            self._cells = bufs[1][: kind.width * length].cast(kind.code)
        elif kind.kind == "utf8":
            self._bytes = bufs[2]

    # pyarrow's ChunkedArray and Array API, the parts the query path uses
    def chunk(self, i: int) -> LiteArray:
        if i != 0:
            raise IndexError(i)
        return self

    @property
    def chunks(self) -> list[LiteArray]:
        return [self]

    def __len__(self) -> int:
        return self._n

    def buffers(self) -> list[memoryview | None]:
        out = list(self._bufs)
        for child in self._children:
            out.extend(child.buffers())
        return out

    @property
    def values(self) -> LiteArray:
        if not self._children:
            return self._fallback("values")
        return self._children[0]

    @property
    def offsets(self) -> LiteArray:
        if self.type.kind not in ("utf8", "list"):
            return self._fallback("offsets")
        kind = LiteType("fixed", "i", 4, name="int32")
        bufs = [None, self._bufs[1]]
        return LiteArray(kind, self._n + 1, 0, bufs, [], lambda: self._real().offsets)

    def is_valid(self, i: int) -> bool:
        valid = self._valid
        return valid is None or bool(valid[i >> 3] >> (i & 7) & 1)

    def _row(self, i: int) -> Any:
        if not self.is_valid(i):
            return None
        kind = self.type.kind
        if kind == "fixed":
            return self._cells[i]
        if kind == "utf8":
            return str(self._bytes[self._offs[i] : self._offs[i + 1]], "utf-8")
        if kind == "bool":
            return bool(self._data[i >> 3] >> (i & 7) & 1)
        child = self._children[0]
        if kind == "list":
            return [child._row(k) for k in range(self._offs[i], self._offs[i + 1])]
        size = self.type.list_size
        return [child._row(k) for k in range(i * size, (i + 1) * size)]

    def __getitem__(self, i: int) -> LiteScalar:
        if not isinstance(i, int):
            if not hasattr(i, "__index__"):  # a slice...
                return self._fallback("__getitem__")(i)
            i = i.__index__()  # a NumPy integer
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("index out of bounds")
        return LiteScalar(self._row(i))

    def to_pylist(self) -> list[Any]:
        if self.type.kind == "fixed" and not self.null_count:
            return self._cells.tolist()
        return [self._row(i) for i in range(self._n)]

    def to_numpy(self, zero_copy_only: bool = True, **kwargs: Any):
        if self.type.kind != "fixed" or self.null_count or kwargs:
            return self._fallback("to_numpy")(zero_copy_only=zero_copy_only, **kwargs)
        import numpy as np

        return np.frombuffer(self._bufs[1] or b"", np.dtype(self.type.code), self._n)

    def _fallback(self, name: str) -> Any:
        if ON_FALLBACK is not None:
            ON_FALLBACK(name)
        return getattr(self._real(), name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._fallback(name)


class LiteTable:
    """A table of the index, its columns opened on first use; pyarrow's Table for the rest."""

    def __init__(
        self,
        schema: LiteSchema,
        rows: int,
        opener: Callable[[int], LiteArray | Any],
        real: Callable[[], Any],
    ):
        self.schema, self.num_rows = schema, rows
        self._opener, self._real = opener, real
        self._columns: dict[int, Any] = {}
        self.column_names = list(schema.names)

    def column(self, key: str | int) -> Any:
        i = key if isinstance(key, int) else self.schema.names.index(key)
        found = self._columns.get(i)
        if found is None:
            found = self._columns[i] = self._opener(i)
        return found

    def arrow(self) -> Any:
        """The pyarrow Table of the same bytes (built on first call)."""
        return self._real()

    def __len__(self) -> int:
        return self.num_rows

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if ON_FALLBACK is not None:
            ON_FALLBACK(f"Table.{name}")
        return getattr(self._real(), name)
