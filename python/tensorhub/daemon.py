"""A pure-Python client of a running ``tensorhub peer`` daemon, over its
control socket: no compiled code loads in the caller's process (an inference
engine's, say), except to map a version the daemon holds in GPU memory.
Versions travel as safetensors files in a directory both sides can map,
``/dev/shm`` by default: a publish writes one and has the daemon serve it; a
fetch has the daemon write one and maps it. A hold on a GPU hands over GPU
memory by CUDA IPC instead.

Every failure is a ``tensorhub.Error`` whose ``code`` names its kind: the
daemon's own (its answer's ``code``), or the client's: ``unavailable`` (the
daemon cannot be reached, or closed the connection without an answer),
``timeout`` (no answer in time: the request is cancelled), ``io_error`` (the
connection failed while reading, or a shared file could not be written),
``corrupt`` (an answer that is not JSON), ``invalid_argument`` (refused here
before asking: a bad model name, version or timeout; one of the wrong type
is also a ``TypeError``). Each call lists the codes it raises."""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import tempfile
import time
import uuid
from typing import Iterable, Mapping, Optional, Tuple, Union

from . import safetensors
from ._errors import Error, check_timeout, check_version
from ._releasable import Releasable
from ._results import VersionInfo
from ._tensors import cast, check_device, check_kind, host_array
from ._views import batches, moved, torch_view

__all__ = ["Daemon", "DaemonPublished", "DaemonFetched", "DaemonHeld", "DaemonGpuHeld", "connect"]


# The model-name rule (src/core/model_name.cpp): checked here first, so a bad
# name is an Error before any file is written.
_MODEL_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9._\-/]{0,127}")


def _check_model(model) -> str:
    """``model``, or raises Error (``invalid_argument``): not a str, or a
    name that breaks the rule."""
    if not isinstance(model, str):
        raise Error(f"invalid argument: the model name must be a str, not {type(model).__name__}", "invalid_argument")
    if not _MODEL_NAME.fullmatch(model):
        raise Error(f"invalid argument: the model name {model[:140]!r} breaks the rule: 1 to 128 of letters, digits and "
                    ". _ - /, not starting with '.' or '/'", "invalid_argument")
    return model


def _put_path(request: dict, key: str, path: str) -> dict:
    """``path`` under ``key``, or its bytes in hex under ``key``_hex when it is
    not UTF-8 (a name with bytes Python keeps as surrogate escapes)."""
    raw = os.fsencode(path)
    try:
        request[key] = raw.decode("utf-8")
    except UnicodeDecodeError:
        request[key + "_hex"] = raw.hex()
    return request


class DaemonPublished(Releasable):
    """A version the daemon publishes from a file this client wrote: ``model``,
    ``version``, ``manifest_id``, ``nbytes``, ``metadata``. ``release()``
    has the daemon stop serving it at once and removes the file this client
    wrote (also when the daemon cannot be asked); it raises Error
    (``unavailable``, ``timeout``, ``io_error``) when the daemon could not
    be asked, and ``OSError`` when the file could not be removed. A second
    call does nothing."""

    def __init__(self, client: "Daemon", model: str, version: int, manifest_id: str, path: str, metadata: dict,
                 owned: bool = True):
        self._client, self.model, self.version, self.manifest_id, self._path = client, model, version, manifest_id, path
        self.metadata, self._owned = metadata, owned
        self.nbytes = os.path.getsize(path)

    @property
    def info(self) -> VersionInfo:
        return VersionInfo(self.model, self.version, self.manifest_id, self.nbytes)

    def wait_replicated(self, replicas: int, timeout: Optional[float] = None) -> None:
        """Waits until ``replicas`` (at least 1) other peers hold the version
        and proved it, at most ``timeout`` seconds (None: no limit): one
        ``wait_replicated`` request that the daemon answers when they do
        (closing it on the timeout ends the daemon's wait). Raises Error:
        ``timeout`` (fewer hold it in time); ``unavailable``, ``io_error``,
        ``corrupt`` (see the module); ``not_found`` (the daemon no longer
        knows the version); ``invalid_argument`` (a ``replicas`` or
        ``timeout`` that is not one; of the wrong type, also a
        TypeError)."""
        check_version(replicas, "wait_replicated", name="replicas")
        if replicas < 1:
            raise Error("invalid argument: wait_replicated: replicas must be at least 1", "invalid_argument")
        self._client._wait({"cmd": "wait_replicated", "model": self.model, "version": self.version,
                            "wait_replicas": replicas}, timeout, "wait_replicated",
                           f"{self.model} v{self.version} has fewer than {replicas} replicas")

    def _release(self) -> None:
        try:
            self._client._request({"cmd": "release", "model": self.model, "version": self.version, "now": True})
        finally:
            if self._owned:
                os.unlink(self._path)


