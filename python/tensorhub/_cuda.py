"""CUDA tensors as a fetch's destination: which GPU they are on (by UUID,
as the peer names GPUs) and device memory for the bytes the caller gave no
tensor for. Only the in-process peer fetches into GPU memory."""
from __future__ import annotations

import re

_UUID = re.compile(r"^(GPU-)?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")


def gpu_uuid(properties) -> str:
    """"GPU-<uuid>" of a torch.cuda device's properties (torch prints the
    UUID with or without the prefix, by version)."""
    text = str(getattr(properties, "uuid", ""))
    match = _UUID.match(text)
    if match is None:
        raise ValueError(f"this torch gives no GPU UUID for {getattr(properties, 'name', 'the device')!r} ({text!r})")
    return "GPU-" + match.group(2).lower()


def device_of(tensors) -> "object":
    """The one CUDA device of ``tensors``; raises ValueError when they are
    on several devices or some are not on a GPU."""
    tensors = list(tensors)
    places = {(t.device.type, t.device.index) for t in tensors}
    if len(places) != 1 or next(iter(places))[0] != "cuda":
        named = sorted(f"{kind}:{index}" if index is not None else kind for kind, index in places)
        raise ValueError(f"the tensors of one fetch into GPU memory must all be on one GPU, not on {named}")
    return tensors[0].device


def uuid_of(gpu) -> str:
    """The UUID of ``gpu``: a UUID already ("GPU-..." or bare), or a torch
    device ("cuda:1", 1, torch.device) asked of torch."""
    if isinstance(gpu, str):
        match = _UUID.match(gpu)
        if match is not None:
            return "GPU-" + match.group(2).lower()
    try:
        import torch
    except ImportError:
        raise ValueError(f"{gpu!r} is not a GPU UUID, and without torch no other name of a GPU is known") from None
    try:
        device = torch.device("cuda", gpu) if isinstance(gpu, int) else torch.device(gpu)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{gpu!r} is neither a GPU UUID nor a torch CUDA device: {e}") from None
    if device.type != "cuda":
        raise ValueError(f"{gpu!r} is not a CUDA device")
    return gpu_uuid(torch.cuda.get_device_properties(device.index or 0))


class _CudaBytes:
    """``nbytes`` bytes of GPU memory at ``address`` as torch sees foreign
    memory (the CUDA array interface); holds ``owner`` while a tensor over
    it lives."""

    def __init__(self, address: int, nbytes: int, owner):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}


def tensors_over(address: int, nbytes: int, table, owner) -> dict:
    """Torch tensors over the GPU memory at ``address`` (no copy): one per
    (name, dtype, shape, offset, length) of ``table``, of the manifest's
    dtype where this torch has it (as _views.torch_view)."""
    import torch

    from ._views import torch_dtypes

    whole = torch.as_tensor(_CudaBytes(address, nbytes, owner), device="cuda")
    native = {name: t for t, name in torch_dtypes(torch).items()}
    out = {}
    for name, dtype, shape, offset, length in table:
        piece = whole[offset:offset + length]
        kind = native.get(dtype)
        if kind is not None and length > 0:
            piece = piece.view(kind)
        out[name] = piece.reshape(shape) if kind is not None else piece
    return out
