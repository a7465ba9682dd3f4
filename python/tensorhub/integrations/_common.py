"""What the adapters share: reaching a peer, the explicit version a group
loads, loading it in batches, and publishing a trainer's weights."""
from __future__ import annotations

import json
import threading
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import tensorhub as th
from tensorhub._tensors import cast

# One in-process peer per process and set of options: the adapters of one
# process (a trainer's, a rollout worker's) share it.
_peers: Dict[str, th.Peer] = {}
_peers_lock = threading.Lock()


def reach(control: Optional[str] = None, peer=None, peer_options: Optional[dict] = None):
    """The peer an adapter uses: ``peer`` (a Peer or a daemon client) as
    given; else the daemon listening on ``control`` (no compiled code in the
    caller's process: what inference engines want); else this process's
    in-process peer started with ``peer_options`` (Peer.start's keywords)."""
    if peer is not None:
        return peer
    if control:
        return th.connect(control)
    if peer_options:
        key = json.dumps(peer_options, sort_keys=True, default=str)
        with _peers_lock:
            if key not in _peers:
                _peers[key] = th.Peer.start(**peer_options)
            return _peers[key]
    raise th.Error("invalid argument: an adapter needs control= (the node's tensorhub daemon) "
                   "or peer_options= (an in-process peer)")


def explicit_version(version) -> int:
    """``version`` when it names one version (a positive integer). Every rank
    of a group must load the same version, so adapters never resolve
    "the latest" on their own."""
    if isinstance(version, bool) or not isinstance(version, int) or version <= 0:
        raise th.Error(f"invalid argument: version {version!r}: the adapters load an explicit version "
                       "(a positive integer handed down by the trainer), never 'the latest'")
    return version


def next_version(hub, model: str) -> int:
    """The number this peer's next publication of ``model`` will get (its
    head + 1): what a trainer hands down before it publishes."""
    head = hub.latest(model)
    return 1 if head is None else head.version + 1


class VersionLoader:
    """Loads explicit versions of one model in batches of (name, torch
    tensor). The version loaded last stays held (the node's copy, served to
    the swarm and mapped by its other ranks) until the next one is loaded."""

    def __init__(self, hub, model: str, batch_bytes: int = 512 << 20, timeout: Optional[float] = 600.0,
                 order: str = "verified"):
        """``order``: as iter_tensors takes it; "verified" (the default)
        hands each tensor over as soon as it is complete, since the engines'
        load_weights take tensors in any order."""
        self.hub, self.model, self.batch_bytes, self.timeout, self.order = hub, model, batch_bytes, timeout, order
        self.current = None  # the handle of the version loaded last
        self.loaded = 0  # its number

    def batches(self, version: int) -> Iterator[List[Tuple[str, object]]]:
        """Every tensor of ``version``, verified, in the version's order.
        With a daemon, the node's one held file; in process, batches come
        as soon as their bytes are verified. Raises th.Error when the
        version cannot be had: nothing unverified is ever yielded."""
        version = explicit_version(version)
        self.hub.wait_for_head(self.model, after=version - 1, timeout=self.timeout)  # the trainer may still publish it
        if isinstance(self.hub, th.Peer):
            handle = self.hub.fetch(self.model, version)
        else:
            handle = self.hub.hold(self.model, version)
        try:
            yield from handle.iter_tensors(batch_bytes=self.batch_bytes, kind="torch", timeout=self.timeout,
                                           order=self.order)
            if isinstance(handle, th.Fetched):
                handle.wait(self.timeout)
        except BaseException:
            handle.release()
            raise
        previous, self.current, self.loaded = self.current, handle, version
        if previous is not None:
            previous.release()

    def load(self, version: int, load_weights: Callable[[list], object]) -> int:
        """Calls ``load_weights(batch)`` for every batch of ``version``;
        returns the version."""
        for batch in self.batches(version):
            load_weights(batch)
        return version

    def close(self) -> None:
        if self.current is not None:
            self.current.release()
            self.current = None


class Publisher:
    """A trainer's publications of one model: each is served until the next
    one is published (a version a slow rollout is still fetching is not
    pulled from under it), and a publication must get the number that was
    handed down for it."""

    def __init__(self, hub, model: str, dtype=None):
        self.hub, self.model, self.dtype = hub, model, dtype
        self.current = None

    def publish(self, weights: Iterable[Tuple[str, object]], expected: Optional[int] = None,
                metadata: Optional[dict] = None):
        """Publishes ``weights``, each floating-point tensor cast to the
        rollout dtype as it arrives (so the trainer-dtype copies are not all
        alive at once)."""
        if self.dtype is not None:
            weights = [(name, cast(name, value, self.dtype)) for name, value in weights]
        published = self.hub.publish(self.model, list(weights), metadata=metadata)
        if expected is not None and published.version != expected:
            published.release()
            raise th.Error(f"already exists: {self.model} was published as v{published.version}, "
                           f"not the v{expected} handed down to the rollouts (another publisher?)")
        previous, self.current = self.current, published
        if previous is not None:
            previous.release()
        return published

    def close(self) -> None:
        if self.current is not None:
            self.current.release()
            self.current = None
