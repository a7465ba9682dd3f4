"""``tensorhub.Slice``: a trainer rank's tensor that covers a rectangular
slice of a larger (global) tensor, for ``Peer.publish(..., part=(rank,
world))``. Private module; the class is the package's."""
from __future__ import annotations

from typing import List, Sequence, Tuple

from ._errors import Error


class Slice:
    """``tensor`` (a numpy array or torch tensor) holds ``index`` of a
    tensor of ``global_shape``: ``index`` is a tuple of Python ``slice``s,
    one per dimension, as torch indexes the global tensor (``slice(None)``
    for a whole dimension; steps other than 1 are refused). An FSDP dim-0
    shard of rows ``[a, b)`` is ``Slice(shard, full_shape, (slice(a, b),
    slice(None)))``; a tensor-parallel column block is ``(slice(None),
    slice(c, d))``. A DTensor or FSDP shard: pass its local tensor and the
    slice its placement gives (``tensorhub.Slice(t.to_local(), t.shape,
    index)``), since only the caller knows its mesh.

    Raises Error (invalid_argument) at once for an index that does not fit
    ``global_shape`` or the tensor's shape."""

    def __init__(self, tensor, global_shape: Sequence[int], index: Tuple[slice, ...]):
        self.tensor = tensor
        self.global_shape = [int(d) for d in global_shape]
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) != len(self.global_shape):
            raise Error(f"invalid argument: Slice: {len(index)} slices for a tensor of {len(self.global_shape)} "
                        "dimensions (one per dimension, slice(None) for a whole one)")
        self.begin: List[int] = []
        self.shape: List[int] = []
        for dim, (s, extent) in enumerate(zip(index, self.global_shape)):
            if not isinstance(s, slice):
                raise Error(f"invalid argument: Slice: dimension {dim}: {s!r} is not a slice")
            start, stop, step = s.indices(extent)
            if step != 1 or stop <= start:
                raise Error(f"invalid argument: Slice: dimension {dim}: {s!r} of {extent} is not a non-empty range "
                            "with step 1")
            self.begin.append(start)
            self.shape.append(stop - start)

    def __repr__(self) -> str:
        ranges = ", ".join(f"{b}:{b + n}" for b, n in zip(self.begin, self.shape))
        return f"tensorhub.Slice([{ranges}] of {self.global_shape})"
