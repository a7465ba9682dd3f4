"""The safetensors file format, for numpy arrays. Every version the Python
package publishes is a safetensors image: an 8-byte little-endian header
length, a JSON header of name -> dtype, shape and data offsets (plus an
optional ``__metadata__`` of strings: the trainer's step, say), padded with
spaces to 8 bytes, then the tensors' bytes. So a version fetched to a file is
a safetensors file, whoever published it."""
from __future__ import annotations

import json
import os
import struct
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._tensors import FROM_NUMPY, TO_NUMPY

# Bounded like the C++ parser: a header is at most 100 MB.
_MAX_HEADER = 100_000_000


def encode_header(entries: Iterable[Tuple[str, str, Sequence[int], int]],
                  metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """The header (length prefix, JSON, padding) of tensors laid end to end
    in the given order: each entry is (name, safetensors dtype, shape,
    nbytes). Raises ValueError for a name used twice or ``__metadata__``."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, shape, nbytes in entries:
        if name == "__metadata__" or name in header:
            raise ValueError(f"tensor name {name!r} is used twice or reserved")
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded


def decode_header(prefix) -> Tuple[int, dict, Dict[str, str]]:
    """(data start, tensors by name, metadata) of the safetensors header at
    the start of ``prefix`` (bytes-like, at least the whole header). Raises
    ValueError when it is not one."""
    data = memoryview(prefix).cast("B")
    if len(data) < 8:
        raise ValueError("too short for a safetensors header")
    (length,) = struct.unpack("<Q", data[:8])
    if length > _MAX_HEADER or 8 + length > len(data):
        raise ValueError(f"a header of {length} bytes does not fit")
    try:
        header = json.loads(bytes(data[8:8 + length]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("__metadata__ must map strings to strings")
    return 8 + length, header, metadata


def write(path: str, tensors: Iterable[Tuple[str, np.ndarray]], metadata: Optional[Mapping[str, str]] = None,
          dtypes: Optional[Mapping[str, str]] = None) -> int:
    """Writes ``tensors`` (name, array) to ``path`` (replacing it); returns
    its size. ``dtypes``: a tensor's safetensors dtype where its array's does
    not say it (BF16 bits in an int16 array). Raises ValueError (a dtype
    with no safetensors name, a name used twice or reserved); OSError (the
    file cannot be written)."""
    arrays, entries = [], []
    for name, value in tensors:
        array = np.ascontiguousarray(value)
        dtype = (dtypes or {}).get(name) or FROM_NUMPY.get(array.dtype)
        if dtype is None:
            raise ValueError(f"tensor '{name}': dtype {array.dtype} has no safetensors name")
        entries.append((name, dtype, array.shape, array.nbytes))
        arrays.append(array)
    header = encode_header(entries, metadata)
    with open(path, "wb") as f:
        f.write(header)
        for array in arrays:
            if array.nbytes:
                f.write(array.reshape(-1).view(np.uint8).data)
    return len(header) + sum(a.nbytes for a in arrays)


def layout(path: str):
    """(a read-only byte mapping of the whole file, data start, tensors by
    name, metadata) of a safetensors file. Raises ValueError (not a
    safetensors file, or a tensor outside it); OSError (it cannot be
    read)."""
    size = os.path.getsize(path)
    if size < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    (length,) = struct.unpack("<Q", bytes(data[:8]))
    if length > _MAX_HEADER or 8 + length > size:
        raise ValueError(f"{path}: a header of {length} bytes does not fit")
    try:
        base, header, metadata = decode_header(data[:8 + length])
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if not 0 <= begin <= end <= size - base:
            raise ValueError(f"{path}: tensor '{name}' lies outside the file")
    return data, base, header, metadata


def entries(path: str) -> List[Tuple[str, str, np.ndarray]]:
    """(name, safetensors dtype, read-only array over a mapping of the file)
    of each tensor, in the file's byte order. Raises as ``layout``, and
    ValueError for a dtype this package does not know."""
    data, base, header, _ = layout(path)
    out = []
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        if entry.get("dtype") not in TO_NUMPY:
            raise ValueError(f"{path}: tensor '{name}' has dtype {entry.get('dtype')!r}, which is not supported")
        out.append((name, entry["dtype"],
                    data[base + begin:base + end].view(TO_NUMPY[entry["dtype"]]).reshape(entry["shape"])))
    return out


def read(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file, as read-only numpy arrays over a
    mapping of it (no copy). Raises as ``entries``."""
    return {name: array for name, _, array in entries(path)}


def read_metadata(path: str) -> Dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when it has none).
    Raises as ``layout``."""
    return layout(path)[3]


def checkpoint_files(path: str) -> List[str]:
    """``path`` itself, or a directory's ``*.safetensors`` files in name
    order. Raises ValueError (a directory with none); OSError (it cannot be
    listed)."""
    if not os.path.isdir(path):
        return [path]
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{path} holds no .safetensors file")
    return files


def gather(path: str, metadata: Optional[Mapping[str, str]] = None):
    """One safetensors image of a checkpoint (a file, or a directory's
    files): (header bytes, runs, metadata). The image is the header, then
    each run's bytes, (mapped array, begin, end), laid end to end: a run
    per stretch of adjacent tensors of one file, so nothing is copied to
    build it. ``metadata`` is merged over the files' own. Raises as
    ``layout`` and ``checkpoint_files``, and ValueError for a tensor name in
    two files."""
    tensors, merged, mappings = [], {}, []
    for f in checkpoint_files(path):
        data, base, header, file_metadata = layout(f)
        mappings.append(data)
        merged.update(file_metadata)
        body = data[base:]
        for name, e in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            tensors.append((name, e["dtype"], e["shape"], e["data_offsets"][0], e["data_offsets"][1], body))
    merged.update(metadata or {})
    runs = []
    for name, dtype, shape, begin, end, body in tensors:
        if not runs or runs[-1][0] is not body or runs[-1][2] != begin:
            runs.append([body, begin, begin])
        runs[-1][2] = end
    header = encode_header([(t[0], t[1], t[2], t[4] - t[3]) for t in tensors], merged)
    return header, [tuple(r) for r in runs if r[2] > r[1]], merged
