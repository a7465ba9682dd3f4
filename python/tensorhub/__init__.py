"""TensorHub for Python: publish tensors where they are, fetch them into yours.

An in-process peer (``Peer.start``) joins a swarm over gossip and moves
versions of a model's weights between peers. Memory crosses into the C++ peer
as (address, nbytes) pairs taken from numpy arrays or CPU torch tensors, so
publishing a dict of contiguous tensors copies nothing, and a fetch lands its
blocks straight in the arrays it returns or is given. torch is never
imported here: tensors are recognised when the caller has imported it.

What this package does not do yet is listed in docs/python.md.
"""
from __future__ import annotations

import os
import time
from typing import Iterable, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native
from ._releasable import Releasable
from ._views import batches, check_device, moved, torch_dtypes, torch_view

__all__ = ["Error", "Peer", "Published", "Fetched", "FetchedFile", "connect", "generate_swarm_key"]


class Error(RuntimeError):
    """A TensorHub failure, with the one-line reason the peer gives.
    ``code`` names the kind: invalid_argument, corrupt, verify_failed,
    not_found, already_exists, permission_denied, io_error, unavailable,
    timeout, cancelled, internal or resource_exhausted (a limit of the
    peer would be crossed; the message names it)."""

    code = "internal"
    CODES = ("invalid_argument", "corrupt", "verify_failed", "not_found", "already_exists", "permission_denied",
             "io_error", "unavailable", "timeout", "cancelled", "internal", "resource_exhausted")

    # The message's prefix as the C++ side writes it (status_code_name).
    _PREFIXES = {"invalid argument": "invalid_argument", "corrupt": "corrupt",
                 "verification failed": "verify_failed", "not found": "not_found",
                 "already exists": "already_exists", "permission denied": "permission_denied",
                 "I/O error": "io_error", "unavailable": "unavailable", "timeout": "timeout",
                 "cancelled": "cancelled", "internal error": "internal", "resource exhausted": "resource_exhausted"}

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        if code not in self.CODES:  # none, or one this version does not know: "timeout: ..." is a timeout
            prefix = message.split(":", 1)[0].strip() if ":" in message else ""
            code = self._PREFIXES.get(prefix, prefix.replace(" ", "_") if prefix.replace(" ", "_") in self.CODES
                                      else "internal")
        self.code = code


_native._set_error_type(Error)

# safetensors dtype names (the manifest's) <-> numpy dtypes. BF16 and the F8
# types have no numpy dtype: they travel as raw bytes and come back as uint16
# or uint8 views of the same bytes.
_TO_NUMPY = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "F16": np.float16, "U32": np.uint32, "I32": np.int32, "F32": np.float32,
    "U64": np.uint64, "I64": np.int64, "F64": np.float64,
    "BF16": np.uint16, "F8_E5M2": np.uint8, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
}
_FROM_NUMPY = {np.dtype(v): k for k, v in _TO_NUMPY.items() if k not in ("BF16", "F8_E5M2", "F8_E4M3", "F8_E8M0")}


def generate_swarm_key() -> bytes:
    """32 random bytes: a new swarm key (every member must hold the same)."""
    return os.urandom(32)


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _torch():
    """torch, when the caller's process has it (never imported otherwise)."""
    import sys

    return sys.modules.get("torch")


def _is_torch_tensor(value) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _as_publishable(name: str, value, on_gpu: bool = False):
    """(object that owns the memory, address, nbytes, safetensors dtype,
    shape). ``on_gpu``: a CUDA tensor stays where it is (else it is copied
    to the host once)."""
    if _is_torch_tensor(value):
        torch = _torch()
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
    dtype = _FROM_NUMPY.get(array.dtype)
    if dtype is None:
        raise Error(f"invalid argument: tensor '{name}': dtype {array.dtype} has no safetensors name")
    if not array.flags["C_CONTIGUOUS"]:
        array = np.ascontiguousarray(array)  # packed once; the copy is kept with the handle
    return array, _address(array), array.nbytes, dtype, [int(d) for d in array.shape]