class _VerifiedFile(Releasable):
    """A verified version in a safetensors file that this process maps."""

    path: str

    def state_dict(self, kind: str = "numpy") -> dict:
        """Every tensor, over a read-only mapping of the file (no copy):
        numpy arrays, or with ``kind="torch"`` torch tensors (bf16 as
        ``torch.bfloat16``). Do not write to them. Raises Error
        (``invalid_argument``: a ``kind`` that is not one); ``OSError``
        (the file is gone: the handle was released) and ``ValueError`` (it
        is not a safetensors file any more) from reading it."""
        return {name: tensor for batch in self.iter_tensors(batch_bytes=0, kind=kind) for name, tensor in batch}

    def iter_tensors(self, names=None, batch_bytes: int = 64 << 20, kind: str = "numpy", timeout=None,
                     order: str = "layer", device=None):
        """Lists of (name, tensor) in the file's order, up to ``batch_bytes``
        each, as the in-process ``Fetched.iter_tensors`` yields them (every
        byte is verified already, so ``order`` changes nothing, and nothing
        waits: ``timeout`` too); ``device`` as there (copies from the file).
        Raises (a generator: from the first ``next()`` on) as
        ``state_dict``, and Error (``invalid_argument``) for a ``device``
        that cannot take them."""
        check_kind(kind)
        check_device(kind, device)
        wanted = None if names is None else set(names)
        items = ((name, torch_view(array, dtype) if kind == "torch" else array, array.nbytes)
                 for name, dtype, array in safetensors.entries(self.path) if wanted is None or name in wanted)
        yield from moved(batches(items, batch_bytes), device)

    @property
    def metadata(self) -> dict:
        """The version's safetensors ``__metadata__`` (the trainer's step,
        say). Raises ``OSError`` or ``ValueError`` as ``state_dict``."""
        return safetensors.read_metadata(self.path)


class DaemonFetched(_VerifiedFile):
    """A version the daemon fetched into a file of this client's: ``model``,
    ``version``, ``manifest_id``, ``nbytes``, ``path``. ``release()``
    removes the file; it raises ``OSError`` when that fails."""

    def __init__(self, path: str, version: int, manifest_id: str, model: str = ""):
        self.path, self.version, self.manifest_id, self.model = path, version, manifest_id, model
        self.nbytes = os.path.getsize(path)

    @property
    def info(self) -> VersionInfo:
        return VersionInfo(self.model, self.version, self.manifest_id, self.nbytes)

    def _release(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)


class DaemonHeld(_VerifiedFile):
    """A hold on a version that the daemon keeps as a file for every process
    of this node: ``path`` (a safetensors file) and ``dir`` (its folder, a
    model directory for an engine that loads one). The hold lasts while this
    handle's connection to the daemon is open: ``release()`` closes it
    (waiting up to 60 s for the daemon to say it let go; raises nothing), and
    a process that dies lets go with it. The file goes when the last hold
    does."""

    def __init__(self, connection: socket.socket, model: str, line: dict):
        self._connection, self.model = connection, model
        self.version, self.manifest_id = line["version"], line["id"]
        self.path, self.dir, self.nbytes = line["path"], line["dir"], line["bytes"]

    def _release(self) -> None:
        # Closing our half tells the daemon; its last line says it let go.
        try:
            self._connection.shutdown(socket.SHUT_WR)
            Daemon._answer(self._connection, 60.0, "the daemon")
        except (OSError, Error):
            pass  # the daemon is gone: so is the hold
        finally:
            self._connection.close()


