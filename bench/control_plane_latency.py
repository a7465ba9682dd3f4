#!/usr/bin/env python3
"""How long `tensorhub status` takes while the same daemon publishes a large
version and fetches another, measured through the CLI as a user runs it.

Daemon S publishes model "other"; daemon T learns it. Then, on T at once:
`tensorhub publish` of "policy" (SIZE) and `tensorhub fetch` of "other"
(SIZE) into a file, while `tensorhub status` runs on a fixed schedule, one
call every 20 ms (or right after the previous one returns, when it took
longer). What a status call arriving at a random moment waits is recorded,
process start to exit: a call held up also stands for the calls due
meanwhile, each from its own slot. For an idle second before, and for the
busy phase until the publish and the fetch have both returned: p50 / p99 /
max; with several binaries, runs alternate between them.

The goal (issue 47): p99 under 20 ms while busy.

A virtual machine's free page reporting is held off for the run, as
run-cluster does (bench/page_reporting.py says why); --keep-page-reporting
leaves it on, and each run's line says which it was.

Usage: control_plane_latency.py [--size 4GiB] [--runs 3] [--hash xxh3-128|blake2b-256] [--probe cli|socket]
                                [--keep-page-reporting] [--json] BINARY [BINARY...]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cli"))
sys.path.insert(0, HERE)
from page_reporting import PageReportingHold  # noqa: E402
from peer_processes import Swarm, wait_for  # noqa: E402

INTERVAL = 0.02  # seconds between scheduled status calls


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(p * len(ordered) + 0.5)) - 1))]


def summary(values):
    return {"n": len(values), "p50_ms": percentile(values, 0.50) * 1e3, "p99_ms": percentile(values, 0.99) * 1e3,
            "max_ms": max(values) * 1e3 if values else float("nan")}


def status_over_socket(control):
    """A status request straight on the control socket: the daemon's own
    answer time, without a client process to start."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(control)
        s.sendall(b'{"cmd":"status"}\n')
        while s.recv(1 << 16):
            pass


def one_run(binary, models, size, hash_name, probe):
    with tempfile.TemporaryDirectory(prefix="tensorhub-cplane-") as workdir:
        swarm = Swarm(binary, workdir)
        try:
            swarm.publisher = None
            swarm.start("s", extra=("--hash", hash_name))
            swarm.publisher = "s"
            swarm.keygen("t")
            swarm.start("t", seeds=["s"], extra=("--trust", swarm.pubkeys["t"], "--hash", hash_name))
            out = swarm.publish("s", "other", models["other"])
            assert out.returncode == 0, out.stderr
            wait_for("t to learn other", lambda: (swarm.status("t") or {}).get("heads", {}).get("other"), 60)

            control = swarm.control("t")

            def sample(until):
                """Status calls on a fixed schedule (every INTERVAL) until
                `until()`: a call held up also stands for the calls due
                meanwhile, each waiting from its own slot until that call
                returns (what a request arriving at a random moment waits)."""
                waits, next_at = [], time.monotonic()
                while not until():
                    now = time.monotonic()
                    if now < next_at:
                        time.sleep(next_at - now)
                    if probe == "socket":
                        status_over_socket(control)
                    else:
                        done = subprocess.run([binary, "status", "--control", control], stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
                        assert done.returncode == 0
                    end = time.monotonic()
                    while next_at <= end:
                        waits.append(end - next_at)
                        next_at += INTERVAL
                return waits

            idle_end = time.monotonic() + 1.0
            idle = sample(lambda: time.monotonic() >= idle_end)
            started = time.monotonic()
            publish = subprocess.Popen([binary, "publish", "--control", control, "--model", "policy",
                                        models["policy"]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            fetch = subprocess.Popen([binary, "fetch", "--control", control, "--model", "other", "--out",
                                      os.path.join(workdir, "fetched.safetensors")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            busy = sample(lambda: publish.poll() is not None and fetch.poll() is not None)
            elapsed = time.monotonic() - started
            assert publish.returncode == 0, publish.stderr.read()
            assert fetch.returncode == 0, fetch.stderr.read()
            return {"idle": summary(idle), "busy": summary(busy), "busy_seconds": elapsed}, busy
        finally:
            swarm.stop_all()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--size", default="4GiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hash", default="xxh3-128", help="the daemons' shard hash: xxh3-128 or blake2b-256")
    parser.add_argument("--probe", choices=("cli", "socket"), default="cli",
                        help="cli: tensorhub status, as a user runs it; socket: the request on the control socket")
    parser.add_argument("--keep-page-reporting", action="store_true",
                        help="leave a virtual machine's free page reporting on (by default the run holds it off)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binaries = [os.path.abspath(b) for b in args.binaries]
    # A SIGTERM unwinds like an exception: page reporting comes back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    models_dir = tempfile.mkdtemp(prefix="tensorhub-cplane-models-")
    reporting = PageReportingHold(args.keep_page_reporting)
    try:
        models = {}
        for name, seed in (("policy", 1), ("other", 2)):
            models[name] = os.path.join(models_dir, name + ".safetensors")
            made = subprocess.run([binaries[0], "synth-model", "--out", models[name], "--size", args.size,
                                   "--tensor-size", "64MiB", "--seed", str(seed)], capture_output=True, text=True)
            assert made.returncode == 0, made.stderr
        results, busy_waits = [], {binary: [] for binary in binaries}
        for run in range(args.runs):
            for binary in binaries:
                r, waits = one_run(binary, models, args.size, args.hash, args.probe)
                busy_waits[binary] += waits
                r.update({"binary": binary, "run": run, "size": args.size, "hash": args.hash, "probe": args.probe,
                          "page_reporting": reporting.state})
                results.append(r)
                b = r["busy"]
                print(f"{binary} run {run}: busy {r['busy_seconds']:.1f} s, status p50 {b['p50_ms']:.1f} ms, "
                      f"p99 {b['p99_ms']:.1f} ms, max {b['max_ms']:.1f} ms over {b['n']} calls "
                      f"(idle p99 {r['idle']['p99_ms']:.1f} ms; page reporting {reporting.state})", flush=True)
        # Every run's busy calls together: a p99 over more calls than one run has.
        for binary, waits in busy_waits.items():
            b = summary(waits)
            print(f"{binary} all {args.runs} runs: status p50 {b['p50_ms']:.1f} ms, p99 {b['p99_ms']:.1f} ms, "
                  f"max {b['max_ms']:.1f} ms over {b['n']} calls", flush=True)
        if args.json:
            print(json.dumps(results, indent=1))
    finally:
        reporting.restore()
        shutil.rmtree(models_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
