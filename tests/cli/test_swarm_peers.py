#!/usr/bin/env python3
"""Multi-process swarm tests on loopback with real `tensorhub peer` processes.

1. 8 peers: one publishes, seven fetch; every file matches byte for byte. The
   publisher's daemon fetches its own version into a file too.
2. A holder is SIGKILLed mid-fetch; every survivor still completes verified.
3. A peer serving corrupted bytes (test-only flag) is detected and avoided.
4. A late joiner catches up to the head.
5. A peer without the swarm key gets nothing.
6. (with the examples built) examples/rollout_worker follows two heads.
7. A fetch of a version nobody holds fails with a clear message.

Every wait has a deadline; nothing sleeps to synchronize.
Usage: test_swarm_peers.py PATH/TO/tensorhub [PATH/TO/rollout_worker]
"""
import filecmp
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import Swarm, free_port, stop_processes, wait_for  # noqa: E402


def fetch_all(swarm, names, original, timeout=120):
    """Fetches in parallel; returns {name: CompletedProcess}."""
    results = {}

    def one(name):
        out = os.path.join(swarm.dir, name + ".out.safetensors")
        results[name] = (swarm.fetch(name, out, timeout=timeout), out)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, (proc, out) in results.items():
        assert proc.returncode == 0, f"{name} failed to fetch: {proc.stdout} {proc.stderr}\n{swarm.log(name)[-2000:]}"
        assert filecmp.cmp(out, original, shallow=False), f"{name}'s file differs from the published one"
    return results