class DaemonGpuHeld(Releasable):
    """A hold on a version that the daemon keeps in memory of GPU ``gpu``
    (its UUID) and shares with this process by CUDA IPC: the hand-over from
    a daemon to an inference engine on that GPU. ``state_dict()`` gives
    torch tensors over the daemon's memory (no copy) for the engine to copy
    into its own parameters; they are valid until ``release()``, which
    unmaps them and then lets go of the hold. The daemon never frees or
    reuses the memory while a hold on it lasts, and a process that dies lets
    go with it. Mapping the handle loads the package's compiled module.
    Making it raises Error: ``unavailable`` (no CUDA), ``not_found`` (no GPU
    with that UUID), ``invalid_argument`` (a handle that is not one), as
    ``GpuMapping`` does. ``release()`` raises nothing."""

    def __init__(self, connection: socket.socket, model: str, line: dict):
        from . import _native

        self._connection, self.model = connection, model
        self.version, self.manifest_id, self.nbytes = line["version"], line["id"], line["bytes"]
        self.gpu, self._table = line["gpu"], line["tensors"]
        ipc = line["ipc"]
        try:
            self._mapping = _native.GpuMapping(bytes.fromhex(ipc["handle"]), ipc["offset"], ipc["bytes"], self.gpu)
        except Exception:
            DaemonHeld._release(self)
            raise

    def state_dict(self, kind: str = "torch") -> dict:
        """Every tensor as a torch tensor on the GPU, over the shared memory
        (no copy; do not write to them). Valid until ``release()``. Raises
        Error: ``invalid_argument`` (a ``kind`` other than "torch"),
        ``cancelled`` (released)."""
        from ._cuda import tensors_over

        if kind != "torch":
            raise Error(f"invalid argument: a version held in GPU memory gives torch tensors, not {kind!r}")
        if getattr(self, "_released", False):
            raise Error("cancelled: released")
        return tensors_over(self._mapping.address, self._mapping.nbytes, self._table, self._mapping)

    def _release(self) -> None:
        self._mapping.close()  # unmapped before the daemon may free the memory
        DaemonHeld._release(self)


