"""What the Python tests share: a publisher and a fetcher on loopback."""
import pytest

import tensorhub as th

SWARM = bytes(range(32))


@pytest.fixture
def pair():
    """A trainer and a worker that trusts it, in one swarm, left at the end.
    No retention: a release lets go at once (with it, the last holder of the
    head waits up to a minute for another to hold it)."""
    small = dict(swarm_key=SWARM, shard_size=64 << 10, block_size=16 << 10, retain_head_replicas=0)
    trainer = th.Peer.start(host="trainer", **small)
    worker = th.Peer.start(host="worker", seeds=[trainer.gossip_address], trusted_publishers=[trainer.id], **small)
    yield trainer, worker
    worker.close()
    trainer.close()