def _host_array(name: str, value) -> Tuple[np.ndarray, str]:
    """(a numpy array of ``value``'s bytes and shape in host memory, its
    safetensors dtype): bf16, f8 and unsigned torch tensors come as integer
    arrays of their bits; other devices' tensors are copied to the host."""
    if _is_torch_tensor(value):
        torch = _torch()
        tensor = value.detach().to("cpu").contiguous()
        dtype = torch_dtypes(torch).get(tensor.dtype)
        if dtype is None:
            raise Error(f"invalid argument: tensor '{name}': dtype {tensor.dtype} has no safetensors name")
        if dtype not in _FROM_NUMPY.values():  # bf16, f8, torch's unsigned types: the same bits as integers
            tensor = tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])
        return tensor.numpy(), dtype
    array = np.asarray(value)
    dtype = _FROM_NUMPY.get(array.dtype)
    if dtype is None:
        raise Error(f"invalid argument: tensor '{name}': dtype {array.dtype} has no safetensors name")
    return array, dtype


def _check_kind(kind: str) -> None:
    if kind not in ("numpy", "torch"):
        raise Error(f"invalid argument: kind: 'numpy' or 'torch', not {kind!r}")
    if kind == "torch" and _torch() is None:
        raise Error("invalid argument: kind='torch': import torch first")


def _cast(name: str, value, dtype):
    """``value`` as ``dtype`` when it is floating point; as it is otherwise."""
    if _is_torch_tensor(value):
        torch = _torch()
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


class Published(Releasable):
    """A version this peer published. It is served while the handle lives;
    ``release()`` (or leaving a ``with`` block) stops serving it and lets the
    arrays go."""

    def __init__(self, native, metadata: dict):
        self._native = native  # holds the arrays it serves from until it is released
        self.metadata = metadata  # the version's safetensors __metadata__

    @property
    def version(self) -> int:
        return self._native.version

    @property
    def manifest_id(self) -> str:
        return self._native.manifest_id

    @property
    def nbytes(self) -> int:
        return self._native.nbytes

    def wait_replicated(self, replicas: int, timeout: Optional[float] = None) -> None:
        """Waits until ``replicas`` other peers hold the version and proved it."""
        self._native.wait_replicated(replicas, timeout)

    def _release(self) -> None:
        self._native.release()


class _Fetch(Releasable):
    """What every fetch handle shares: the version, its progress, the wait
    for its outcome, and the release."""

    @property
    def version(self) -> int:
        return self._native.info["version"]

    @property
    def manifest_id(self) -> str:
        return self._native.info["manifest_id"]

    @property
    def nbytes(self) -> int:
        return self._native.info["nbytes"]

    def progress(self) -> dict:
        return self._native.progress()

    def wait(self, timeout: Optional[float] = None):
        """Returns the handle once every byte is verified. Raises Error:
        ``timeout`` (the fetch goes on), ``unavailable`` (no holder could
        finish it), ``cancelled`` (released), and for a
        file ``io_error`` (the rename failed)."""
        self._native.wait(timeout)
        return self

    def _release(self) -> None:
        self._native.release()


