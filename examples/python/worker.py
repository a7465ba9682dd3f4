#!/usr/bin/env python3
"""A rollout worker: follows the trainer's versions and loads each into its
own model's parameters in place (fetch(into=model.state_dict())), then
computes its output on the fixed batch. Prints {"version", "digest"} per
version. It serves each version from its parameters until the next appears.

  PYTHONPATH=build/python python3 examples/python/worker.py --swarm-key HEX --seed HOST:PORT --trust ID --versions 3
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as shared  # noqa: E402
import tensorhub as th  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--swarm-key", required=True)
    ap.add_argument("--seed", required=True, help="HOST:PORT of a peer to join through")
    ap.add_argument("--trust", required=True, help="the trainer's id (public key, hex)")
    ap.add_argument("--versions", type=int, default=3)
    ap.add_argument("--host", default="worker")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--linger", type=float, default=5, help="seconds to serve the last version before leaving")
    args = ap.parse_args()

    peer = th.Peer.start(listen=args.listen, swarm_key=bytes.fromhex(args.swarm_key), seeds=[args.seed],
                         trusted_publishers=[args.trust], host=args.host, retain_head_replicas=0)
    model = shared.build()
    fetched = None
    for version in range(1, args.versions + 1):
        peer.wait_for_head("transformer", after=version - 1, timeout=args.timeout)
        # The version held so far is served (from the parameters) until the
        # next one comes: only then may the parameters change.
        if fetched is not None:
            fetched.release()
        fetched = peer.fetch("transformer", version, into=model.state_dict()).wait(timeout=args.timeout)
        print(json.dumps({"version": version, "digest": shared.output_digest(model)}), flush=True)
    # The trainer releases the last version once enough workers proved they
    # hold it: serve it a little longer.
    time.sleep(args.linger)
    fetched.release()
    peer.close()


if __name__ == "__main__":
    main()