class Daemon:
    """``tensorhub.connect(control=PATH)``: the same calls as an in-process
    Peer, carried out by the daemon listening on ``control``. Every call
    that asks the daemon takes a ``timeout`` (seconds; None: the client's,
    600 s by default); past it the client closes its connection, which
    cancels the request, and raises Error (``timeout``)."""

    # The longest any call waits (a socket's limit is finite): a year is
    # longer than any run, so a wait with no limit still ends.
    _NO_LIMIT = 365 * 24 * 3600.0

    def __init__(self, control: str, directory: Optional[str] = None, timeout: float = 600.0):
        """Raises Error (``invalid_argument``; of the wrong type, also a
        TypeError) for a ``timeout`` that is not a number of seconds."""
        self.control = control
        # Absolute: the daemon takes no relative path (its directory is not ours).
        self.directory = os.path.abspath(directory or ("/dev/shm" if os.path.isdir("/dev/shm")
                                                       else tempfile.gettempdir()))
        self.timeout = check_timeout(timeout, "connect")
        if self.timeout is None:
            raise Error("invalid argument: connect: timeout must be a number of seconds", "invalid_argument")
        self.timeout = min(self.timeout, self._NO_LIMIT)  # a socket's limit is finite

    def _limit(self, timeout, call: str) -> float:
        """The seconds a request may take: ``timeout`` (checked), or the client's."""
        timeout = check_timeout(timeout, call)
        return self.timeout if timeout is None else min(timeout, self._NO_LIMIT)  # a socket's limit is finite

    def _connect(self, request: dict, timeout: Optional[float] = None) -> socket.socket:
        """A connection to the daemon that carries ``request``."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(max(self.timeout if timeout is None else timeout, 0.001))
        try:
            s.connect(self.control)
            s.sendall(json.dumps(request).encode() + b"\n")
        except OSError as e:
            s.close()
            raise Error(f"unavailable: cannot reach the daemon at {self.control}: {e.strerror or e}",
                        "unavailable") from None
        return s

    @staticmethod
    def _answer(s: socket.socket, limit: float, where: str) -> dict:
        """Reads the answer's lines up to the one that says "done" (or the
        end) and returns it, raising its error. Gives up after ``limit``
        seconds in all, however often progress lines come; closing the
        connection then cancels the request."""
        deadline = time.monotonic() + limit
        buffer, last = b"", None
        try:
            while True:
                while b"\n" in buffer:
                    text, buffer = buffer.split(b"\n", 1)
                    if text.strip():
                        last = json.loads(text.decode("utf-8"))
                        if last.get("done"):
                            buffer = b""
                            break
                if last is not None and last.get("done"):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                s.settimeout(left)
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                buffer += chunk
        except socket.timeout:
            s.close()
            raise Error(f"timeout: no answer from the daemon within {limit} s; the request is cancelled",
                        "timeout") from None
        except OSError as e:
            s.close()
            raise Error(f"I/O error: reading from the daemon at {where}: {e.strerror or e}", "io_error") from None
        except ValueError as e:
            s.close()
            raise Error(f"corrupt: the daemon answered a line that is not JSON: {e}", "corrupt") from None
        if last is None:
            raise Error("unavailable: the daemon closed the connection without an answer", "unavailable")
        if "event" in last and not last.get("done"):  # progress, then the end: the daemon went
            raise Error("unavailable: the daemon closed the connection before its answer", "unavailable")
        if last.get("ok") is False:
            raise Error(last.get("error", "internal: the daemon failed without a reason"), last.get("code"))
        return last

    def _request(self, request: dict, timeout: Optional[float] = None) -> dict:
        """Sends one request and returns its final line (raising its error)."""
        with self._connect(request, timeout) as s:
            return self._answer(s, self.timeout if timeout is None else timeout, self.control)

    def _file_for(self, model: str) -> str:
        """A new file name in the shared folder: the model's name ('/' as
        '%2F'), cut so the name stays far below the file system's limit."""
        _check_model(model)
        readable = model.replace("/", "%2F")
        if len(readable) > 96:
            readable = readable[:80] + "-" + hashlib.blake2b(model.encode(), digest_size=8).hexdigest()
        return os.path.join(self.directory, f"tensorhub-{readable}-{uuid.uuid4().hex}.safetensors")

    def status(self, timeout: Optional[float] = None) -> dict:
        """The daemon's status, as ``tensorhub status --json`` prints it.
        Raises Error: ``unavailable`` (no daemon at ``control``),
        ``timeout``, ``io_error``, ``corrupt`` (see the module)."""
        return self._request({"cmd": "status"}, self._limit(timeout, "status"))

    def latest(self, model: str, timeout: Optional[float] = None) -> Optional[VersionInfo]:
        """The daemon's newest verified head of ``model`` (``VersionInfo``;
        ``nbytes`` is None: the status does not say it), or None. Raises
        Error: those of ``status``; ``invalid_argument`` (a bad model
        name)."""
        _check_model(model)
        head = self.status(timeout).get("heads", {}).get(model)
        return None if head is None else VersionInfo(model, head["version"], head["id"])

    def wait_for_head(self, model: str, after: int = 0, timeout: Optional[float] = None) -> VersionInfo:
        """Waits until a head of ``model`` newer than ``after`` is verified
        by the daemon, at most ``timeout`` seconds (None: no limit), and
        returns it (``VersionInfo`` with its size): one ``wait_for_head``
        request that the daemon answers when the head comes. Raises Error:
        ``timeout`` (no such head in time); those of ``status``;
        ``invalid_argument`` (a bad model name, ``after`` or ``timeout``;
        of the wrong type, also a TypeError)."""
        _check_model(model)
        check_version(after, "wait_for_head", name="after")
        done = self._wait({"cmd": "wait_for_head", "model": model, "after": after}, timeout, "wait_for_head",
                          f"no head of {model} after v{after}")
        return VersionInfo(model, done["version"], done["id"], done.get("bytes"))

    def _wait(self, request: dict, timeout, call: str, what: str) -> dict:
        """Sends a request the daemon answers when what it waits for has
        happened, and returns its answer; on ``timeout`` (None: no limit)
        the connection closes, which ends the daemon's wait."""
        timeout = check_timeout(timeout, call)
        # A zero timeout still gets the daemon's immediate answer (the head
        # or the replicas there already).
        limit = self._NO_LIMIT if timeout is None else min(max(timeout, 0.05), self._NO_LIMIT)
        try:
            return self._request(request, limit)
        except Error as e:
            if e.code == "timeout":
                raise Error(f"timeout: {what} after {timeout} s", "timeout") from None
            raise

    def publish(self, model: str, tensors: Union[Mapping[str, object], Iterable[Tuple[str, object]]],
                *, dtype=None, metadata: Optional[Mapping[str, str]] = None,
                timeout: Optional[float] = None) -> DaemonPublished:
        """Writes ``tensors`` (numpy arrays or torch tensors, any device) as a
        safetensors file in the shared folder and has the daemon publish it
        (served from the file until ``release()``). ``dtype``: floating-point
        tensors are cast to it first, as ``Peer.publish`` does. Waits at most
        ``timeout`` seconds (None: the client's) for the daemon to hash and
        announce it. Raises Error: ``invalid_argument`` (a bad model name,
        dtype, tensor name or timeout); ``io_error`` (the shared file could
        not be written); the daemon's refusals, as ``Peer.publish`` raises
        them (``permission_denied``, ``unavailable``, ``already_exists``,
        ``verify_failed``, ``resource_exhausted``); ``timeout`` (the request
        is cancelled); those of ``status``. A publish that fails removes the
        file it wrote."""
        limit = self._limit(timeout, "publish")
        items = list(tensors.items()) if isinstance(tensors, Mapping) else list(tensors)
        if dtype is not None:
            items = [(name, cast(name, value, dtype)) for name, value in items]
        arrays, dtypes = [], {}
        for name, value in items:
            array, dtypes[name] = host_array(name, value)
            arrays.append((name, array))
        path = self._file_for(model)
        try:
            safetensors.write(path, arrays, metadata, dtypes)
        except ValueError as e:
            _remove(path)
            raise Error(f"invalid argument: {e}") from None
        except OSError as e:
            _remove(path)
            raise Error(f"I/O error: writing {path}: {e.strerror or e}", "io_error") from None
        return self._publish_file(model, path, dict(metadata or {}), limit)

    def publish_safetensors(self, model: str, path: str, *, metadata: Optional[Mapping[str, str]] = None,
                            timeout: Optional[float] = None) -> DaemonPublished:
        """Has the daemon publish a safetensors file where it lies (no
        copy; the file stays when the version is released), or a checkpoint
        directory, or a file with ``metadata`` merged in: those are written
        once as one file in the shared folder, as ``Peer.publish_safetensors``
        lays them out. Waits as ``publish``. Raises Error as ``publish``,
        and ``invalid_argument`` (no such file or directory, or one that is
        not safetensors; the daemon says so for a file it maps)."""
        _check_model(model)
        limit = self._limit(timeout, "publish_safetensors")
        if not os.path.isdir(path) and not metadata:
            done = self._request(_put_path({"cmd": "publish", "model": model}, "file", os.path.abspath(path)), limit)
            return DaemonPublished(self, model, done["version"], done["id"], os.path.abspath(path),
                                   safetensors.read_metadata(path), owned=False)
        try:
            header, runs, merged = safetensors.gather(path, metadata)
        except (OSError, ValueError) as e:
            raise Error(f"invalid argument: {e}") from None
        out = self._file_for(model)
        try:
            with open(out, "wb") as f:
                f.write(header)
                for body, begin, end in runs:
                    f.write(body[begin:end].data)
        except OSError as e:
            _remove(out)
            raise Error(f"I/O error: writing {out}: {e.strerror or e}", "io_error") from None
        return self._publish_file(model, out, merged, limit)

    def _publish_file(self, model: str, path: str, metadata: dict, timeout: float) -> DaemonPublished:
        """Has the daemon publish ``path``, a file this client wrote (and
        removes when the version is released, or now if the publish fails)."""
        try:
            done = self._request(_put_path({"cmd": "publish", "model": model}, "file", path), timeout)
        except Error:
            _remove(path)
            raise
        return DaemonPublished(self, model, done["version"], done["id"], path, metadata)

    def fetch(self, model: str, version: int = 0, timeout: Optional[float] = None) -> DaemonFetched:
        """Has the daemon fetch the version (0: the head) into a file here and
        waits until every byte is verified, at most ``timeout`` seconds
        (None: the client's): then the fetch is cancelled and its
        temporary file removed. Raises Error: ``timeout`` (cancelled);
        ``unavailable`` (no version of the model known yet, or no holder
        could finish it); ``not_found`` (that version is not known);
        ``io_error`` (the file could not be written; nothing is left);
        ``invalid_argument`` (a bad model name, version or timeout; of the
        wrong type, also a TypeError); those of ``status``."""
        check_version(version, "fetch")
        limit = self._limit(timeout, "fetch")
        path = self._file_for(model)
        done = self._request(_put_path({"cmd": "fetch", "model": model, "version": version}, "out", path), limit)
        return DaemonFetched(path, done.get("version", version), done.get("id", ""), model)

    def hold(self, model: str, version: int = 0, gpu=None,
             timeout: Optional[float] = None) -> Union[DaemonHeld, DaemonGpuHeld]:
        """Has the daemon keep version ``version`` (0: the head) of ``model``
        as a file in its hold folder and waits until every byte is verified.
        The first hold fetches it; the others, from any process of this node
        (the ranks of one engine), share that one file. With ``gpu`` (a GPU
        UUID, or a torch device such as ``"cuda:0"``) the daemon keeps it in
        that GPU's memory instead and hands it over by CUDA IPC
        (``DaemonGpuHeld``); it holds at most ``--gpu-buffers`` (2) versions
        on a GPU at once, so let go of the old one after loading the new.
        Waits at most ``timeout`` seconds (None: the client's) for the
        version to be verified; then the hold is given up. Raises Error:
        those of ``fetch``; ``resource_exhausted`` (the GPU holds
        ``--gpu-buffers`` versions already, named); ``invalid_argument`` (a
        ``gpu`` that is not one); for a GPU, those of ``DaemonGpuHeld``."""
        request = {"cmd": "hold", "model": _check_model(model), "version": check_version(version, "hold")}
        limit = self._limit(timeout, "hold")
        if gpu is not None:
            from ._cuda import uuid_of

            try:
                request["gpu"] = uuid_of(gpu)
            except ValueError as e:
                raise Error(f"invalid argument: {e}") from None
        s = self._connect(request, limit)
        try:
            line = self._answer(s, limit, self.control)
        except BaseException:
            s.close()
            raise
        s.settimeout(None)  # the hold lasts as long as the connection
        return DaemonGpuHeld(s, model, line) if gpu is not None else DaemonHeld(s, model, line)


def connect(control: str, directory: Optional[str] = None, timeout: float = 600.0) -> Daemon:
    """A client of the ``tensorhub peer`` daemon whose control socket is
    ``control``, sharing files in ``directory`` (default ``/dev/shm``);
    ``timeout``: the seconds a request may take where its call names none.
    Connects to nothing yet (each call does). Raises Error
    (``invalid_argument``; of the wrong type, also a TypeError) for a
    ``timeout`` that is not a number of seconds."""
    return Daemon(control, directory, timeout)


def _remove(path: str) -> None:
    """Removes a file this client wrote, if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
