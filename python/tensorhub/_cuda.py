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
