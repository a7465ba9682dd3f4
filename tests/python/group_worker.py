"""One process of tests/python/test_group_processes.py: a trainer rank that
trains a small torch model and publishes its FSDP-style dim-0 shard as its
part, or a rank of an inference instance that stages its tensor-parallel
slice of the version through its group (fetch by selection) and commits it. Talks to the test as JSON lines (stdout) and
waits for its words (stdin)."""
import hashlib
import json
import sys
import time

import numpy as np
import torch

import tensorhub as th

SMALL = dict(shard_size=64 << 10, block_size=16 << 10, retain_head_replicas=0)


def say(**event):
    event["at"] = time.time()
    print(json.dumps(event), flush=True)


def trained_model():
    """The policy every trainer rank computes identically: a two-layer MLP
    after three steps of SGD on fixed data."""
    torch.manual_seed(48)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    data, target = torch.randn(32, 64), torch.randn(32, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(data), target).backward()
        optimizer.step()
    return {name: p.detach().contiguous() for name, p in model.state_dict().items()}


def tensor_parallel_slices(state, rank, world):
    """Megatron's rules for the MLP: layer 0 column-parallel (rows of its
    weight and its bias), layer 2 row-parallel (columns of its weight; its
    bias whole)."""
    rows = state["0.weight"].shape[0] // world
    cols = state["2.weight"].shape[1] // world
    return {
        "0.weight": state["0.weight"][rank * rows:(rank + 1) * rows],
        "0.bias": state["0.bias"][rank * rows:(rank + 1) * rows],
        "2.weight": state["2.weight"][:, rank * cols:(rank + 1) * cols],
        "2.bias": state["2.bias"],
    }


def selection(rank, world):
    """The same rules as tensorhub.layouts states them: what the rank fetches."""
    rules = th.layouts.Rules([(r"^0\.(weight|bias)$", th.layouts.split(0)), (r"^2\.weight$", th.layouts.split(1))],
                             default=th.layouts.replicate)
    return rules.select({"0.weight": (128, 64), "0.bias": (128,), "2.weight": (64, 128), "2.bias": (64,)}, world, rank)


def digest(tensors):
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(np.ascontiguousarray(tensors[name].numpy() if hasattr(tensors[name], "numpy") else tensors[name]).tobytes())
    return h.hexdigest()


def trainer(seed, key_file, trusted, rank, world):
    peer = th.Peer.start(host=f"trainer-{rank}", seeds=[seed], key_file=key_file, trusted_publishers=trusted,
                         swarm_key=bytes(range(32)), **SMALL)
    full = trained_model()
    part = {}
    for name, t in full.items():
        n = t.shape[0] // world
        index = (slice(rank * n, (rank + 1) * n),) + (slice(None),) * (t.dim() - 1)
        part[name] = th.Slice(t[rank * n:(rank + 1) * n].clone(), tuple(t.shape), index)
    published = peer.publish("policy", part, version=1, part=(rank, world))
    published.wait_sealed(timeout=30)
    say(event="sealed")
    sys.stdin.read()  # serve until the test is done
    published.release()
    peer.close()


def rank_of_instance(seed, trusted, group, size, rank, version):
    peer = th.Peer.start(host=f"{group}-{rank}", seeds=[seed], trusted_publishers=trusted, swarm_key=bytes(range(32)),
                         **SMALL)
    g = peer.group(group, size, rank)
    deadline = time.monotonic() + 30
    while True:  # the version is handed down; it may not be known here yet
        try:
            fetched = g.fetch("policy", version, select=selection(rank, size))  # its slice alone
            break
        except th.Error as e:
            if e.code not in ("unavailable", "not_found") or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    # The test kills a rank next: wait until this rank knows every rank's
    # peer (a rank killed before its claim spread is one that never joined).
    while time.monotonic() < deadline:
        ranks = peer.status()["groups"][0]["ranks"]
        if all(r["self"] or r["claimed_by"] for r in ranks):
            break
        time.sleep(0.05)
    say(event="staging")
    sys.stdin.readline()  # "go"
    while True:
        try:
            g.commit(version, timeout=max(0.1, deadline - time.monotonic()))
            break
        except th.Error as e:
            say(event="failed", code=e.code, message=str(e))
            if e.code != "aborted" or time.monotonic() > deadline:
                sys.exit(1)
            time.sleep(0.2)
    say(event="committed", committed=g.committed("policy"), slices=digest(fetched.state_dict()),
        bytes_received=fetched.progress().bytes_received)
    sys.stdin.read()
    fetched.release()
    g.leave()
    peer.close()


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "trainer":
        trainer(sys.argv[2], sys.argv[3], sys.argv[4].split(","), int(sys.argv[5]), int(sys.argv[6]))
    else:
        rank_of_instance(sys.argv[2], sys.argv[3].split(","), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]),
                         int(sys.argv[7]))
