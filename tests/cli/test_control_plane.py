#!/usr/bin/env python3
"""The daemon's control loop never waits on long work: while it hashes a
publication (secure mode, 1 GiB: about a second of BLAKE2b on two cores)
and computes a digest, `tensorhub status` keeps answering at once.

(The figure for 4 GiB publications and fetches is bench/control_plane_latency.py's.)

Usage: test_control_plane.py PATH/TO/tensorhub
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import Swarm  # noqa: E402


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="tensorhub-cplane-") as workdir:
        swarm = Swarm(binary, workdir)
        model = os.path.join(workdir, "big.safetensors")
        made = swarm.run("synth-model", "--out", model, "--size", "1GiB", "--tensor-size", "64MiB")
        assert made.returncode == 0, made.stderr
        try:
            swarm.start("t", extra=("--hash", "blake2b-256"))
            control = swarm.control("t")

            def status_times(until):
                """Wall times of `tensorhub status` calls, back to back, until `until()` holds."""
                times = []
                while not until():
                    t0 = time.monotonic()
                    out = subprocess.run([binary, "status", "--control", control], capture_output=True)
                    assert out.returncode == 0, out.stderr
                    times.append(time.monotonic() - t0)
                return times

            for what, command in (
                    ("a 1 GiB publish", ["publish", "--control", control, "--model", "policy", model]),
                    ("a 1 GiB digest", None)):
                if command is None:
                    request = b'{"cmd":"digest","model":"policy","version":1}\n'
                    done = threading.Event()

                    def digest():
                        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                            s.connect(control)
                            s.sendall(request)
                            while s.recv(1 << 16):
                                pass
                        done.set()

                    t0 = time.monotonic()
                    threading.Thread(target=digest).start()
                    times = status_times(done.is_set)
                else:
                    t0 = time.monotonic()
                    proc = subprocess.Popen([binary, *command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                    times = status_times(lambda: proc.poll() is not None)
                    assert proc.returncode == 0, proc.stderr.read()
                took = time.monotonic() - t0
                print(f"during {what} ({took:.2f} s): {len(times)} status calls, the slowest "
                      f"{max(times) * 1e3:.0f} ms")
                assert len(times) >= 2, f"status was answered {len(times)} time(s) during {what} of {took:.2f} s"
                assert max(times) < 0.5, f"a status call took {max(times):.2f} s during {what}"
        finally:
            swarm.stop_all()


if __name__ == "__main__":
    main()
