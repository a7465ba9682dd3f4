#!/usr/bin/env python3
"""How long `tensorhub status` takes while the same daemon publishes a large
version and fetches another, measured through the CLI as a user runs it.

Daemon S publishes model "other"; daemon T learns it. Then, on T at once:
`tensorhub publish` of "policy" (SIZE) and `tensorhub fetch` of "other"
(SIZE) into a file, while `tensorhub status` runs back to back in a loop.
Each status call's wall time (process start to exit, what a user or a
monitoring script waits) is recorded: for an idle second before, and for the
busy phase until the publish and the fetch have both returned. p50 / p99 /
max per phase; with several binaries, runs alternate between them.

The goal (issue 47): p99 under 20 ms while busy.

Usage: control_plane_latency.py [--size 4GiB] [--runs 3] [--json] BINARY [BINARY...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cli"))
from peer_processes import Swarm, wait_for  # noqa: E402


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(p * len(ordered) + 0.5)) - 1))]


def summary(values):
    return {"n": len(values), "p50_ms": percentile(values, 0.50) * 1e3, "p99_ms": percentile(values, 0.99) * 1e3,
            "max_ms": max(values) * 1e3 if values else float("nan")}


def one_run(binary, models, size):
    with tempfile.TemporaryDirectory(prefix="tensorhub-cplane-") as workdir:
        swarm = Swarm(binary, workdir)
        try:
            swarm.publisher = None
            swarm.start("s")
            swarm.publisher = "s"
            swarm.start("t", seeds=["s"], extra=("--trust", swarm.pubkeys.get("t") or swarm.keygen("t")))
            out = swarm.publish("s", "other", models["other"])
            assert out.returncode == 0, out.stderr
            wait_for("t to learn other", lambda: (swarm.status("t") or {}).get("heads", {}).get("other"), 60)

            control = swarm.control("t")

            def status_once():
                t0 = time.monotonic()
                done = subprocess.run([binary, "status", "--control", control], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
                assert done.returncode == 0
                return time.monotonic() - t0

            idle = []
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                idle.append(status_once())
            started = time.monotonic()
            publish = subprocess.Popen([binary, "publish", "--control", control, "--model", "policy",
                                        models["policy"]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            fetch = subprocess.Popen([binary, "fetch", "--control", control, "--model", "other", "--out",
                                      os.path.join(workdir, "fetched.safetensors")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            busy = []
            while publish.poll() is None or fetch.poll() is None:
                busy.append(status_once())
            elapsed = time.monotonic() - started
            assert publish.returncode == 0, publish.stderr.read()
            assert fetch.returncode == 0, fetch.stderr.read()
            return {"idle": summary(idle), "busy": summary(busy), "busy_seconds": elapsed}
        finally:
            swarm.stop_all()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--size", default="4GiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binaries = [os.path.abspath(b) for b in args.binaries]
    models_dir = tempfile.mkdtemp(prefix="tensorhub-cplane-models-")
    try:
        models = {}
        for name, seed in (("policy", 1), ("other", 2)):
            models[name] = os.path.join(models_dir, name + ".safetensors")
            made = subprocess.run([binaries[0], "synth-model", "--out", models[name], "--size", args.size,
                                   "--tensor-size", "64MiB", "--seed", str(seed)], capture_output=True, text=True)
            assert made.returncode == 0, made.stderr
        results = []
        for run in range(args.runs):
            for binary in binaries:
                r = one_run(binary, models, args.size)
                r.update({"binary": binary, "run": run, "size": args.size})
                results.append(r)
                b = r["busy"]
                print(f"{binary} run {run}: busy {r['busy_seconds']:.1f} s, status p50 {b['p50_ms']:.1f} ms, "
                      f"p99 {b['p99_ms']:.1f} ms, max {b['max_ms']:.1f} ms over {b['n']} calls "
                      f"(idle p99 {r['idle']['p99_ms']:.1f} ms)", flush=True)
        if args.json:
            print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(models_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
