#!/usr/bin/env python3
"""Real `tensorhub peer` processes moving versions by RDMA READ over
softverbs (tests/softverbs), preloaded into the shipped binary: control and
rkeys over the authenticated TCP connections, payloads read out of the
holders' memory by process_vm_readv, the holders running no code for it.

1. A publisher and three workers: every file byte-identical, every payload
   byte by READ (the publisher's TCP carries control messages only).
2. A holder is SIGKILLed 0.2 s into a transfer of about 0.7 s (READs
   slowed to 20 ms): every survivor completes byte-identical.
3. A holder releases its version (--now) 0.2 s into such a transfer: its
   grants are revoked and its registration goes; the others complete
   byte-identical.
4. A worker with --no-rdma in the same swarm: byte-identical over TCP.
5. `tensorhub rdma-bench` between two processes with two NICs each: the
   READs are checked against the served pattern and both NICs carry them;
   the server's buffer registered without relaxed ordering too; --gpu on a
   machine without one is refused with the reason.

Usage: test_rdma_peers.py PATH/TO/tensorhub PATH/TO/libtensorhub_softverbs_preload.so
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import free_port, wait_for  # noqa: E402
from test_swarm_peers import Swarm, fetch_all  # noqa: E402

SIZE_MIB = 32


def rdma_of(swarm, name):
    s = swarm.status(name)["rdma"]
    return {
        "nics": [n["name"] for n in s["nics"]],
        "note": s["note"],
        "reads": sum(n["reads"] for n in s["neighbours"]),
        "bytes": sum(n["bytes"] for n in s["neighbours"]),
        "reading": sum(1 for n in s["neighbours"] if n["state"] == "reading"),
    }


def tcp_bytes(swarm, name, field):
    return sum(lane[field] for link in swarm.status(name)["data_links"] for lane in link["lanes"])


def main():
    binary = os.path.abspath(sys.argv[1])
    os.environ["LD_PRELOAD"] = os.path.abspath(sys.argv[2])
    os.environ["SOFTVERBS_DEVICES"] = "1"
    size = SIZE_MIB << 20
    with tempfile.TemporaryDirectory(prefix="tensorhub-rdma-") as workdir:
        swarm = Swarm(binary, workdir)
        model = os.path.join(workdir, "policy.safetensors")
        assert swarm.run("synth-model", "--out", model, "--size", f"{SIZE_MIB}MiB", "--tensor-size", "1MiB").returncode == 0
        try:
            # 1. Every payload byte by READ.
            swarm.publisher = "pub"
            swarm.start("pub")
            workers = ["w1", "w2", "w3"]
            for w in workers:
                swarm.start(w, seeds=["pub"])
            assert rdma_of(swarm, "pub")["nics"] == ["softverbs0"], swarm.status("pub")["rdma"]
            out = swarm.run("publish", "--control", swarm.control("pub"), "--model", "policy", model)
            assert out.returncode == 0, out.stderr
            wait_for("every worker to learn v1", lambda: all(swarm.head(w) == 1 for w in workers), 20)
            fetch_all(swarm, workers, model)
            read = {w: rdma_of(swarm, w) for w in workers}
            for w in workers:
                assert read[w]["bytes"] >= size * 0.99, (w, read[w])
                assert tcp_bytes(swarm, w, "bytes_received") < size // 16, (w, tcp_bytes(swarm, w, "bytes_received"))
            sent = tcp_bytes(swarm, "pub", "bytes_sent")
            assert sent < size // 16, sent
            print(f"1. 3 workers fetched {SIZE_MIB} MiB by READ ({sum(r['reads'] for r in read.values())} READs, "
                  f"{sum(r['bytes'] for r in read.values()) >> 20} MiB); the publisher sent {sent} bytes over TCP")

            # 2. A holder killed while READs from it are in flight. The new
            # workers read slowly (20 ms a 1 MiB READ: 0.64 s for the
            # version), so the kill, 0.2 s in, lands mid-transfer.
            os.environ["SOFTVERBS_READ_DELAY_US"] = "20000"
            late = ["w4", "w5"]
            for w in late:
                swarm.start(w, seeds=["pub"])
            wait_for("the late workers to learn v1", lambda: all(swarm.head(w) == 1 for w in late), 20)
            victim = "w2"
            killer = threading.Timer(0.2, lambda: swarm.procs[victim].kill())
            began = time.monotonic()
            killer.start()
            fetch_all(swarm, late, model)
            took = time.monotonic() - began
            killer.join()
            assert took > 0.3, f"the fetches ended in {took:.2f} s, before the kill could land mid-transfer"
            print(f"2. {victim} was killed 0.2 s into a {took:.2f} s transfer; {', '.join(late)} completed "
                  f"byte-identical ({sum(rdma_of(swarm, w)['bytes'] for w in late) >> 20} MiB by READ, "
                  f"{sum(tcp_bytes(swarm, w, 'bytes_received') for w in late) >> 20} MiB over TCP)")

            # 3. A holder releases while READs from it are in flight.
            more = ["w6", "w7"]
            for w in more:
                swarm.start(w, seeds=["pub"])
            wait_for("w6 and w7 to learn v1", lambda: all(swarm.head(w) == 1 for w in more), 20)
            released = []
            releaser = threading.Timer(0.2, lambda: released.append(swarm.run(
                "release", "--control", swarm.control("w1"), "--model", "policy", "--version", "1", "--now")))
            began = time.monotonic()
            releaser.start()
            fetch_all(swarm, more, model)
            took = time.monotonic() - began
            releaser.join()
            assert released and released[0].returncode == 0, released
            assert took > 0.3, f"the fetches ended in {took:.2f} s, before the release could land mid-transfer"
            print(f"3. w1 released v1 0.2 s into a {took:.2f} s transfer; w6 and w7 completed byte-identical")

            # 4. A worker without RDMA in the same swarm.
            del os.environ["SOFTVERBS_READ_DELAY_US"]
            swarm.start("tcp", seeds=["pub"], extra=["--no-rdma"])
            wait_for("the TCP worker to learn v1", lambda: swarm.head("tcp") == 1, 20)
            fetch_all(swarm, ["tcp"], model)
            plain = rdma_of(swarm, "tcp")
            assert plain["bytes"] == 0 and plain["reading"] == 0 and "off" in plain["note"], plain
            assert tcp_bytes(swarm, "tcp", "bytes_received") >= size, tcp_bytes(swarm, "tcp", "bytes_received")
            print("4. a worker with --no-rdma fetched byte-identical over TCP beside the READers")

            # 5. rdma-bench over two NICs.
            os.environ["SOFTVERBS_DEVICES"] = "2"
            port = free_port()
            server = subprocess.Popen([binary, "rdma-bench", "--serve", f"127.0.0.1:{port}", "--size", "16MiB",
                                       "--strict-ordering"], stdout=subprocess.PIPE, text=True)
            try:
                assert "serving" in server.stdout.readline()
                bench = swarm.run("rdma-bench", "--connect", f"127.0.0.1:{port}", "--seconds", "0.3", "--json")
                assert bench.returncode == 0, bench.stderr
                report = json.loads(bench.stdout)
                assert report["bytes_wrong"] == 0 and report["blocks_checked"] > 0, report
                assert report["queue_pairs"] == 4 and report["read_depth"] == 16, report
                assert all(n["bytes"] > 0 for n in report["nics"]) and len(report["nics"]) == 2, report
                assert report["memory"] == "host" and report["flush"] is False, report
                if not os.path.exists("/dev/nvidiactl"):
                    gpu = swarm.run("rdma-bench", "--connect", f"127.0.0.1:{port}", "--seconds", "0.1",
                                    "--gpu", "GPU-00000000-0000-0000-0000-000000000000")
                    assert gpu.returncode != 0 and "error:" in gpu.stderr, (gpu.returncode, gpu.stderr)
            finally:
                server.kill()
                server.wait()
            print(f"5. rdma-bench: {report['reads']} READs over 2 NICs x 2 queue pairs, first pass "
                  f"({report['blocks_checked']} blocks) byte-exact")
            print("all RDMA multi-process checks passed")
        finally:
            swarm.stop_all()


if __name__ == "__main__":
    main()
