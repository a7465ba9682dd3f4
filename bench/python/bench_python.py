#!/usr/bin/env python3
"""The Python package against the daemon on loopback, in one run (a
benchmark: it reports numbers; the goals are in issue 29 and docs/python.md).

A Python peer publishes a version of 64 float32 tensors (--size in total)
from a torch state dict, in place. Then, one after the other:
  - a second Python peer fetches it into a preallocated state dict (in place);
  - a `tensorhub peer` daemon in the same swarm fetches it to a file in
    /dev/shm through `tensorhub fetch --control`;
each timed from its request to its verified end; then the Python peer
fetches it again through iter_tensors (64 MiB batches), in layer order and
in the order tensors complete, timing the first batch against the whole
fetch. Also: the publisher's
resident memory before and after publishing (in place: no copy of the
version), and the time to publish (hash) the dict against the daemon
publishing the same bytes from a safetensors file.

Usage: PYTHONPATH=build/python python3 bench/python/bench_python.py build/src/tensorhub [--size 1GiB] [--json]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch

import tensorhub as th
from tensorhub import safetensors


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def parse_size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    total = parse_size(args.size)
    per = total // 64 // 4  # float32 elements per tensor
    key = os.urandom(32)
    result = {"size_bytes": per * 4 * 64, "tensors": 64}
    with tempfile.TemporaryDirectory(prefix="tensorhub-pybench-", dir="/dev/shm") as d:
        torch.manual_seed(0)
        weights = {f"layers.{i}.weight": torch.randn(per) for i in range(64)}
        before = rss_mib()
        trainer = th.Peer.start(swarm_key=key, host="trainer", retain_head_replicas=0)
        t0 = time.monotonic()
        published = trainer.publish("policy", weights)
        result["python_publish_s"] = round(time.monotonic() - t0, 3)
        result["publisher_rss_growth_mib"] = round(rss_mib() - before, 1)

        # A Python peer fetches it in place.
        worker = th.Peer.start(swarm_key=key, host="worker", seeds=[trainer.gossip_address],
                               trusted_publishers=[trainer.id], retain_head_replicas=0)
        worker.wait_for_head("policy", timeout=30)
        into = {name: torch.empty_like(t) for name, t in weights.items()}
        t0 = time.monotonic()
        fetched = worker.fetch("policy", 1, into=into).wait(timeout=600)
        result["python_fetch_cold_s"] = round(time.monotonic() - t0, 3)  # fresh pages: first touch
        assert all(torch.equal(into[n], weights[n]) for n in list(weights)[:4])
        fetched.release()
        t0 = time.monotonic()
        fetched = worker.fetch("policy", 1, into=into).wait(timeout=600)
        result["python_fetch_s"] = round(time.monotonic() - t0, 3)  # the same tensors again, as a rollout's
        fetched.release()
        # Streaming: the first iter_tensors batch against the whole fetch,
        # in layer order and in the order tensors complete.
        for order in ("layer", "verified"):
            t0 = time.monotonic()
            fetched = worker.fetch("policy", 1)
            first, count = None, 0
            for batch in fetched.iter_tensors(kind="torch", batch_bytes=64 << 20, timeout=600, order=order):
                if first is None:
                    first = time.monotonic() - t0
                count += len(batch)
            fetched.wait(timeout=600)
            whole = time.monotonic() - t0
            result[f"iter_{order}_first_batch_s"] = round(first, 3)
            result[f"iter_{order}_fetch_s"] = round(whole, 3)
            result[f"iter_{order}_first_batch_fraction"] = round(first / whole, 3)
            assert count == 64
            fetched.release()
        worker.close()

        # A daemon in the same swarm fetches it to a file.
        def run(*a):
            out = subprocess.run([args.binary, *a], capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, out.stderr
            return out.stdout

        swarm_file = os.path.join(d, "swarm.key")
        with open(swarm_file, "w") as f:
            f.write(f"tensorhub-swarm-key {key.hex()}\n")
        os.chmod(swarm_file, 0o600)
        node_key = os.path.join(d, "node.key")
        node_id = run("keygen", "--out", node_key).split()[0]
        sock = os.path.join(d, "node.sock")
        daemon = subprocess.Popen([args.binary, "peer", "--listen", f"127.0.0.1:{free_port()}", "--data-listen",
                                   "127.0.0.1:0", "--key", node_key, "--swarm-key", swarm_file, "--trust", trainer.id, "--trust", node_id,
                                   "--control", sock, "--seed", trainer.gossip_address, "--host", "daemon",
                                   "--retain-replicas", "0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = th.connect(sock, directory=d)
            deadline = time.monotonic() + 30
            while not os.path.exists(sock) and time.monotonic() < deadline:
                time.sleep(0.05)
            client.wait_for_head("policy", timeout=30)
            out = os.path.join(d, "fetched.safetensors")
            t0 = time.monotonic()
            run("fetch", "--control", sock, "--model", "policy", "--version", "1", "--out", out)
            result["daemon_fetch_s"] = round(time.monotonic() - t0, 3)
            os.unlink(out)
            # The same bytes published by the daemon from a file.
            path = os.path.join(d, "same.safetensors")
            safetensors.write(path, ((n, t.numpy()) for n, t in weights.items()))
            t0 = time.monotonic()
            run("publish", "--control", sock, "--model", "other", path)
            result["daemon_publish_s"] = round(time.monotonic() - t0, 3)
        finally:
            daemon.terminate()
            daemon.wait(timeout=10)
        published.release()
        trainer.close()
    result["fetch_python_vs_daemon"] = round(result["daemon_fetch_s"] / result["python_fetch_s"], 3)
    result["publish_python_vs_daemon"] = round(result["python_publish_s"] / result["daemon_publish_s"], 3)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['size_bytes'] >> 20} MiB in 64 tensors: Python fetch {result['python_fetch_s']} s "
              f"(into fresh tensors {result['python_fetch_cold_s']} s), daemon "
              f"fetch {result['daemon_fetch_s']} s (Python at {result['fetch_python_vs_daemon']}x the daemon's "
              f"speed); publish in place {result['python_publish_s']} s vs daemon from a file "
              f"{result['daemon_publish_s']} s; publisher RSS +{result['publisher_rss_growth_mib']} MiB; first "
              f"iter_tensors batch at {result['iter_layer_first_batch_fraction']:.0%} of the fetch in layer "
              f"order, {result['iter_verified_first_batch_fraction']:.0%} in the order tensors complete")


if __name__ == "__main__":
    sys.exit(main())