def main():
    binary = os.path.abspath(sys.argv[1])
    example = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory(prefix="tensorhub-swarm-") as workdir:
        swarm = Swarm(binary, workdir)
        model = os.path.join(workdir, "policy.safetensors")
        assert swarm.run("synth-model", "--out", model, "--size", "48MiB", "--tensor-size", "1MiB").returncode == 0
        try:
            # 1. Eight peers.
            swarm.publisher = "pub"
            swarm.start("pub")
            workers = [f"w{i}" for i in range(1, 8)]
            for w in workers:
                swarm.start(w, seeds=["pub"])
            out = swarm.run("publish", "--control", swarm.control("pub"), "--model", "policy", model)
            assert out.returncode == 0, out.stderr
            wait_for("every worker to learn v1", lambda: all(swarm.head(w) == 1 for w in workers), 20)
            t0 = time.monotonic()
            fetch_all(swarm, workers, model)
            print(f"1. 7 workers fetched 48 MiB from 1 publisher in {time.monotonic() - t0:.2f}s, all byte-identical")
            # The publisher's own daemon fetches what it published: a copy, and it goes on serving.
            fetch_all(swarm, ["pub"], model)
            late = "w8"
            swarm.start(late, seeds=["pub"])
            wait_for("w8 to learn v1", lambda: swarm.head(late) == 1, 20)
            fetch_all(swarm, [late], model)
            print("1. the publisher's daemon fetched its own version into a file, byte-identical, and still served it")

            # 2. v2 while a holder is killed mid-fetch.
            model2 = os.path.join(workdir, "policy-v2.safetensors")
            assert swarm.run("synth-model", "--from", model, "--out", model2, "--seed", "2", "--change", "1").returncode == 0
            assert swarm.run("publish", "--control", swarm.control("pub"), "--model", "policy", model2).returncode == 0
            wait_for("v2 to be known", lambda: all(swarm.head(w) == 2 for w in workers), 20)
            victim = "w3"
            killer = threading.Timer(0.15, lambda: swarm.procs[victim].kill())
            killer.start()
            survivors = [w for w in workers if w != victim]
            results = {}

            def one(name):
                out_path = os.path.join(workdir, name + ".v2.safetensors")
                results[name] = (swarm.fetch(name, out_path), out_path)

            threads = [threading.Thread(target=one, args=(n,)) for n in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            killer.join()
            for name in survivors:
                proc, out_path = results[name]
                assert proc.returncode == 0, f"{name}: {proc.stderr}"
                assert filecmp.cmp(out_path, model2, shallow=False), f"{name}: v2 differs"
            print(f"2. a holder SIGKILLed mid-fetch: all {len(survivors)} survivors completed verified")

            # 3. A corrupt holder joins and serves; a fresh fetcher detects and avoids it.
            swarm.start("liar", seeds=["pub"], extra=["--test-corrupt-serving"])
            wait_for("the corrupt peer to learn v2", lambda: swarm.head("liar") == 2, 20)
            proc = swarm.fetch("liar", os.path.join(workdir, "liar.safetensors"), version=2)
            assert proc.returncode == 0, proc.stderr  # it fetches honestly, serves corruptly
            swarm.start("fresh", seeds=["pub"])
            wait_for("the fresh peer to learn v2", lambda: swarm.head("fresh") == 2, 20)
            fetch_all(swarm, ["fresh"], model2)
            log = swarm.log("fresh")
            print("3. a corrupt holder was " + ("detected and dropped" if "failed verification" in log else
                                                "not used (no bad shard reached the fetcher)") + "; the fetch verified")

            # 4. A late joiner catches up to the head.
            swarm.start("late", seeds=["w5"])
            wait_for("the late joiner to learn the head", lambda: swarm.head("late") == 2, 20)
            fetch_all(swarm, ["late"], model2)
            print("4. a late joiner caught up to v2")

            # 4b. A short-lived peer (fetch --join) writes the head into its file.
            joined = os.path.join(workdir, "joined.safetensors")
            proc = swarm.run("fetch", "--join", f"127.0.0.1:{swarm.ports['w5']}", "--key", swarm.keygen("joiner"),
                             "--swarm-key", swarm.swarm_key, "--trust", swarm.pubkeys["pub"], "--model", "policy",
                             "--out", joined, "--timeout", "60")
            assert proc.returncode == 0, f"fetch --join failed: {proc.stdout} {proc.stderr}"
            assert filecmp.cmp(joined, model2, shallow=False), "fetch --join wrote another file than the published one"
            assert not [f for f in os.listdir(workdir) if f.startswith("joined.safetensors.partial-")], "a temporary file was left behind"
            print("4b. fetch --join wrote v2: " + proc.stdout.strip().splitlines()[-1])

            # 5. A peer without the swarm key gets nothing.
            other_key = os.path.join(workdir, "other-swarm.key")
            assert swarm.run("swarm-key", "--out", other_key).returncode == 0
            outsider_key = swarm.keygen("outsider")
            proc = swarm.run("fetch", "--join", f"127.0.0.1:{swarm.ports['pub']}", "--key", outsider_key,
                             "--swarm-key", other_key, "--trust", swarm.pubkeys["pub"], "--model", "policy",
                             "--out", os.path.join(workdir, "outsider.safetensors"), "--timeout", "4")
            assert proc.returncode != 0, "a peer without the swarm key fetched something"
            assert not os.path.exists(os.path.join(workdir, "outsider.safetensors"))
            print("5. a peer without the swarm key got nothing: " + proc.stderr.strip().splitlines()[-1])

            # 6. The embedded-peer example follows the head from v2 to v3.
            model3 = os.path.join(workdir, "policy-v3.safetensors")
            assert swarm.run("synth-model", "--from", model2, "--out", model3, "--seed", "3", "--change", "1").returncode == 0
            if example:
                worker_key = swarm.keygen("example")
                example_log = open(os.path.join(workdir, "example.out"), "w+")
                proc = subprocess.Popen([example, "--seed", f"127.0.0.1:{swarm.ports['w5']}", "--key", worker_key,
                                         "--swarm-key", swarm.swarm_key, "--trust", swarm.pubkeys["pub"],
                                         "--model", "policy", "--steps", "2"],
                                        stdout=example_log, stderr=subprocess.STDOUT, text=True)
                swarm.procs["example"] = proc

                def example_says(text):
                    example_log.seek(0)
                    return text in example_log.read()
                wait_for("the example to switch to v2", lambda: example_says("switched to policy v2"), 30)
                assert swarm.run("publish", "--control", swarm.control("pub"), "--model", "policy", model3).returncode == 0
                assert proc.wait(timeout=60) == 0, open(os.path.join(workdir, "example.out")).read()
                assert example_says("switched to policy v3")
                print("6. examples/rollout_worker switched from v2 to v3, fetched and verified in its double buffer")
            else:
                assert swarm.run("publish", "--control", swarm.control("pub"), "--model", "policy", model3).returncode == 0
                print("6. skipped: the examples were not built")

            # 7. A version nobody holds.
            proc = swarm.fetch("w1", os.path.join(workdir, "nope.safetensors"), version=9)
            assert proc.returncode != 0 and "not known" in proc.stderr, proc.stderr
            print("7. fetching a version nobody has published fails: " + proc.stderr.strip())
            # A version that exists, but whose only holder let it go (--now: without waiting for retention).
            model4 = os.path.join(workdir, "policy-v4.safetensors")
            assert swarm.run("synth-model", "--from", model3, "--out", model4, "--seed", "4", "--change", "1").returncode == 0
            assert swarm.run("publish", "--control", swarm.control("pub"), "--model", "policy", model4).returncode == 0
            assert swarm.run("release", "--control", swarm.control("pub"), "--model", "policy", "--version", "4", "--now").returncode == 0
            wait_for("v4 to be known", lambda: swarm.head("w1") == 4, 20)
            proc = swarm.fetch("w1", os.path.join(workdir, "v4.safetensors"), version=4, timeout=60)
            assert proc.returncode != 0 and "no reachable peer holds shard" in proc.stderr, proc.stderr
            print("7. fetching a version nobody holds fails: " + proc.stderr.strip())
            print("all swarm multi-process checks passed")
        finally:
            swarm.stop_all()


if __name__ == "__main__":
    main()
