"""The handles a peer gives back: a version it publishes (``Published``)
and a fetch into arrays (``Fetched``) or into a file (``FetchedFile``).
Private: the public names are ``tensorhub``'s."""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ._errors import Error, check_timeout
from ._errors import native_timeout as _native_timeout
from ._releasable import Releasable
from ._results import FetchProgress, VersionInfo
from ._tensors import TO_NUMPY as _TO_NUMPY
from ._tensors import check_device as _check_device
from ._tensors import check_kind as _check_kind
from ._tensors import is_torch_tensor as _is_torch_tensor
from ._views import batches, moved, torch_view


class Published(Releasable):
    """A version this peer published: ``model``, ``version``,
    ``manifest_id``, ``nbytes``, ``metadata`` (its safetensors
    ``__metadata__``). It is served while the handle lives; ``release()``
    (or leaving a ``with`` block) stops serving it and lets the arrays go:
    it waits for the pieces being sent and, for the model's head, for
    retention (``retain_head_replicas``, at most ``max_release_deferral``),
    without the GIL. ``release()`` raises nothing; a second call does
    nothing. The properties raise nothing, and stay readable after the
    release."""

    def __init__(self, native, metadata: dict, model: str = ""):
        self._native = native  # holds the arrays it serves from until it is released
        self.metadata = metadata  # the version's safetensors __metadata__
        self.model = model

    @property
    def version(self) -> int:
        return self._native.version

    @property
    def manifest_id(self) -> str:
        return self._native.manifest_id

    @property
    def nbytes(self) -> int:
        return self._native.nbytes

    @property
    def info(self) -> VersionInfo:
        """The version as ``VersionInfo``."""
        return VersionInfo(self.model, self.version, self.manifest_id, self.nbytes)

    def wait_replicated(self, replicas: int, timeout: Optional[float] = None) -> None:
        """Waits (without the GIL) until ``replicas`` other peers hold the
        version and proved it, at most ``timeout`` seconds (None: no limit).
        Raises Error: ``timeout`` (saying how many hold it), ``cancelled``
        (released, or the peer stopped); TypeError when ``replicas`` is not
        a non-negative int; ``tensorhub.Error`` (``invalid_argument``, also
        a TypeError) for a ``timeout`` that is not a number of seconds."""
        self._native.wait_replicated(replicas, _native_timeout(timeout, "wait_replicated"))

    def wait_sealed(self, timeout: Optional[float] = None) -> None:
        """For a part (``Peer.publish(..., part=(rank, world))``): waits
        (without the GIL) until a seal makes its version, and so this part,
        visible; returns at once for a whole version. Raises Error:
        ``timeout`` (naming the ranks' parts that have not come, as ``part
        2 of 4``), ``verify_failed`` (the parts overlap or leave elements
        out, the tensor named; or a part was signed twice),
        ``already_exists`` (another version took the number), ``cancelled``
        (the peer stopped)."""
        self._native.wait_sealed(_native_timeout(timeout, "wait_sealed"))

    def _release(self) -> None:
        self._native.release()


class _Fetch(Releasable):
    """What every fetch handle shares: the version (``info``, ``model``,
    ``version``, ``manifest_id``, ``nbytes``), its progress, the wait for
    its outcome, and the release (which waits, without the GIL, for the
    pieces being sent from it and for retention, as ``Published``'s, and
    raises nothing). The properties raise nothing, and stay readable after
    the release."""

    @property
    def info(self) -> VersionInfo:
        return VersionInfo._from_native(self._native.info)

    @property
    def model(self) -> str:
        return self._native.info["model"]

    @property
    def version(self) -> int:
        return self._native.info["version"]

    @property
    def manifest_id(self) -> str:
        return self._native.info["manifest_id"]

    @property
    def nbytes(self) -> int:
        return self._native.info["nbytes"]

    def progress(self) -> FetchProgress:
        """How far the fetch has come (``FetchProgress``: attributes, or
        read as a dict). Raises nothing."""
        return FetchProgress._from_native(self._native.progress())

    def wait(self, timeout: Optional[float] = None):
        """Returns the handle once every byte is verified, waiting (without
        the GIL) at most ``timeout`` seconds (None: no limit). Raises Error:
        ``timeout`` (the fetch goes on), ``unavailable`` (no holder could
        finish it), ``cancelled`` (released), and for a file ``io_error``
        (the rename failed); ``invalid_argument`` (also a TypeError) for a
        ``timeout`` that is not a number of seconds."""
        self._native.wait(_native_timeout(timeout, "wait"))
        return self

    def _release(self) -> None:
        self._native.release()


