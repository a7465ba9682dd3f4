"""What the Python tests share: a publisher and a fetcher on loopback, and
a swarm of `tensorhub peer` daemons."""
import contextlib
import os
import socket
import subprocess
import tempfile
import time
import types

import pytest

import tensorhub as th

SWARM = bytes(range(32))
BINARY = os.environ.get("TENSORHUB_BINARY")


@pytest.fixture
def pair():
    """A trainer and a worker that trusts it, in one swarm, left at the end.
    No retention: a release lets go at once (with it, the last holder of the
    head waits up to a minute for another to hold it)."""
    small = dict(swarm_key=SWARM, shard_size=64 << 10, block_size=16 << 10, retain_head_replicas=0)
    trainer = th.Peer.start(host="trainer", **small)
    worker = th.Peer.start(host="worker", seeds=[trainer.gossip_address], trusted_publishers=[trainer.id], **small)
    yield trainer, worker
    worker.close()
    trainer.close()


def publisher_keys(folder, n, prefix="rank"):
    """`n` key files made by `tensorhub keygen` in `folder`, and their peer
    ids: (keys, ids). Skips the test without TENSORHUB_BINARY."""
    if not BINARY:
        pytest.skip("TENSORHUB_BINARY is not set (the tensorhub binary makes the publishers' keys)")
    keys, ids = [], []
    for r in range(n):
        key = str(folder / f"{prefix}{r}.key")
        ids.append(subprocess.run([BINARY, "keygen", "--out", key], capture_output=True, text=True,
                                  check=True).stdout.split()[0])
        keys.append(key)
    return keys, ids


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def swarm_of_daemons(names, extra=None):
    """Daemons named `names` (the first is every other's seed), each with a
    client; the first and the key in <folder>/trainer.key are trusted
    publishers; `extra` maps a name to more arguments for its daemon.
    Yields a namespace: clients, ids, swarm (the key file), ports, folder
    and procs (the daemons' processes), by name."""
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
        clients, commands = {}, {}
        try:
            for i, name in enumerate(names):
                sock = os.path.join(d, name + ".sock")
                seed = ["--seed", f"127.0.0.1:{ports[names[0]]}"] if i else []
                commands[name] = [BINARY, "peer", "--listen", f"127.0.0.1:{ports[name]}", "--data-listen",
                                  "127.0.0.1:0", "--key", keys[name], "--swarm-key", swarm, *trust, "--control", sock,
                                  "--retain-replicas", "0", "--host", name, "--hold-dir", os.path.join(d, "hold"),
                                  *seed, *(extra or {}).get(name, [])]
                procs.append(subprocess.Popen(commands[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.monotonic() + 10
                while not os.path.exists(sock):
                    assert time.monotonic() < deadline, f"daemon {name} did not start"
                    time.sleep(0.05)
                clients[name] = th.connect(sock, directory=d)
            def restart(name):
                """Starts daemon `name` again (after it was killed)."""
                procs.append(subprocess.Popen(commands[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                return procs[-1]

            yield types.SimpleNamespace(clients=clients, ids=ids, swarm=swarm, ports=ports, folder=d,
                                        procs=dict(zip(names, procs)), restart=restart)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)
