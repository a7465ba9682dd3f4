"""The safetensors file format, for numpy arrays: what the daemon publishes
(a file it maps) and what its fetches write. An 8-byte little-endian header
length, a JSON header of name -> dtype, shape and data offsets (plus an
optional ``__metadata__`` of strings), padded with spaces to 8 bytes, then
the tensors' bytes."""
from __future__ import annotations

import json
import os
import struct
from typing import Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

# Bounded like the C++ parser: a header is at most 100 MB.
_MAX_HEADER = 100_000_000


def _dtype_tables():
    from . import _FROM_NUMPY, _TO_NUMPY

    return _FROM_NUMPY, _TO_NUMPY


def write(path: str, tensors: Iterable[Tuple[str, np.ndarray]], metadata: Optional[Mapping[str, str]] = None) -> int:
    """Writes ``tensors`` (name, array) to ``path`` (replacing it); returns its size."""
    from_numpy, _ = _dtype_tables()
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    arrays = []
    offset = 0
    for name, value in tensors:
        array = np.ascontiguousarray(value)
        dtype = from_numpy.get(array.dtype)
        if dtype is None:
            raise ValueError(f"tensor '{name}': dtype {array.dtype} has no safetensors name")
        header[name] = {"dtype": dtype, "shape": [int(d) for d in array.shape],
                        "data_offsets": [offset, offset + array.nbytes]}
        arrays.append(array)
        offset += array.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for array in arrays:
            if array.nbytes:
                f.write(array.reshape(-1).view(np.uint8).data)
    return 8 + len(encoded) + offset


def read(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file, as read-only numpy arrays over a
    mapping of it (no copy)."""
    _, to_numpy = _dtype_tables()
    size = os.path.getsize(path)
    if size < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    (length,) = struct.unpack("<Q", bytes(data[:8]))
    if length > _MAX_HEADER or 8 + length > size:
        raise ValueError(f"{path}: a header of {length} bytes does not fit")
    header = json.loads(bytes(data[8:8 + length]))
    base = 8 + length
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if not 0 <= begin <= end <= size - base:
            raise ValueError(f"{path}: tensor '{name}' lies outside the file")
        dtype = to_numpy[entry["dtype"]]
        out[name] = data[base + begin:base + end].view(dtype).reshape(entry["shape"])
    return out
