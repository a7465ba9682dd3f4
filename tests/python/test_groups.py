"""Group commit from Python, in one process: the ranks of an instance stage
a version and commit it together; a rank that lets go of its stage fails the
others' commit, naming it; a late rank catches up to the committed version."""
import threading
import time

import numpy as np
import pytest

import tensorhub as th

SWARM = bytes(range(32))
SMALL = dict(swarm_key=SWARM, shard_size=64 << 10, block_size=16 << 10, retain_head_replicas=0)


def model(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((256, 128), dtype=np.float32), "b": rng.standard_normal((128,), dtype=np.float32)}


@pytest.fixture
def swarm():
    """A trainer that published v1, and a maker of more peers that trust it."""
    trainer = th.Peer.start(host="trainer", **SMALL)
    peers = []

    def start(host):
        p = th.Peer.start(host=host, seeds=[trainer.gossip_address], trusted_publishers=[trainer.id], **SMALL)
        peers.append(p)
        return p

    full = model(1)
    published = trainer.publish("policy", full)
    yield trainer, full, start
    for p in reversed(peers):
        p.close()
    published.release()
    trainer.close()


def instance(start, name, size):
    """`size` peers that know v1, each joined to group `name` as its rank:
    (peers, groups)."""
    ranks = [start(f"{name}-{r}") for r in range(size)]
    for r in ranks:
        r.wait_for_head("policy", timeout=20)
    return ranks, [ranks[r].group(name, size, r) for r in range(size)]


