"""The part of a trainer-to-rollout checkpoint engine that verl's and
NeMo-RL's adapters share. Those frameworks call ``prepare()`` on every
worker, hand all the answers to every worker before a transfer, then run the
trainer's ``send_weights`` beside every rollout's receive. The trainer's
master rank answers ``prepare()`` with the version it is about to publish,
so every rollout rank loads exactly that version; the publication fails if
it gets another number."""
from __future__ import annotations

from typing import Any, AsyncIterator, List, Optional, Tuple

import tensorhub as th

from ._common import Publisher, VersionLoader, explicit_version, next_version, reach


class GroupEngine:
    def __init__(self, bucket_size: int = 512 << 20, is_master: bool = False, *, model: str = "policy",
                 control: Optional[str] = None, peer_options: Optional[dict] = None, dtype=None,
                 timeout: float = 600.0, hub=None):
        """``is_master``: this is the trainer's sending rank; ``model``: the
        name versions are published under; ``control`` (the node's daemon)
        or ``peer_options`` (an in-process peer's Peer.start keywords);
        ``bucket_size``: the bytes of tensors a rollout loads at a time."""
        self.is_master, self.model, self.timeout, self.bucket_size = is_master, model, timeout, bucket_size
        self.hub = reach(control=control, peer=hub, peer_options=peer_options)
        self.publisher = Publisher(self.hub, model, dtype)
        self.loader = VersionLoader(self.hub, model, bucket_size, timeout)
        self.version: Optional[int] = None  # handed down for the transfer under way

    def prepare(self) -> dict:
        """The trainer's master rank: the version it will publish next."""
        return {"tensorhub_version": next_version(self.hub, self.model)} if self.is_master else {}

    @staticmethod
    def handed_down(metadata: List[Any]) -> int:
        """The one version named in the workers' ``prepare()`` answers."""
        named = {m["tensorhub_version"] for m in metadata if isinstance(m, dict) and "tensorhub_version" in m}
        if len(named) != 1:
            raise th.Error(f"invalid argument: the prepare() answers name {len(named)} versions to load; "
                           "exactly one trainer rank must be is_master")
        return explicit_version(named.pop())

    async def send_weights(self, weights) -> None:
        """The master rank publishes ``weights`` as the version handed down;
        the other trainer ranks iterate them too (a gather in each step of
        the iteration keeps the ranks in lockstep) and publish nothing."""
        if not self.is_master:
            for _ in weights:
                pass
            return
        if self.version is None:
            raise th.Error("invalid argument: no version was handed down: call prepare() on every worker first")
        self.publisher.publish(weights, expected=self.version)

    async def receive_batches(self) -> AsyncIterator[List[Tuple[str, object]]]:
        """Batches of (name, torch tensor) of the version handed down, each
        verified before it is yielded."""
        if self.version is None:
            raise th.Error("invalid argument: no version was handed down: call prepare() on every worker first")
        for batch in self.loader.batches(self.version):
            yield batch

    def close(self) -> None:
        self.publisher.close()
        self.loader.close()
