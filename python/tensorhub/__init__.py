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
from typing import Iterable, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native
from ._errors import ArgumentTypeError, Error, check_version
from ._errors import native_timeout as _native_timeout
from ._group import Group
from ._handles import Fetched, FetchedFile, Published
from ._options import _bad_option, _bool_option, _int_option, _seconds_option, _str_option, _strs_option
from ._results import FetchProgress, VersionInfo
from ._slices import Slice
from ._tensors import TO_NUMPY as _TO_NUMPY
from ._tensors import address as _address
from ._tensors import as_publishable as _as_publishable
from ._tensors import cast as _cast
from ._tensors import is_torch_tensor as _is_torch_tensor
from ._tensors import torch_module as _torch
from ._views import torch_dtypes
from .daemon import Daemon, connect
from . import layouts  # pure Python over _errors only: the standard selections (tensorhub.layouts)

__all__ = ["Error", "Peer", "Published", "Fetched", "FetchedFile", "VersionInfo", "FetchProgress", "Daemon",
           "Slice", "Group", "connect", "generate_swarm_key", "layouts"]

_native._set_error_type(Error)
# Defined in private modules (daemon.py needs nothing of this one, and the
# handles have a module of their own); named and printed as the package's.
for _public in (Error, VersionInfo, FetchProgress, Published, Fetched, FetchedFile, Slice, Group):
    _public.__module__ = __name__
del _public


def generate_swarm_key() -> bytes:
    """32 random bytes: a new swarm key (every member must hold the same).
    Raises nothing (``NotImplementedError`` only where the system has no
    randomness source, as ``os.urandom``)."""
    return os.urandom(32)



def _selection_spec(select, tensors) -> list:
    """``select`` (a mapping of name to slices, or a list of names) as the
    native selection: [(name, [(begin, end), ...])], no ranges for a whole
    tensor; validated by ``layouts.check`` against the version's shapes."""
    shapes = {t[0]: tuple(t[2]) for t in tensors}
    if isinstance(select, (str, bytes)) or not isinstance(select, (Mapping, Iterable)):
        raise ArgumentTypeError(f"select: a mapping of tensor name to a tuple of slices, or a list of names, not "
                                f"{type(select).__name__}")
    if not isinstance(select, Mapping):
        names = list(select)
        for name in names:
            if not isinstance(name, str):
                raise ArgumentTypeError(f"select: a list of tensor names, not one holding {type(name).__name__}")
            if name not in shapes:
                raise Error(f"invalid argument: select: no tensor {name!r} in the version")
        if not names:
            raise Error("invalid argument: select: names no tensor")
        return [(name, []) for name in dict.fromkeys(names)]  # whole, a tensor of no elements too
    if not select:
        raise Error("invalid argument: select: names no tensor")
    checked = layouts.check(select, shapes)
    spec = []
    for name, index in checked.items():
        shape = shapes[name]
        ranges = [s.indices(extent)[:2] for s, extent in zip(index, shape)]
        whole = all(r == (0, extent) for r, extent in zip(ranges, shape))
        spec.append((name, [] if whole else ranges))
    return spec

def _view_specs(views, whole_shapes) -> list:
    """Declared ``views`` (selections over the whole model) as native
    selections of the tensors this part holds (``whole_shapes``: name,
    dtype, global shape); a view naming none of them is left out."""
    if views is None:
        return []
    if isinstance(views, (str, bytes, Mapping)) or not isinstance(views, Iterable):
        raise ArgumentTypeError(f"views: a list of selections (as fetch's select=), not {type(views).__name__}")
    held = {name for name, _, _ in whole_shapes}
    specs = []
    for i, view in enumerate(views):
        if isinstance(view, (str, bytes)) or not isinstance(view, (Mapping, Iterable)):
            raise ArgumentTypeError(f"views[{i}]: a selection (as fetch's select=), not {type(view).__name__}")
        names = list(view)
        for name in names:
            if not isinstance(name, str):
                raise ArgumentTypeError(f"views[{i}]: tensor names are strings, not {type(name).__name__}")
        if isinstance(view, Mapping):
            mine = {name: view[name] for name in names if name in held}
        else:
            mine = [name for name in names if name in held]
        if not mine:
            continue  # another part's tensors only
        try:
            specs.append(_selection_spec(mine, whole_shapes))
        except ArgumentTypeError as e:
            raise ArgumentTypeError(f"views[{i}]: {e.args[0]}") from None
        except Error as e:
            kind, _, reason = e.args[0].partition(": ")
            raise Error(f"{kind}: views[{i}]: {reason}") from None
    return specs