class Fetched(_Fetch):
    """A version being fetched. ``wait()`` raises unless every byte verified;
    ``state_dict()`` then gives the tensors as numpy arrays (views of the
    fetched memory, no copy)."""

    def __init__(self, native, buffer: Optional[np.ndarray], arrays: Optional[dict] = None,
                 lead: Optional[np.ndarray] = None):
        self._native = native  # holds the memory it writes into until it is released
        self._buffer = buffer  # the whole version, when it lands in one buffer
        self._arrays = arrays  # else each tensor's array
        self._lead = lead if buffer is None else buffer  # the bytes before the first tensor lie at its start

    @property
    def tensors(self):
        """(name, dtype, shape, byte offset, byte length) of each tensor."""
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
        yields its own tensors). Raises the fetch's error if it fails;
        nothing unverified is ever yielded."""
        _check_kind(kind)
        try:
            check_device(kind, device)
        except ValueError as e:
            raise Error(f"invalid argument: {e}") from None
        yield from moved(self._verified_batches(names, batch_bytes, kind, timeout, order), device)

    def _verified_batches(self, names, batch_bytes, kind, timeout, order):
        if order not in ("layer", "verified"):
            raise Error(f"invalid argument: order: 'layer' or 'verified', not {order!r}")
        wanted = None if names is None else set(names)
        pending = [t for t in sorted(self._native.tensors, key=lambda t: t[3]) if wanted is None or t[0] in wanted]
        shard = self._native.shard_size
        deadline = None if timeout is None else time.monotonic() + timeout
        views = None
        while pending:
            flags = self._native.verified_shards()
            ready, waiting = [], []
            for t in pending:
                offset, length = t[3], t[4]
                first, last = offset // shard, (offset + max(length, 1) - 1) // shard
                complete = not length or all(flags[first:last + 1])
                if complete and (order == "verified" or not waiting):
                    ready.append(t)
                else:
                    waiting.append(t)
            if not ready:
                if self._native.progress()["done"]:
                    self._native.wait(0)  # raises why the fetch failed
                if deadline is not None and time.monotonic() >= deadline:
                    raise Error("timeout: the next tensor was not verified in time")
                time.sleep(0.005)
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
        REQUIRES: wait() returned."""
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
        handed out: after a failed fetch this raises its error)."""
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
    ``path`` as it was and removes the temporary file."""

    def __init__(self, native, path: str):
        self._native = native
        self.path = path


def _bad_option(name, wanted, value):
    return Error(f"invalid argument: {name} must be {wanted}, not {type(value).__name__} {value!r}"[:300],
                 "invalid_argument")


