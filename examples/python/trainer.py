#!/usr/bin/env python3
"""A trainer: runs optimizer steps on a torch.nn.Transformer and publishes
the weights after each step, in place (no copy), through an in-process
TensorHub peer. It keeps a version served until --replicas workers hold it,
then releases it and steps again (the step changes the very memory it served).

Prints one JSON line per event: {"id", "gossip"} first, then {"version",
"digest"} per step (digest: SHA-256 of the model's output on a fixed batch).

  PYTHONPATH=build/python python3 examples/python/trainer.py --swarm-key HEX --steps 3 --replicas 1
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as shared  # noqa: E402
import tensorhub as th  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--swarm-key", required=True, help="64 hex digits, the same for every member")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1, help="workers that must hold a version before the next step")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()

    peer = th.Peer.start(listen=args.listen, swarm_key=bytes.fromhex(args.swarm_key), host="trainer")
    print(json.dumps({"id": peer.id, "gossip": peer.gossip_address}), flush=True)
    model = shared.build()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(7)
    for step in range(1, args.steps + 1):
        model.train()
        src, tgt = torch.randn(4, 5, 32, generator=g), torch.randn(4, 3, 32, generator=g)
        loss = model(src, tgt).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        digest = shared.output_digest(model)
        with peer.publish("transformer", model.state_dict()) as version:
            print(json.dumps({"version": version.version, "digest": digest, "loss": float(loss)}), flush=True)
            version.wait_replicated(args.replicas, timeout=args.timeout)
    peer.close()


if __name__ == "__main__":
    main()
