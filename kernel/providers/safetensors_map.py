"""A model.safetensors file as read-only NumPy views of one memory map: no copy, no parse
(docs/architecture.md, "Mapped safetensors").
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np

from kernel.providers.base import ProviderError

MAX_HEADER = 100 << 20  # the format's own limit (100 MB of JSON)
_KINDS = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def _bad(path: Path, why: str) -> ProviderError:
    return ProviderError(f"cannot read {path}: {why}")


def tensors(path: Path) -> dict[str, np.ndarray]:
    """name -> array (float tensors as float32); a damaged or cut file is a ProviderError
    naming it."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            if size < 8:
                raise _bad(path, "not a safetensors file")
            view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise _bad(path, exc.strerror or str(exc)) from None
    (length,) = struct.unpack("<Q", view[:8])
    if not 2 <= length <= min(MAX_HEADER, size - 8):
        raise _bad(path, "not a safetensors file")
    try:
        header = json.loads(view[8 : 8 + length])
    except ValueError:
        raise _bad(path, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _bad(path, "not a safetensors file")
    start = 8 + length
    out: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = entry["dtype"], [int(d) for d in entry["shape"]]
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise _bad(path, f"bad header entry for {name!r}") from None
        count = int(np.prod(shape, dtype=np.int64))
        if dtype == "BF16":
            width = 2
        elif dtype in _KINDS:
            width = np.dtype(_KINDS[dtype]).itemsize
        else:
            continue  # a tensor type no encoder weight uses here (bool, int8): skipped
        if begin < 0 or end != begin + count * width or start + end > size:
            raise _bad(path, f"tensor {name!r} runs past the end of the file (cut short?)")
        if dtype == "BF16":
            raw = np.frombuffer(view, dtype="<u2", count=count, offset=start + begin)
            array = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        else:
            array = np.frombuffer(view, dtype=_KINDS[dtype], count=count, offset=start + begin)
            array = array.reshape(shape)
            if dtype in ("F16", "F64"):
                array = array.astype(np.float32)
        out[name] = array
    return out
