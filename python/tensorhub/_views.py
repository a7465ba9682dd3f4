"""Views of fetched bytes as the caller's tensors, and the batches that
iter_tensors yields: shared by the in-process peer and the daemon client."""
from __future__ import annotations

import sys
import warnings
from typing import Iterable, Iterator, List, Tuple

import numpy as np


def torch_view(array: np.ndarray, dtype: str):
    """A torch tensor over the same memory as ``array``, of the manifest's
    ``dtype`` (BF16 as bfloat16; torch has no unsigned 16/32/64-bit types,
    so those come as the signed type of the same bits). A read-only array
    (a mapped file) gives a tensor that must not be written."""
    torch = sys.modules["torch"]
    signed = {np.dtype(np.uint16): np.int16, np.dtype(np.uint32): np.int32, np.dtype(np.uint64): np.int64}
    view = signed.get(array.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns of read-only memory; it is left unwritten
        tensor = torch.from_numpy(array.view(view) if view is not None else array)
    if dtype == "BF16":
        tensor = tensor.view(torch.bfloat16)
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
