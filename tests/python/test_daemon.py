"""tensorhub.connect: a pure-Python client of `tensorhub peer` daemons. One
daemon publishes what the client hands it, another fetches it for its own
client, and an in-process peer in the same swarm fetches the same bytes; a
daemon holds a version as one file that several processes of its node share."""
import contextlib
import os
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest

import tensorhub as th

BINARY = os.environ.get("TENSORHUB_BINARY")
pytestmark = pytest.mark.skipif(not BINARY, reason="TENSORHUB_BINARY names no tensorhub binary")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def swarm_of_daemons(names):
    """Daemons named `names` (the first is every other's seed), each with a
    client; the first and the key in <folder>/trainer.key are trusted
    publishers. Yields (clients, ids, swarm key file, ports, folder)."""
    procs = []
    with tempfile.TemporaryDirectory(prefix="tensorhub-py-") as d:
        def run(*args):
            out = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            return out.stdout

        swarm = os.path.join(d, "swarm.key")
        run("swarm-key", "--out", swarm)
        keys = {n: os.path.join(d, n + ".key") for n in [*names, "trainer"]}
        ids = {n: run("keygen", "--out", k).split()[0] for n, k in keys.items()}
        ports = {n: free_port() for n in names}
        trust = ["--trust", ids[names[0]], "--trust", ids["trainer"]]
        clients = {}
        try:
            for i, name in enumerate(names):
                sock = os.path.join(d, name + ".sock")
                seed = ["--seed", f"127.0.0.1:{ports[names[0]]}"] if i else []
                procs.append(subprocess.Popen(
                    [BINARY, "peer", "--listen", f"127.0.0.1:{ports[name]}", "--data-listen", "127.0.0.1:0",
                     "--key", keys[name], "--swarm-key", swarm, *trust, "--control", sock,
                     "--retain-replicas", "0", "--host", name, "--hold-dir", os.path.join(d, "hold"), *seed],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.monotonic() + 10
                while not os.path.exists(sock):
                    assert time.monotonic() < deadline, f"daemon {name} did not start"
                    time.sleep(0.05)
                clients[name] = th.connect(sock, directory=d)
            yield clients, ids, swarm, ports, d
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)


def weights(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((300, 17), dtype=np.float32),
            "b": rng.standard_normal(17).astype(np.float16),
            "step": np.array([seed], dtype=np.int64)}


def test_daemon_clients_and_an_in_process_peer_see_the_same_version():
    with swarm_of_daemons(["a", "b"]) as (clients, ids, swarm, ports, d):
        a, b = clients["a"], clients["b"]
        with a.publish("policy", weights(41), metadata={"step": "41"}) as published:
            assert published.version == 1
            assert b.wait_for_head("policy", timeout=20)["version"] == 1
            with b.fetch("policy", 1) as fetched:
                got = fetched.state_dict()
                for name, array in weights(41).items():
                    np.testing.assert_array_equal(got[name], array)
                assert fetched.metadata == {"step": "41"}
            # An in-process peer in the same swarm gets the same bytes.
            peer = th.Peer.start(swarm_key_file=swarm, seeds=[f"127.0.0.1:{ports['a']}"],
                                 trusted_publishers=[ids["a"]], host="c", retain_head_replicas=0)
            try:
                peer.wait_for_head("policy", timeout=20)
                mine = peer.fetch("policy", 1).wait(30)
                for name, array in weights(41).items():
                    np.testing.assert_array_equal(mine.state_dict()[name], array)
                assert mine.metadata == {"step": "41"}
            finally:
                peer.close()
        with pytest.raises(th.Error):
            b.fetch("policy", 7)  # not known
        with pytest.raises(th.Error):
            th.connect(os.path.join(d, "nobody.sock")).status()


def test_a_version_published_in_process_reaches_a_daemon_as_a_safetensors_file():
    with swarm_of_daemons(["a", "b"]) as (clients, ids, swarm, ports, d):
        trainer = th.Peer.start(key_file=os.path.join(d, "trainer.key"), swarm_key_file=swarm,
                                seeds=[f"127.0.0.1:{ports['a']}"], host="t", retain_head_replicas=0)
        try:
            with trainer.publish("actor", weights(5), metadata={"step": "5"}) as published:
                b = clients["b"]
                assert b.wait_for_head("actor", timeout=20)["version"] == published.version
                with b.fetch("actor", published.version) as fetched:
                    for name, array in weights(5).items():
                        np.testing.assert_array_equal(fetched.state_dict()[name], array)
                    assert fetched.metadata == {"step": "5"}
        finally:
            trainer.close()


def test_the_ranks_of_one_node_share_one_held_file():
    with swarm_of_daemons(["a", "b"]) as (clients, ids, swarm, ports, d):
        a, b = clients["a"], clients["b"]
        with a.publish("org/policy", weights(8), metadata={"step": "8"}) as published:
            b.wait_for_head("org/policy", timeout=20)
            # Four ranks ask at once: one fetch, one file.
            holds, errors = [None] * 4, []

            def rank(i):
                try:
                    holds[i] = th.connect(b.control, directory=d).hold("org/policy", published.version)
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(e)

            threads = [threading.Thread(target=rank, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not errors, errors
            paths = {h.path for h in holds}
            assert len(paths) == 1
            path = paths.pop()
            assert path.startswith(os.path.join(d, "hold")) and path.endswith("/v1/model.safetensors")
            assert "org%2Fpolicy" in path and os.path.dirname(path) == holds[0].dir
            for h in holds:
                for name, array in weights(8).items():
                    np.testing.assert_array_equal(h.state_dict()[name], array)
                assert h.metadata == {"step": "8"}
            served = [v["bytes_served"] for v in a.status()["versions"] if v["model"] == "org/policy"]
            assert served == [holds[0].nbytes]  # the publisher sent the version once, not once a rank
            for h in holds[:3]:
                h.release()
            assert os.path.exists(path)  # one hold is left
            holds[3].release()
            assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
            with pytest.raises(th.Error) as e:
                holds[3]._client._request({"cmd": "unhold", "model": "org/policy", "version": 1})
            assert e.value.code == "not_found"
            with pytest.raises(th.Error):
                b.hold("org/policy", 99)  # not known