def _str_option(name, value, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _bad_option(name, "a str", value)
    return value


def _strs_option(name, value):
    # A str is iterable too: "a:b" would be read a character at a time.
    if isinstance(value, (str, bytes)):
        raise _bad_option(name, "a list of str (one string is not a list)", value)
    try:
        items = list(value)
    except TypeError:
        raise _bad_option(name, "a list of str", value) from None
    for item in items:
        if not isinstance(item, str):
            raise _bad_option(name, "a list of str", item)
    return items


def _int_option(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_option(name, "an int", value)
    if value < 0 or value >= 1 << 63:
        raise Error(f"invalid argument: {name} must be a non-negative int, not {value}", "invalid_argument")
    return value


def _bool_option(name, value):
    if not isinstance(value, bool):
        raise _bad_option(name, "True or False", value)
    return value


class Peer:
    """An in-process TensorHub peer: ``Peer.start(listen=..., seeds=[...],
    swarm_key=...)``. Waiting calls release the GIL."""

    def __init__(self, native):
        self._native = native

    @classmethod
    def start(cls, *, listen: str = "127.0.0.1:0", data_listen: Optional[str] = None,
              advertise: Optional[str] = None, seeds: Iterable[str] = (), key_file: Optional[str] = None,
              swarm_key: Optional[bytes] = None, swarm_key_file: Optional[str] = None,
              trusted_publishers: Iterable[str] = (), members: Iterable[str] = (), dc: str = "", rack: str = "",
              host: str = "", shard_size: Optional[int] = None, block_size: Optional[int] = None,
              retain_head_replicas: Optional[int] = None, rdma: bool = True, rdma_queue_pairs: int = 2,
              mirror_gpu_versions: bool = True, max_neighbours: Optional[int] = None,
              upload_slots: Optional[int] = None, data_lanes: Optional[int] = None,
              shard_hash: Optional[str] = None, require_secure_hash: bool = False,
              max_release_deferral: Optional[float] = None, super_seed: bool = True) -> "Peer":
        """Every option of the C++ ``PeerOptions`` (include/tensorhub/peer.hpp),
        by the same name; ``None`` keeps its default. ``rdma``: move block
        payloads by RDMA READ where this machine has an RDMA device with an
        active port (``False``: TCP only); ``rdma_queue_pairs``: per local NIC
        to each neighbour, 1 to 16; ``mirror_gpu_versions``: serve versions in
        GPU memory over TCP from a host copy rather than a copy per piece;
        ``shard_hash``: ``"xxh3-128"`` or ``"blake2b-256"`` (secure mode) for
        what this peer publishes; ``max_release_deferral``: seconds
        (docs/python.md). Raises ``Error`` (``invalid_argument``) naming an
        option of the wrong type or out of range."""
        options = {
            "listen": _str_option("listen", listen), "data_listen": _str_option("data_listen", data_listen, True),
            "advertise": _str_option("advertise", advertise, True), "seeds": _strs_option("seeds", seeds),
            "trusted_publishers": _strs_option("trusted_publishers", trusted_publishers),
            "members": _strs_option("members", members),
            "dc": _str_option("dc", dc), "rack": _str_option("rack", rack), "host": _str_option("host", host),
            "shard_size": _int_option("shard_size", shard_size), "block_size": _int_option("block_size", block_size),
            "retain_head_replicas": _int_option("retain_head_replicas", retain_head_replicas),
            "rdma": _bool_option("rdma", rdma), "rdma_queue_pairs": _int_option("rdma_queue_pairs", rdma_queue_pairs),
            "mirror_gpu_versions": _bool_option("mirror_gpu_versions", mirror_gpu_versions),
            "max_neighbours": _int_option("max_neighbours", max_neighbours),
            "upload_slots": _int_option("upload_slots", upload_slots),
            "data_lanes": _int_option("data_lanes", data_lanes),
            "require_secure_hash": _bool_option("require_secure_hash", require_secure_hash),
            "super_seed": _bool_option("super_seed", super_seed),
        }
        if shard_hash is not None:
            if shard_hash not in ("xxh3-128", "blake2b-256"):
                raise Error(f"invalid argument: shard_hash must be 'xxh3-128' or 'blake2b-256', not {shard_hash!r}",
                            "invalid_argument")
            options["shard_hash"] = shard_hash
        if max_release_deferral is not None:
            if isinstance(max_release_deferral, bool) or not isinstance(max_release_deferral, (int, float)) \
                    or not 0 <= max_release_deferral <= 1e9:
                raise _bad_option("max_release_deferral", "0 or more seconds", max_release_deferral)
            options["max_release_deferral_ms"] = int(max_release_deferral * 1000)
        for name, value in (("key_file", key_file), ("swarm_key_file", swarm_key_file)):
            _str_option(name, value, True)
        if swarm_key is not None and not isinstance(swarm_key, (bytes, bytearray)):
            raise _bad_option("swarm_key", "bytes", swarm_key)
        if data_listen is None and listen.endswith(":0"):
            options["data_listen"] = listen  # port 0 for both
        if isinstance(swarm_key, bytearray):
            swarm_key = bytes(swarm_key)
        return cls(_native.Peer.start(options, key_file, swarm_key, swarm_key_file))

    @property
    def id(self) -> str:
        """This peer's public key (hex): what others list in trusted_publishers or members."""
        return self._native.id

    @property
    def gossip_address(self) -> str:
        return self._native.gossip_address

    def publish(self, model: str, tensors: Union[Mapping[str, object], Iterable[Tuple[str, object]]], *,
                dtype=None, metadata: Optional[Mapping[str, str]] = None) -> Published:
        """Publishes ``tensors`` (name -> numpy array or torch tensor) as
        the next version of ``model``. Contiguous ones are served where they
        are; others are packed once. When every tensor is a CUDA tensor on
        one GPU, the version stays in that GPU's memory: its shards are
        hashed there and pieces are served from a host mirror read back once
        (docs/gpu.md); CUDA tensors mixed with others are copied to the host
        once. ``dtype`` (a numpy or torch dtype):
        floating-point tensors are cast to it first (packed once: the
        rollout dtype of a trainer's fp32 weights, say). ``metadata``
        (str -> str: the trainer's step, say) goes in the version's
        safetensors header, signed with it; a fetcher reads it as
        ``Fetched.metadata``. The version is a safetensors image: the header
        (built here, a few KiB) and then the tensors, where they lie."""
        from . import safetensors

        items = list(tensors.items()) if isinstance(tensors, Mapping) else list(tensors)
        if dtype is not None:
            items = [(name, _cast(name, value, dtype)) for name, value in items]
        device, gpu = self._one_gpu([value for _, value in items])
        publishable = [(name,) + _as_publishable(name, value, device is not None) for name, value in items]
        try:
            header = safetensors.encode_header([(n, d, s, b) for n, _, _, b, d, s in publishable], metadata)
        except ValueError as e:
            raise Error(f"invalid argument: tensors: {e}") from None
        header = np.frombuffer(bytearray(header), dtype=np.uint8)
        if device is not None:
            torch = _torch()
            header = torch.from_numpy(header).to(device)  # the whole image on the GPU, header included
            torch.cuda.synchronize(device)  # the tensors' pending writes end before they are hashed
            owners, regions, specs = [header], [(header.data_ptr(), header.nbytes)], []
        else:
            owners, regions, specs = [header], [(_address(header), header.nbytes)], []
        offset = header.nbytes
        for name, owner, address, nbytes, dtype_name, shape in publishable:
            owners.append(owner)
            specs.append((name, dtype_name, shape, offset, nbytes))
            if nbytes:
                regions.append((address, nbytes))
            offset += nbytes
        return Published(self._native.publish(model, regions, specs, owners, gpu=gpu), dict(metadata or {}))

    @staticmethod
    def _one_gpu(values):
        """(device, "GPU-<uuid>") when every value is a CUDA tensor on one
        GPU, else (None, "")."""
        if not values or not all(_is_torch_tensor(v) and v.device.type == "cuda" for v in values):
            return None, ""
        from . import _cuda

        try:
            device = _cuda.device_of(values)
            return device, _cuda.gpu_uuid(_torch().cuda.get_device_properties(device))
        except ValueError:
            return None, ""  # several GPUs, or no UUID: host copies

    def publish_safetensors(self, model: str, path: str, *, metadata: Optional[Mapping[str, str]] = None) -> Published:
        """Publishes a safetensors file as it is (its header and metadata
        included), or a checkpoint directory's ``*.safetensors`` files as one
        version (a header of all their tensors, built here, then each
        file's tensor bytes), served from mappings of the files (no copy).
        ``metadata`` is merged over the files' own (a file given with it
        gets a new header too). The files must not change until the handle
        is released: a changed one fails verification at the fetchers.
        Tensor names must be unique across a directory's files."""
        from . import safetensors

        try:
            if os.path.isdir(path) or metadata:
                header, runs, merged = safetensors.gather(path, metadata)
            else:
                data, base, entries, merged = safetensors.layout(path)
        except (OSError, ValueError) as e:
            raise Error(f"invalid argument: {e}") from None
        if not (os.path.isdir(path) or metadata):
            specs = sorted(((name, e["dtype"], e["shape"], base + e["data_offsets"][0],
                             e["data_offsets"][1] - e["data_offsets"][0]) for name, e in entries.items()),
                           key=lambda spec: spec[3])
            return Published(self._native.publish(model, [(_address(data), data.nbytes)], specs, [data]), merged)
        header = np.frombuffer(bytearray(header), dtype=np.uint8)
        _, entries, _ = safetensors.decode_header(header)
        specs = sorted(((name, e["dtype"], e["shape"], header.nbytes + e["data_offsets"][0],
                         e["data_offsets"][1] - e["data_offsets"][0]) for name, e in entries.items()),
                       key=lambda spec: spec[3])
        regions = [(_address(header), header.nbytes)] + [(_address(body) + begin, end - begin)
                                                        for body, begin, end in runs]
        return Published(self._native.publish(model, regions, specs, [header, runs]), merged)

    def latest(self, model: str) -> Optional[dict]:
        return self._native.latest(model)

    def wait_for_head(self, model: str, after: int = 0, timeout: Optional[float] = None) -> dict:
        return self._native.wait_for_head(model, after, timeout)

    def fetch(self, model: str, version: int = 0, *, into=None) -> Fetched:
        """Fetches a version (0: the head). ``into``: nothing (this package
        allocates the memory); a writable, C-contiguous buffer (a numpy
        array, a bytearray, ...) of exactly the version's size, which the
        blocks land in; or a mapping of tensor name to a writable,
        C-contiguous numpy array or torch tensor of the tensor's shape and
        item size, which receives that tensor in place (tensors not given
        land in memory allocated here). When the mapping's tensors are CUDA
        tensors (all on one GPU), the whole version lands in that GPU's
        memory through a pinned staging ring and is verified there; tensors
        not given land in GPU memory allocated here (docs/gpu.md). ``Fetched.state_dict()`` gives the tensors as views of
        that memory once ``wait()`` returns. Until then its bytes are not the
        version's (a failed fetch leaves them undefined)."""
        info = self._native.version_info(model, version)
        if isinstance(into, Mapping):
            return self._fetch_into_arrays(model, info, into)
        if into is None:
            buffer = np.empty(info["nbytes"], dtype=np.uint8)
        else:
            try:
                view = memoryview(into)
            except TypeError:
                raise Error(f"invalid argument: into: a {type(into).__name__} is not a buffer") from None
            if view.readonly or not view.c_contiguous:
                raise Error("invalid argument: into: the buffer must be writable and C-contiguous")
            buffer = np.frombuffer(view.cast("B"), dtype=np.uint8)
            if buffer.nbytes != info["nbytes"]:
                raise Error(f"invalid argument: into: the buffer holds {buffer.nbytes} bytes; {model} v{info['version']} "
                            f"is {info['nbytes']}")
        regions = [(_address(buffer), buffer.nbytes)] if buffer.nbytes else []
        native = self._native.fetch(model, info["version"], regions, buffer)
        return Fetched(native, buffer)

    def fetch_to_file(self, model: str, path, version: int = 0, *, mode: int = 0o644,
                      overwrite: bool = True) -> FetchedFile:
        """Fetches a version (0: the head) into the file ``path`` (a str or
        path-like), written as the blocks arrive, without the version ever
        being held in this process's memory (`FetchedFile`); a version this
        package published arrives as a safetensors file. ``mode``: the new file's
        permission bits; ``overwrite=False`` raises ``already_exists`` when
        ``path`` exists. Raises Error: ``not_found`` (no such model or
        version), ``invalid_argument`` (a bad path or mode), ``io_error``
        (the file could not be made), ``already_exists``."""
        try:
            path = os.fsdecode(os.fspath(path))
        except TypeError:
            raise Error(f"invalid argument: path: a {type(path).__name__} is not a path") from None
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise Error(f"invalid argument: mode: permission bits 0 to 0o7777, not {mode!r}")
        native = self._native.fetch_to_file(model, version, path, mode, bool(overwrite))
        return FetchedFile(native, path)

    def _fetch_into_arrays(self, model: str, info: dict, into: Mapping[str, np.ndarray]) -> Fetched:
        # The version's bytes, laid end to end: each tensor lands in the
        # caller's array of its name; a tensor not given, and any bytes
        # between tensors, land in memory allocated here.
        tensors = sorted(self._native.version_tensors(model, info["version"]), key=lambda t: t[3])
        unknown = set(into) - {t[0] for t in tensors}
        if unknown:
            raise Error(f"invalid argument: into: {model} v{info['version']} has no tensor {sorted(unknown)[0]!r}")
        regions, owner, arrays = [], [], {}
        position = 0
        lead = None
        # Into GPU memory when the caller's tensors are CUDA tensors: then
        # every byte of the version lands on that GPU, scratch included.
        cuda_targets = [t for t in into.values() if _is_torch_tensor(t) and t.device.type == "cuda"]
        gpu = ""
        device = None
        if cuda_targets:
            from . import _cuda

            if len(cuda_targets) != len(into):
                raise Error("invalid argument: into: CUDA tensors and host memory in one fetch (a version lands "
                            "in one kind of memory)")
            try:
                device = _cuda.device_of(cuda_targets)
                gpu = _cuda.gpu_uuid(_torch().cuda.get_device_properties(device))
            except ValueError as e:
                raise Error(f"invalid argument: into: {e}") from None

        def scratch(nbytes):
            if device is not None:
                array = _torch().empty(nbytes, dtype=_torch().uint8, device=device)
                owner.append(array)
                regions.append((array.data_ptr(), nbytes))
                return array
            array = np.empty(nbytes, dtype=np.uint8)
            owner.append(array)
            regions.append((_address(array), nbytes))
            return array

        for name, dtype, shape, offset, length in tensors:
            if offset > position:
                gap = scratch(offset - position)
                if position == 0:
                    lead = gap  # the version's header
            target = into.get(name)
            if target is None and device is not None:
                torch_dtype = {v: k for k, v in torch_dtypes(_torch()).items()}.get(dtype, _torch().uint8)
                array = scratch(length).view(torch_dtype).reshape(shape) if length else \
                    _torch().empty(shape, dtype=torch_dtype, device=device)
            elif target is None:
                array = scratch(length).view(_TO_NUMPY[dtype]).reshape(shape) if length else \
                    np.empty(shape, dtype=_TO_NUMPY[dtype])
            elif _is_torch_tensor(target):
                array = target
                want = [k for k, v in torch_dtypes(_torch()).items() if v == dtype]
                if array.device.type != ("cuda" if device is not None else "cpu") or not array.is_contiguous():
                    raise Error(f"invalid argument: into[{name!r}]: a contiguous "
                                f"{'CUDA' if device is not None else 'CPU'} tensor is needed")
                if not want or array.dtype != want[0] or list(array.shape) != list(shape):
                    raise Error(f"invalid argument: into[{name!r}]: {array.dtype}{list(array.shape)} does not hold "
                                f"{dtype}{list(shape)}")
                if length:
                    owner.append(array)
                    regions.append((array.data_ptr(), length))
            else:
                array = target
                if not isinstance(array, np.ndarray) or not array.flags["C_CONTIGUOUS"] or \
                        not array.flags["WRITEABLE"]:
                    raise Error(f"invalid argument: into[{name!r}]: a writable, C-contiguous numpy array is needed")
                if array.nbytes != length or list(array.shape) != list(shape) or \
                        array.dtype.itemsize != np.dtype(_TO_NUMPY[dtype]).itemsize:
                    raise Error(f"invalid argument: into[{name!r}]: {array.dtype}{list(array.shape)} does not hold "
                                f"{dtype}{list(shape)}")
                if length:
                    owner.append(array)
                    regions.append((_address(array), length))
            arrays[name] = array
            position = offset + length
        if info["nbytes"] > position:
            scratch(info["nbytes"] - position)
        native = self._native.fetch(model, info["version"], regions, owner, gpu=gpu)
        return Fetched(native, None, arrays, lead)

    def status(self) -> dict:
        import json

        return json.loads(self._native.status_json())

    def close(self) -> None:
        """Leaves the swarm gracefully (up to 4 s) and stops."""
        self._native = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


from .daemon import connect  # noqa: E402  (it needs Error, above)