class Peer:
    """An in-process TensorHub peer: ``Peer.start(listen=..., seeds=[...],
    swarm_key=...)``. Waiting calls release the GIL. Every failure is a
    ``tensorhub.Error`` whose ``code`` names its kind; each call lists the
    codes it raises."""

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
              max_release_deferral: Optional[float] = None, super_seed: bool = True,
              start_timeout: float = 10.0, publish_head_wait: float = 10.0) -> "Peer":
        """Every option of the C++ ``PeerOptions`` (include/tensorhub/peer.hpp),
        by the same name; ``None`` keeps its default. ``rdma``: move block
        payloads by RDMA READ where this machine has an RDMA device with an
        active port (``False``: TCP only); ``rdma_queue_pairs``: per local NIC
        to each neighbour, 1 to 16; ``mirror_gpu_versions``: serve versions in
        GPU memory over TCP from a host copy rather than a copy per piece;
        ``shard_hash``: ``"xxh3-128"`` or ``"blake2b-256"`` (secure mode) for
        what this peer publishes; ``max_release_deferral``: seconds
        (docs/python.md); ``start_timeout``: seconds this call may spend
        looking up the seeds' names; ``publish_head_wait``: seconds a
        ``publish`` waits to learn the head it follows. Blocks (without the
        GIL) while it binds its ports and looks up the seeds' names, at most
        ``start_timeout``. Raises Error: ``invalid_argument`` naming an
        option of the wrong type or out of range (a bad address or label, a
        swarm key that is not 32 bytes, none given); ``unavailable`` (a port
        cannot be bound, or no seed's name resolves); ``timeout`` (no seed's
        name resolved, the last one within ``start_timeout``); for ``key_file``
        and ``swarm_key_file``, ``not_found``, ``permission_denied`` (a file
        others may read), ``io_error`` or ``corrupt``."""
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
            options["max_release_deferral_ms"] = _seconds_option("max_release_deferral", max_release_deferral, 0, 1e9)
        options["start_timeout_ms"] = _seconds_option("start_timeout", start_timeout, 0.001, 86400)
        options["publish_head_wait_ms"] = _seconds_option("publish_head_wait", publish_head_wait, 0.001, 86400)
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
        """This peer's public key (hex): what others list in trusted_publishers
        or members. Raises nothing."""
        return self._native.id

    @property
    def gossip_address(self) -> str:
        """host:port where this peer's gossip listens (useful with port 0).
        Raises nothing."""
        return self._native.gossip_address

    def publish(self, model: str, tensors: Union[Mapping[str, object], Iterable[Tuple[str, object]]], *,
                dtype=None, metadata: Optional[Mapping[str, str]] = None, version: Optional[int] = None,
                part: Optional[Tuple[int, int]] = None, views=None) -> Published:
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
        (built here, a few KiB) and then the tensors, where they lie.

        Blocks (without the GIL) while the image is hashed and, for a peer
        started with seeds, up to ``publish_head_wait`` (``Peer.start``, 10 s
        unless told) to learn the head it follows. Raises Error:
        ``invalid_argument`` (a bad model name, a dtype with no safetensors
        name, a tensor name used twice, a bad ``dtype`` or shard size);
        ``permission_denied`` (this peer's key is not a trusted publisher);
        ``unavailable`` (the head could not be learnt in time, or a GPU
        cannot be used); ``already_exists`` (other publications of the model
        kept taking the next number); ``verify_failed`` (the manifest breaks
        the model's chain); ``resource_exhausted`` (this peer's gossip record
        cannot announce it, the limit named).

        ``part=(rank, world)`` publishes this trainer rank's part of version
        ``version`` (required then: the number the trainer hands every rank)
        of a model published in ``world`` parts. A value of ``tensors`` is
        then a whole tensor or a ``tensorhub.Slice`` of a larger one; every
        element of every tensor must be in exactly one rank's part. The
        part's image is its tensors end to end, served where they lie (no
        header, so no ``metadata``). The version becomes visible once every
        part has come and a rank sealed it (``Published.wait_sealed``);
        ``Published.version`` is ``version``. Raises as above, and
        ``already_exists`` (``version`` is known already, or this part is
        published already).

        ``views`` (with ``part`` only): selections, in ``fetch(select=)``'s
        form over the whole model, whose fetchers are expected (one per
        tensor-parallel rank, as ``tensorhub.layouts`` gives them; stable
        across versions, so given to every publish). The part's view of
        each, its bytes that selection takes end to end, is hashed into the
        part's manifest and served gathered from the tensors: a fetch of
        that selection then moves exactly its bytes of this part, a
        row-parallel rank's strided columns too. Tensors a selection names
        that this part does not hold are other parts' (a name no part holds
        declares nothing). Give every publish of a version the same views:
        they are in the part's signed manifest, so a restarted rank that
        publishes its part again with other views makes a second manifest
        for its slot, and the version is never sealed. At most 64 views a
        part, from host memory (views of CUDA tensors are not built yet)."""
        from . import safetensors

        if part is not None or version is not None:
            return self._publish_part(model, tensors, dtype, metadata, version, part, views)
        if views is not None:
            raise Error("invalid argument: views: declared views are a part's (publish with part=(rank, world))")
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
        return Published(self._native.publish(model, regions, specs, owners, gpu=gpu), dict(metadata or {}), model)

    def _publish_part(self, model, tensors, dtype, metadata, version, part, views=None) -> Published:
        if part is None or version is None:
            raise Error("invalid argument: a part is published with both version=v and part=(rank, world)")
        check_version(version, "publish")
        if version == 0:
            raise Error("invalid argument: version: a part names its version, from 1")
        if (not isinstance(part, tuple) or len(part) != 2 or not all(isinstance(p, int) for p in part)
                or not 0 <= part[0] < part[1]):
            raise Error(f"invalid argument: part: (rank, world) with 0 <= rank < world, not {part!r}")
        if metadata:
            raise Error("invalid argument: metadata: a part has no safetensors header to carry it")
        items = list(tensors.items()) if isinstance(tensors, Mapping) else list(tensors)
        values = [v.tensor if isinstance(v, Slice) else v for _, v in items]
        if dtype is not None:
            values = [_cast(name, value, dtype) for (name, _), value in zip(items, values)]
        device, gpu = self._one_gpu(values)
        owners, regions, specs, offset, whole_shapes = [], [], [], 0, []
        for (name, given), value in zip(items, values):
            owner, address, nbytes, dtype_name, shape = _as_publishable(name, value, device is not None)
            global_shape, begin = [], []
            if isinstance(given, Slice):
                if list(shape) != given.shape:
                    raise Error(f"invalid argument: tensor '{name}': its shape {list(shape)} is not its slice's "
                                f"{given.shape} ({given!r})")
                global_shape, begin = given.global_shape, given.begin
            whole_shapes.append((name, dtype_name, list(global_shape) if global_shape else list(shape)))
            owners.append(owner)
            specs.append((name, dtype_name, list(shape), offset, nbytes, global_shape, begin))
            if nbytes:
                regions.append((address, nbytes))
            offset += nbytes
        if device is not None:
            _torch().cuda.synchronize(device)  # the tensors' pending writes end before they are hashed
        view_specs = _view_specs(views, whole_shapes)
        if view_specs and gpu:
            raise Error("invalid argument: views: declared views of a part in CUDA memory are not built yet")
        native = self._native.publish_part(model, version, part[0], part[1], regions, specs, owners, gpu=gpu,
                                           views=view_specs)
        return Published(native, {}, model)

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
        Tensor names must be unique across a directory's files. Blocks as
        ``publish`` does. Raises Error: ``invalid_argument``
        (no such file or directory, one that is not safetensors, a name used
        twice across files), and those of ``publish``."""
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
            return Published(self._native.publish(model, [(_address(data), data.nbytes)], specs, [data]), merged, model)
        header = np.frombuffer(bytearray(header), dtype=np.uint8)
        _, entries, _ = safetensors.decode_header(header)
        specs = sorted(((name, e["dtype"], e["shape"], header.nbytes + e["data_offsets"][0],
                         e["data_offsets"][1] - e["data_offsets"][0]) for name, e in entries.items()),
                       key=lambda spec: spec[3])
        regions = [(_address(header), header.nbytes)] + [(_address(body) + begin, end - begin)
                                                        for body, begin, end in runs]
        return Published(self._native.publish(model, regions, specs, [header, runs]), merged, model)

    def latest(self, model: str) -> Optional[VersionInfo]:
        """The newest verified head of ``model`` (``VersionInfo``: attributes
        ``model``, ``version``, ``manifest_id``, ``nbytes``; a dict-style read
        still works), or None when none is known. Does not wait. Raises
        TypeError when ``model`` is not a str."""
        head = self._native.latest(model)
        return None if head is None else VersionInfo._from_native(head)

    def wait_for_head(self, model: str, after: int = 0, timeout: Optional[float] = None) -> VersionInfo:
        """Waits (without the GIL, woken by gossip, not a poll) until a head
        of ``model`` newer than ``after`` is known, at most ``timeout``
        seconds (None: no limit), and returns it (``VersionInfo``). Raises
        Error: ``timeout``; ``verify_failed`` (a version above ``after`` was
        signed twice: that number never becomes the head); ``unavailable``
        (started with seeds, and no peer was heard from); ``invalid_argument``
        (also a TypeError) for an ``after`` or ``timeout`` that is not one.
        TypeError when ``model`` is not a str."""
        check_version(after, "wait_for_head", name="after")
        head = self._native.wait_for_head(model, after, _native_timeout(timeout, "wait_for_head"))
        return VersionInfo._from_native(head)

    def fetch(self, model: str, version: int = 0, *, into=None, select=None) -> Fetched:
        """Fetches a version (0: the head), or with ``select`` a selection of
        it (below). ``into``: nothing (this package
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
        version's (a failed fetch leaves them undefined).

        ``select``: a mapping of tensor name to a tuple of Python ``slice``s,
        one per dimension, as torch indexes the tensor (``slice(None)`` for a
        whole dimension; a bare slice for a 1-D tensor; step 1), or a list of
        names for whole tensors: what ``tensorhub.layouts`` gives (one
        tensor-parallel rank's rows or columns, an expert, a stage's
        layers). Only the shards holding selected bytes are fetched, each
        verified whole; ``state_dict()`` and ``iter_tensors()`` give each
        selected tensor at its slice's shape (every one once the whole
        selection is verified), ``tensors`` lists them laid end to end, and
        ``into`` is one buffer of the selection's size or a mapping of name
        to arrays of the slices' shapes. Into CUDA tensors only declared
        views move (``publish(..., views=)``: each lands whole and is
        verified on the GPU); a part without this selection's view raises
        ``invalid_argument`` naming it. ``progress().bytes_received`` counts
        the bytes that came over the network.

        Returns at once (the fetch goes on; ``wait(timeout)`` waits for it).
        The arguments go in C++'s order: model, version, then where to.
        Raises Error: ``unavailable`` (no version of the model is known yet;
        for a GPU: no CUDA, driver or pinned memory); ``not_found`` (that
        version is not known; no GPU with that UUID); ``invalid_argument``
        (an ``into`` of the wrong size, shape, dtype or kind of memory, a
        negative version; a version that is not an int is also a
        TypeError); ``permission_denied`` (``require_secure_hash`` and the
        version's shards are not BLAKE2b-256); ``io_error`` (no memory for
        the destination)."""
        check_version(version, "fetch")
        return self._fetch(model, version, into, self._native.fetch, select, self._native.fetch_selection)

    def _fetch(self, model: str, version: int, into, start, select=None, start_selection=None) -> Fetched:
        # `start(model, version, regions, owner, gpu="")`: the native fetch
        # (the peer's, or a group rank's, which stages it for the group);
        # `start_selection(model, version, selection, regions, owner)`: the
        # same for a selection.
        info = self._native.version_info(model, version)
        number = info["version"]
        if select is None:
            total = info["nbytes"]
            tensors = None  # read when needed

            def begin(regions, owner, gpu=""):
                return start(model, number, regions, owner, gpu=gpu)
        else:
            selection = _selection_spec(select, self._native.version_tensors(model, number))
            tensors = self._native.selection_tensors(model, number, selection)
            total = sum(t[4] for t in tensors)

            def begin(regions, owner, gpu=""):
                return start_selection(model, number, selection, regions, owner, gpu=gpu)
        if isinstance(into, Mapping):
            if tensors is None:
                tensors = self._native.version_tensors(model, number)
            return self._fetch_into_arrays(f"{model} v{number}", total, tensors, into, begin, select is not None)
        if into is None:
            buffer = np.empty(total, dtype=np.uint8)
        else:
            try:
                view = memoryview(into)
            except TypeError:
                raise Error(f"invalid argument: into: a {type(into).__name__} is not a buffer") from None
            if view.readonly or not view.c_contiguous:
                raise Error("invalid argument: into: the buffer must be writable and C-contiguous")
            buffer = np.frombuffer(view.cast("B"), dtype=np.uint8)
            if buffer.nbytes != total:
                raise Error(f"invalid argument: into: the buffer holds {buffer.nbytes} bytes; {model} v{number}"
                            f"{'' if select is None else ' (the selection)'} is {total}")
        regions = [(_address(buffer), buffer.nbytes)] if buffer.nbytes else []
        native = begin(regions, buffer)
        return Fetched(native, buffer, assembled=select is not None)

    def fetch_to_file(self, model: str, version: int = 0, path=None, *, mode: int = 0o644,
                      overwrite: bool = True, select=None) -> FetchedFile:
        """Fetches a version (0: the head) into the file ``path`` (a str or
        path-like), written as the blocks arrive, without the version ever
        being held in this process's memory (`FetchedFile`); a version this
        package published arrives as a safetensors file, and so does a
        version in parts (its tensors whole). ``select`` (as ``fetch``'s)
        fetches only a selection, into a safetensors file of the selected
        tensors at their slices' shapes, each slice's place in its
        ``tensorhub.slices`` metadata. ``mode``: the new file's
        permission bits; ``overwrite=False`` raises ``already_exists`` when
        ``path`` exists.

        The arguments go in C++'s order, ``Peer::fetch_to_file(model,
        version, path)``: ``fetch_to_file("policy", 3, "/dev/shm/p")``, or
        for the head ``fetch_to_file("policy", path="/dev/shm/p")``. A path
        where the version goes (the order before, ``fetch_to_file(model,
        path, version)``) is refused, never read as something else.

        Returns at once (the fetch goes on; ``wait(timeout)`` waits for it).
        Raises Error: ``not_found`` (no such version, or no such directory);
        ``unavailable`` (no version of the model known yet);
        ``already_exists`` (``overwrite=False`` and ``path`` exists);
        ``invalid_argument`` (a path or mode that is not one, something other
        than a regular file at ``path``); ``permission_denied`` (no right to
        create the file there, or ``require_secure_hash`` refuses the
        version); ``io_error`` (the file cannot be created, sized or mapped).
        ``tensorhub.Error`` (``invalid_argument``) that is also a TypeError:
        ``path`` missing, a version that is not an int (a path given as the
        version names the order)."""
        check_version(version, "fetch_to_file", "path")
        if path is None:
            raise ArgumentTypeError("fetch_to_file(model, version, path): path is missing (the version comes "
                                    "first, as in the C++ API; for the head: fetch_to_file(model, path=...))")
        try:
            path = os.fsdecode(os.fspath(path))
        except TypeError:
            raise Error(f"invalid argument: path: a {type(path).__name__} is not a path") from None
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise Error(f"invalid argument: mode: permission bits 0 to 0o7777, not {mode!r}")
        if select is not None:
            number = self._native.version_info(model, version)["version"]
            selection = _selection_spec(select, self._native.version_tensors(model, number))
            native = self._native.fetch_selection_to_file(model, number, selection, path, mode, bool(overwrite))
            return FetchedFile(native, path)
        native = self._native.fetch_to_file(model, version, path, mode, bool(overwrite))
        return FetchedFile(native, path)

    def _fetch_into_arrays(self, what: str, total: int, tensors, into: Mapping[str, np.ndarray], begin,
                           selection: bool) -> Fetched:
        # The version's (or the selection's) bytes, laid end to end: each
        # tensor lands in the caller's array of its name; a tensor not
        # given, and any bytes between tensors, land in memory allocated here.
        tensors = sorted(tensors, key=lambda t: t[3])
        unknown = set(into) - {t[0] for t in tensors}
        if unknown:
            raise Error(f"invalid argument: into: {what}{' (the selection)' if selection else ''} has no tensor "
                        f"{sorted(unknown)[0]!r}")
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
        if total > position:
            scratch(total - position)
        native = begin(regions, owner, gpu=gpu)
        return Fetched(native, None, arrays, lead, assembled=selection)

    def group(self, name: str, size: int, rank: int) -> Group:
        """Joins the model-parallel group ``name`` as ``rank`` of ``size``
        (the ranks of one inference instance, which switch versions
        together): a `Group`. Every rank's peer gives the same name and
        size. Raises Error: ``invalid_argument`` (a name that breaks the
        model-name rule or is longer than 64 bytes, a size of 0 or above
        1024, a rank not below the size; a size or rank that is not an int
        is also a TypeError), ``already_exists`` (this peer is a rank of
        that group already), ``resource_exhausted`` (a rank of 4 groups
        already)."""
        for what, value in (("size", size), ("rank", rank)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArgumentTypeError(f"group(name, size, rank): {what} must be an int, not {type(value).__name__}")
            if value < 0:
                raise Error(f"invalid argument: group: {what} {value} is negative")
        return Group(self, self._native.group(name, size, rank))

    def status(self) -> dict:
        """The member table and transfers, as ``tensorhub status --json``
        prints them (a dict of the peer's JSON). Raises nothing."""
        import json

        return json.loads(self._native.status_json())

    def close(self) -> None:
        """Leaves the swarm gracefully (up to 4 s, without the GIL) and
        stops, once no handle of this peer is left (a handle keeps its peer
        alive). Raises nothing; a second call does nothing."""
        self._native = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