class Fetched(_Fetch):
    """A version being fetched. ``wait()`` raises unless every byte verified;
    ``state_dict()`` then gives the tensors as numpy arrays (views of the
    fetched memory, no copy)."""

    def __init__(self, native, buffer: Optional[np.ndarray], arrays: Optional[dict] = None,
                 lead: Optional[np.ndarray] = None, assembled: bool = False):
        self._native = native  # holds the memory it writes into until it is released
        self._buffer = buffer  # the whole version, when it lands in one buffer
        self._arrays = arrays  # else each tensor's array
        # The bytes before the first tensor lie at its start (a selection has none).
        self._lead = None if assembled else lead if buffer is None else buffer

    @property
    def tensors(self):
        """(name, dtype, shape, byte offset, byte length) of each tensor.
        Raises nothing."""
        return self._native.tensors

    def iter_tensors(self, names=None, batch_bytes: int = 64 << 20, kind: str = "numpy",
                     timeout: Optional[float] = None, order: str = "layer", device=None):
        """Yields lists of (name, tensor) as soon as every byte of each is
        verified, so loading overlaps the transfer; each list holds up to
        ``batch_bytes`` (one tensor at least). ``order="layer"``: in the
        version's order (a state_dict's: layer order), so a tensor waits for
        those before it; ``order="verified"``: whichever tensors are
        complete, lowest offset first, which yields sooner (the swarm fetches
        shards rarest first, not in order; a loader whose load_weights takes
        tensors in any order wants this). ``names``: only these. ``device``
        (with ``kind="torch"``): each tensor on that torch device, copied
        there as its batch is yielded (a fetch into that GPU's memory
        yields its own tensors). A tensor of a version published in parts,
        or of a selection, is ready once the shards of each part that hold
        its bytes are verified. ``timeout``: seconds to wait for each next
        tensor (None: no limit). Nothing unverified is ever yielded. Raises
        (a generator: from the first ``next()`` on) Error: the fetch's own
        error when it fails (``unavailable``, ``cancelled``, ...);
        ``timeout`` (the next tensor was not verified in time; the fetch
        goes on); ``invalid_argument`` (a ``kind``, ``order``, ``device`` or
        ``timeout`` that is not one)."""
        _check_kind(kind)
        _check_device(kind, device)
        check_timeout(timeout, "iter_tensors")
        yield from moved(self._verified_batches(names, batch_bytes, kind, timeout, order), device)

    def _verified_batches(self, names, batch_bytes, kind, timeout, order):
        if order not in ("layer", "verified"):
            raise Error(f"invalid argument: order: 'layer' or 'verified', not {order!r}")
        wanted = None if names is None else set(names)
        tensors = self._native.tensors
        position = {t[0]: i for i, t in enumerate(tensors)}  # the order of verified_tensors()
        pending = [t for t in sorted(tensors, key=lambda t: t[3]) if wanted is None or t[0] in wanted]
        deadline = None if timeout is None else time.monotonic() + timeout
        views = None
        while pending:
            # Read before the flags: a shard verified after this wakes the wait below.
            seen = self._native.progress()["shards_verified"]
            flags = self._native.verified_tensors()
            if not flags:  # released meanwhile: nothing in the buffer is the version's any more
                raise Error("cancelled: the fetch was released while its tensors were read", "cancelled")
            ready, waiting = [], []
            for t in pending:
                complete = not t[4] or flags[position[t[0]]]
                if complete and (order == "verified" or not waiting):
                    ready.append(t)
                else:
                    waiting.append(t)
            if not ready:
                if self._native.progress()["done"]:
                    self._native.wait(0)  # raises why the fetch failed
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Error("timeout: the next tensor was not verified in time")
                self._native.wait_progress(seen, remaining)  # the next shard, without the GIL
                continue
            if views is None:
                views = self._views(kind)
            yield from batches(((name, views[name], length) for name, _, _, _, length in ready), batch_bytes)
            pending = waiting

    def _views(self, kind: str) -> dict:
        """Every tensor over the destination, verified or not (private)."""
        out = {}
        for name, dtype, shape, offset, length in self._native.tensors:
            if self._arrays is not None:
                value = self._arrays[name]
            else:
                value = self._buffer[offset:offset + length].view(_TO_NUMPY[dtype]).reshape(shape)
            if kind == "torch" and isinstance(value, np.ndarray):
                value = torch_view(value, dtype)
            out[name] = value
        return out

    @property
    def metadata(self) -> dict:
        """The version's safetensors ``__metadata__`` (str -> str; {} for a
        version without a header, as the C++ API may publish one).
        REQUIRES: wait() returned. Raises Error: ``invalid_argument`` (the
        fetch has not finished), the fetch's own error when it failed,
        ``cancelled`` (released)."""
        self._check_verified()
        from . import safetensors

        tensors = self._native.tensors
        start = min((t[3] for t in tensors), default=self._native.info["nbytes"])
        lead = self._lead
        if _is_torch_tensor(lead):  # a fetch into GPU memory: the header is read back
            lead = lead[:start].cpu().numpy() if lead.nbytes >= start else None
        if lead is None or start < 8 or lead.nbytes < start:
            return {}
        try:
            base, _, metadata = safetensors.decode_header(lead[:start])
        except ValueError:
            return {}
        return metadata if base == start else {}

    def state_dict(self, kind: str = "numpy") -> dict:
        """Every tensor over the fetched bytes (no copy): numpy arrays, or
        with ``kind="torch"`` torch tensors (BF16 as bfloat16). Tensors that
        landed in the caller's own arrays or tensors are those; after a fetch
        into CUDA tensors every tensor is a CUDA tensor, whatever ``kind``. REQUIRES:
        wait() returned without an error (a view of unverified bytes is never
        handed out). Raises Error: ``invalid_argument`` (the fetch has not
        finished, or a ``kind`` that is not one), the fetch's own error when
        it failed, ``cancelled`` (released)."""
        _check_kind(kind)
        self._check_verified()
        return self._views(kind)

    def _check_verified(self) -> None:
        """Raises unless every byte is verified: the fetch's own error when
        it failed (its bytes are never handed out), else that it is not done."""
        if not self._native.progress()["done"]:
            raise Error("invalid argument: the fetch has not finished: wait() first")
        self._native.wait(0)


class FetchedFile(_Fetch):
    """A version being fetched into a file. The blocks are written into a
    temporary file beside ``path`` as they arrive; the first ``wait()``
    that finds every byte verified renames it to ``path`` and returns.
    The peer serves the version from the file until the handle is
    released. A failed fetch, or a release before the rename, leaves
    ``path`` as it was and removes the temporary file. It has ``Fetched``'s
    ``info``, ``version``, ``progress()``, ``wait(timeout)`` and ``release()``,
    which raise as there (``wait()`` after a release: Error ``cancelled``,
    unless the file was put in place before it)."""

    def __init__(self, native, path: str):
        self._native = native
        self.path = path
