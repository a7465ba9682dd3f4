"""tensorhub.connect: a pure-Python client of `tensorhub peer` daemons. One
daemon publishes what the client hands it, another fetches it for its own
client, and an in-process peer in the same swarm fetches the same bytes."""
import os
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import tensorhub as th

BINARY = os.environ.get("TENSORHUB_BINARY")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not BINARY, reason="TENSORHUB_BINARY names no tensorhub binary")
def test_daemon_clients_and_an_in_process_peer_see_the_same_version():
    procs = []
    with tempfile.TemporaryDirectory(prefix="tensorhub-py-") as d:
        def run(*args):
            out = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            return out.stdout

        swarm = os.path.join(d, "swarm.key")
        run("swarm-key", "--out", swarm)
        keys = {n: os.path.join(d, n + ".key") for n in ("a", "b")}
        ids = {n: run("keygen", "--out", k).split()[0] for n, k in keys.items()}
        ports = {"a": free_port(), "b": free_port()}

        def start(name, *extra):
            sock = os.path.join(d, name + ".sock")
            procs.append(subprocess.Popen(
                [BINARY, "peer", "--listen", f"127.0.0.1:{ports[name]}", "--data-listen", "127.0.0.1:0",
                 "--key", keys[name], "--swarm-key", swarm, "--trust", ids["a"], "--control", sock,
                 "--retain-replicas", "0", "--host", name, *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 10
            while not os.path.exists(sock):
                assert time.monotonic() < deadline, f"daemon {name} did not start"
                time.sleep(0.05)
            return th.connect(sock, directory=d)

        try:
            a = start("a")
            b = start("b", "--seed", f"127.0.0.1:{ports['a']}")
            rng = np.random.default_rng(9)
            weights = {"w": rng.standard_normal((300, 17), dtype=np.float32),
                       "b": rng.standard_normal(17).astype(np.float16),
                       "step": np.array([41], dtype=np.int64)}
            with a.publish("policy", weights, metadata={"step": "41"}) as published:
                assert published.version == 1
                assert b.wait_for_head("policy", timeout=20)["version"] == 1
                with b.fetch("policy", 1) as fetched:
                    got = fetched.state_dict()
                    for name, array in weights.items():
                        np.testing.assert_array_equal(got[name], array)
                # An in-process peer in the same swarm gets the same bytes.
                peer = th.Peer.start(swarm_key_file=swarm, seeds=[f"127.0.0.1:{ports['a']}"],
                                     trusted_publishers=[ids["a"]], host="c", retain_head_replicas=0)
                try:
                    peer.wait_for_head("policy", timeout=20)
                    mine = peer.fetch("policy", 1).wait(30).state_dict()
                    for name, array in weights.items():
                        np.testing.assert_array_equal(mine[name], array)
                finally:
                    peer.close()
            with pytest.raises(th.Error):
                b.fetch("policy", 7)  # not known
            with pytest.raises(th.Error):
                th.connect(os.path.join(d, "nobody.sock")).status()
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)
