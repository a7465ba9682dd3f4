"""Views of fetched bytes as the caller's tensors, and the batches that
iter_tensors yields: shared by the in-process peer and the daemon client."""
from __future__ import annotations

import sys
import warnings
from typing import Iterable, Iterator, List, Tuple

import numpy as np


def torch_dtypes(torch) -> dict:
    """torch dtype -> safetensors name, for the dtypes this torch has (the
    F8 types from torch 2.1, the unsigned 16/32/64-bit ones from 2.3)."""
    table = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int32: "I32", torch.float32: "F32", torch.int64: "I64",
             torch.float64: "F64"}
    optional = {"float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
                "uint16": "U16", "uint32": "U32", "uint64": "U64"}
    for attribute, name in optional.items():
        if isinstance(getattr(torch, attribute, None), torch.dtype):
            table[getattr(torch, attribute)] = name
    return table


def torch_view(array: np.ndarray, dtype: str):
    """A torch tensor over the same memory as ``array``, of the manifest's
    ``dtype`` where this torch has it (BF16 as bfloat16, F8_E4M3 as
    float8_e4m3fn, ...); where it has not (F8 before torch 2.1, unsigned
    16/32/64-bit before 2.3), the same bits as uint8 or the signed type of
    their size. A read-only array (a mapped file) gives a tensor that must
    not be written."""
    torch = sys.modules["torch"]
    signed = {np.dtype(np.uint16): np.int16, np.dtype(np.uint32): np.int32, np.dtype(np.uint64): np.int64}
    view = signed.get(array.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns of read-only memory; it is left unwritten
        tensor = torch.from_numpy(array.view(view) if view is not None else array)
    native = {name: t for t, name in torch_dtypes(torch).items()}.get(dtype)
    if native is not None and native != tensor.dtype:
        tensor = tensor.view(native)
    return tensor


def batches(items: Iterable[Tuple[str, object, int]], batch_bytes: int) -> Iterator[List[Tuple[str, object]]]:
    """Lists of (name, tensor) from (name, tensor, nbytes), in order, each
    of up to ``batch_bytes`` (one tensor at least)."""
    batch, size = [], 0
    for name, tensor, nbytes in items:
        if batch and size + nbytes > batch_bytes:
            yield batch
            batch, size = [], 0
        batch.append((name, tensor))
        size += nbytes
    if batch:
        yield batch


def moved(batches_: Iterable[List[Tuple[str, object]]], device) -> Iterator[List[Tuple[str, object]]]:
    """The batches with each tensor on torch device ``device`` (a copy for
    tensors elsewhere; those already there are themselves). ``device``
    None: the batches as they are."""
    for batch in batches_:
        yield batch if device is None else [(name, tensor.to(device)) for name, tensor in batch]


def check_device(kind: str, device) -> None:
    """Raises ValueError unless ``device`` (None, or a torch device or its
    name) can receive tensors of ``kind``."""
    if device is None:
        return
    if kind != "torch":
        raise ValueError("device= needs kind='torch'")
    torch = sys.modules.get("torch")
    if torch is None:
        raise ValueError("device= needs torch")
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {target}: torch sees no CUDA GPU here")