def commit_all(groups, version, timeout, retry_aborted=False):
    """Every group's commit at once, as each rank's process would: the
    outcome of each (None: committed; else the Error). `retry_aborted`: a
    rank whose commit is aborted tries again until the timeout, as a rank
    waiting for a replacement of a failed rank does."""
    outcomes = [None] * len(groups)

    def run(i):
        deadline = time.monotonic() + timeout
        while True:
            try:
                groups[i].commit(version, timeout=max(0.1, deadline - time.monotonic()))
                outcomes[i] = None
                return
            except th.Error as e:
                outcomes[i] = e
                if not retry_aborted or e.code != "aborted" or time.monotonic() >= deadline:
                    return
                time.sleep(0.2)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(groups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_three_ranks_stage_and_commit_together(swarm):
    _, full, start = swarm
    ranks, groups = instance(start, "inst", 3)
    assert (groups[1].name, groups[1].size, groups[1].rank) == ("inst", 3, 1)
    with pytest.raises(th.Error) as e:
        groups[0].commit(1, timeout=1)
    assert e.value.code == "invalid_argument" and "stages no version 1" in str(e.value)
    staged = [g.fetch("policy", 1) for g in groups]
    assert commit_all(groups, 1, timeout=30) == [None, None, None]
    status = ranks[0].status()["groups"]
    assert [(g["name"], g["size"], g["rank"]) for g in status] == [("inst", 3, 0)]
    seen = {r["rank"]: r for r in status[0]["ranks"]}
    assert seen[0]["self"] and seen[0]["stages"][0]["state"] == "committed"
    assert seen[1]["claimed_by"] == [ranks[1].id] and 0 <= seen[1]["heard_ms_ago"] < 2000
    for g, f in zip(groups, staged):
        assert g.committed("policy") == 1
        f.wait(timeout=5)
        state = f.state_dict()
        assert all(np.array_equal(state[k], full[k]) for k in full)
    # The version is explicit: no rank resolves the head on its own.
    with pytest.raises(th.Error) as e:
        groups[0].fetch("policy", 0)
    assert e.value.code == "invalid_argument"
    with pytest.raises(TypeError):
        groups[0].fetch("policy", "1")
    with pytest.raises(th.Error) as e:
        ranks[0].group("inst", 3, 0)
    assert e.value.code == "already_exists"
    with pytest.raises(th.Error) as e:
        ranks[0].group("other", 2, 2)
    assert e.value.code == "invalid_argument"
    groups[0].leave()
    with pytest.raises(th.Error) as e:
        groups[0].committed("policy")
    assert e.value.code == "cancelled"
    assert repr(groups[1]) == "tensorhub.Group('inst', rank 1 of 3)"


def test_tensor_parallel_ranks_stage_their_selections_and_commit_together(swarm):
    _, full, start = swarm
    _, groups = instance(start, "tp", 2)
    # Megatron's rules for a 2-way tensor-parallel instance: "w" by rows, "b" replicated.
    selections = [th.layouts.Rules([(r"^w$", th.layouts.split(0))], default=th.layouts.replicate).select(
        {"w": (256, 128), "b": (128,)}, 2, rank) for rank in range(2)]
    staged = [g.fetch("policy", 1, select=s) for g, s in zip(groups, selections)]
    assert commit_all(groups, 1, timeout=30) == [None, None]
    for rank, (g, f) in enumerate(zip(groups, staged)):
        assert g.committed("policy") == 1
        f.wait(timeout=5)
        state = f.state_dict()
        assert np.array_equal(state["w"], full["w"][rank * 128:(rank + 1) * 128])
        assert np.array_equal(state["b"], full["b"])


def test_a_rank_that_lets_go_of_its_stage_fails_the_commit_naming_it_and_a_late_rank_catches_up(swarm):
    _, full, start = swarm
    ranks, groups = instance(start, "g", 2)
    first = groups[0].fetch("policy", 1)
    second = groups[1].fetch("policy", 1)
    second.wait(timeout=20)
    second.release()  # rank 1 lets go before the group commits
    # Rank 1 tells the group at once; give its message time to cross (rank
    # 0 would otherwise wait for rank 1 to commit, until the timeout).
    time.sleep(1)
    with pytest.raises(th.Error) as e:
        groups[0].commit(1, timeout=20)
    assert e.value.code == "aborted", str(e.value)
    assert "rank 1: cannot stage 'policy' v1" in str(e.value)
    assert "rank 0" not in str(e.value)
    assert groups[0].committed("policy") is None

    # Rank 1 restarts as a new peer: it stages v1 again and the group commits.
    groups[1].leave()
    ranks[1].close()
    late = start("g-1-restarted")
    late.wait_for_head("policy", timeout=20)
    late_group = late.group("g", 2, 1)
    again = late_group.fetch("policy", 1)
    # Rank 0 tries again until the new rank 1 has staged it.
    assert commit_all([groups[0], late_group], 1, timeout=30, retry_aborted=True) == [None, None]
    assert late_group.committed("policy") == 1
    assert np.array_equal(again.state_dict()["w"], full["w"])
    first.release()


def test_a_rank_that_leaves_fails_the_commit_at_once_and_a_closed_peer_cancels_its_group(swarm):
    _, _, start = swarm
    ranks, groups = instance(start, "l", 2)
    staged = [g.fetch("policy", 1) for g in groups]
    outcome = {}

    def commit():
        began = time.monotonic()
        try:
            groups[0].commit(1, timeout=60)
        except th.Error as e:
            outcome["error"] = e
        outcome["took"] = time.monotonic() - began
    waiter = threading.Thread(target=commit)
    waiter.start()
    time.sleep(0.5)
    staged[1].release()
    groups[1].leave()
    ranks[1].close()  # leaves the swarm gracefully: gossip says so at once
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    e = outcome["error"]
    assert e.code == "aborted" and "rank 1:" in str(e), str(e)
    assert outcome["took"] < 10, outcome

    # Commit and leave on two threads at once: one wins, nothing breaks.
    racing = ranks[0].group("race", 2, 0)
    racing.fetch("policy", 1)
    errors = []

    def committing():
        try:
            racing.commit(1, timeout=2)
        except th.Error as err:
            errors.append(err.code)
    t = threading.Thread(target=committing)
    t.start()
    time.sleep(0.2)
    racing.leave()
    t.join(timeout=10)
    assert not t.is_alive() and errors and errors[0] in ("timeout", "cancelled", "aborted")

    # A closed peer: its group's calls raise cancelled.
    ranks[0].close()
    for call in (lambda: groups[0].committed("policy"), lambda: groups[0].fetch("policy", 1),
                 lambda: groups[0].commit(1, timeout=1)):
        with pytest.raises(th.Error) as err:
            call()
        assert err.value.code == "cancelled", str(err.value)
    staged[0].release()
