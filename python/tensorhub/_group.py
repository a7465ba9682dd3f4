"""``tensorhub.Group``: one rank of a model-parallel group (the ranks of one
inference instance), which stages a version and commits it only when every
rank holds its stage verified. Private module; the class is the package's."""
from __future__ import annotations

from typing import Optional

from ._errors import ArgumentTypeError, Error, native_timeout
from ._handles import Fetched


class Group:
    """Made by ``Peer.group(name, size, rank)``. The protocol
    (docs/parts.md, "Group commit"): every rank ``fetch``es the version the
    trainer or controller hands down (staging it), then calls ``commit``;
    ``commit`` returns only when every rank of the group holds its stage
    verified and has called ``commit``, and otherwise raises ``Error`` naming each rank at fault as
    ``rank N``, so no rank loads a version its group cannot. The ranks find
    each other through gossip and then exchange their states directly
    (every 0.5 s); a rank not heard from for 2 s is lost. ``leave()`` (or
    leaving a ``with`` block) ends this rank's part in the group."""

    def __init__(self, peer, native):
        self._peer = peer
        self._native = native
        self._name, self._size, self._rank = native.name, native.size, native.rank

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    @property
    def rank(self) -> int:
        return self._rank

    def fetch(self, model: str, version: int, *, into=None, select=None) -> Fetched:
        """Stages ``model`` v``version`` for the group: fetches it as
        ``Peer.fetch`` does (``into`` likewise) and tells the other ranks how
        far it has come; with ``select`` (as ``Peer.fetch``) this rank's
        selection, which the commit then waits for. ``version`` is explicit (the trainer's number): no
        rank resolves the head on its own. Releasing the returned handle
        before the group commits fails this rank's stage. Raises as
        ``Peer.fetch``; ``invalid_argument`` for a version that is not a
        positive int."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArgumentTypeError(f"Group.fetch(model, version): version must be an int, not "
                                    f"{type(version).__name__}")
        if version <= 0:
            raise Error(f"invalid argument: Group.fetch: version {version}: a group stages an explicit version "
                        "(the trainer's number), not the latest")
        if self._peer._native is None:
            raise Error("cancelled: the peer of this rank is closed")
        return self._peer._fetch(model, version, into, self._native.fetch, select, self._native.fetch_selection)

    def commit(self, version: int, timeout: Optional[float] = None) -> None:
        """Returns once every rank of the group holds its stage of
        ``version`` verified (every model this rank staged at that number)
        and has called ``commit`` for it: a barrier. A commit that raises
        withdraws this rank; a rank that saw it waiting may have committed
        meanwhile, so after an error check ``committed(model)``: when it is
        ``version``, ``commit`` again succeeds at once.
        Raises Error: ``aborted`` at once when a rank is lost (not heard from
        for 2 s, or gone), cannot stage it (its fetch failed or was
        released), or staged another version under that number: the message
        names each as ``rank N: why``; ``timeout`` when ranks still stage
        it or have not joined at ``timeout`` seconds (named likewise);
        ``invalid_argument`` (this rank staged no such version)."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArgumentTypeError(f"Group.commit(version): version must be an int, not {type(version).__name__}")
        if version <= 0:
            raise Error(f"invalid argument: Group.commit: version {version} is not a version number")
        self._native.commit(version, native_timeout(timeout, "Group.commit"))

    def committed(self, model: str) -> Optional[int]:
        """The highest version of ``model`` a rank of the group (this one
        included) says it committed: what a late rank stages and commits to
        catch up. None when none says so yet. Raises Error (``cancelled``)
        after ``leave()`` or once the peer has closed."""
        return self._native.committed(model)

    def leave(self) -> None:
        """Ends this rank's part in the group (its peer's record drops the
        claim). Idempotent; raises nothing."""
        self._native.leave()

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc) -> None:
        self.leave()

    def __repr__(self) -> str:
        return f"tensorhub.Group({self.name!r}, rank {self.rank} of {self.size})"
