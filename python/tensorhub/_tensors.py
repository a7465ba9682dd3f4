"""What a tensor given to the package is: its safetensors dtype, its bytes in
host memory, a cast, a torch tensor recognised without importing torch.
Private; shared by the in-process peer (``__init__``) and the daemon's client
(``daemon``) and by ``safetensors``. Every refusal is an ``Error`` with code
``invalid_argument``."""
from __future__ import annotations

import sys
from typing import Tuple

import numpy as np

from ._errors import Error
from ._views import check_device as _check_device, torch_dtypes

# safetensors dtype names (the manifest's) <-> numpy dtypes. BF16 and the F8
# types have no numpy dtype: they travel as raw bytes and come back as uint16
# or uint8 views of the same bytes.
TO_NUMPY = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "F16": np.float16, "U32": np.uint32, "I32": np.int32, "F32": np.float32,
    "U64": np.uint64, "I64": np.int64, "F64": np.float64,
    "BF16": np.uint16, "F8_E5M2": np.uint8, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
}
FROM_NUMPY = {np.dtype(v): k for k, v in TO_NUMPY.items() if k not in ("BF16", "F8_E5M2", "F8_E4M3", "F8_E8M0")}


def address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def torch_module():
    """torch, when the caller's process has it (never imported otherwise)."""
    return sys.modules.get("torch")


def is_torch_tensor(value) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(value, torch.Tensor)


def as_publishable(name: str, value, on_gpu: bool = False):
    """(object that owns the memory, address, nbytes, safetensors dtype,
    shape). ``on_gpu``: a CUDA tensor stays where it is (else it is copied
    to the host once). Raises Error (invalid_argument): a dtype with no
    safetensors name."""
    if is_torch_tensor(value):
        torch = torch_module()
        tensor = value.detach()
        if tensor.device.type != "cpu" and not on_gpu:
            tensor = tensor.to("cpu")  # a host copy, made once
        dtype = torch_dtypes(torch).get(tensor.dtype)
        if dtype is None:
            raise Error(f"invalid argument: tensor '{name}': dtype {tensor.dtype} has no safetensors name")
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()  # packed once; the copy is kept with the handle
        return tensor, tensor.data_ptr(), tensor.element_size() * tensor.numel(), dtype, list(tensor.shape)
    array = np.asarray(value)
    dtype = FROM_NUMPY.get(array.dtype)
    if dtype is None:
        raise Error(f"invalid argument: tensor '{name}': dtype {array.dtype} has no safetensors name")
    if not array.flags["C_CONTIGUOUS"]:
        array = np.ascontiguousarray(array)  # packed once; the copy is kept with the handle
    return array, address(array), array.nbytes, dtype, [int(d) for d in array.shape]


def host_array(name: str, value) -> Tuple[np.ndarray, str]:
    """(a numpy array of ``value``'s bytes and shape in host memory, its
    safetensors dtype): bf16, f8 and unsigned torch tensors come as integer
    arrays of their bits; other devices' tensors are copied to the host.
    Raises Error (invalid_argument): a dtype with no safetensors name."""
    if is_torch_tensor(value):
        torch = torch_module()
        tensor = value.detach().to("cpu").contiguous()
        dtype = torch_dtypes(torch).get(tensor.dtype)
        if dtype is None:
            raise Error(f"invalid argument: tensor '{name}': dtype {tensor.dtype} has no safetensors name")
        if dtype not in FROM_NUMPY.values():  # bf16, f8, torch's unsigned types: the same bits as integers
            tensor = tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])
        return tensor.numpy(), dtype
    array = np.asarray(value)
    dtype = FROM_NUMPY.get(array.dtype)
    if dtype is None:
        raise Error(f"invalid argument: tensor '{name}': dtype {array.dtype} has no safetensors name")
    return array, dtype


def check_kind(kind: str) -> None:
    """Raises Error (invalid_argument) unless ``kind`` is "numpy", or
    "torch" in a process that imported torch."""
    if kind not in ("numpy", "torch"):
        raise Error(f"invalid argument: kind: 'numpy' or 'torch', not {kind!r}")
    if kind == "torch" and torch_module() is None:
        raise Error("invalid argument: kind='torch': import torch first")


def check_device(kind: str, device) -> None:
    """Raises Error (invalid_argument) unless ``device`` (None, or a torch
    device or its name) can receive tensors of ``kind``."""
    try:
        _check_device(kind, device)
    except ValueError as e:
        raise Error(f"invalid argument: {e}") from None


def cast(name: str, value, dtype):
    """``value`` as ``dtype`` when it is floating point; as it is otherwise.
    Raises Error (invalid_argument): ``dtype`` is not a dtype of the
    tensor's kind."""
    if is_torch_tensor(value):
        torch = torch_module()
        if not isinstance(dtype, torch.dtype):
            raise Error(f"invalid argument: dtype: a torch dtype is needed for torch tensor '{name}', not {dtype!r}")
        return value.to(dtype) if value.is_floating_point() else value
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.floating):
        return array
    try:
        return array.astype(np.dtype(dtype))
    except TypeError:
        raise Error(f"invalid argument: dtype: {dtype!r} is not a numpy dtype (tensor '{name}')") from None
