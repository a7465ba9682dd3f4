#!/usr/bin/env python3
"""Multi-process gossip test on loopback: 16 `tensorhub peer` processes.

All see each other; one killed with SIGKILL is marked dead by all; one that
gets SIGTERM leaves and shows as left; a peer holding another swarm key never
appears. Every wait has a deadline; nothing sleeps to synchronize.

Usage: test_gossip_peers.py PATH/TO/tensorhub
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import free_port, stop_processes, wait_for  # noqa: E402

PEERS = 16


class Cluster:
    def __init__(self, binary, workdir):
        self.binary = binary
        self.dir = workdir
        self.procs = {}
        self.ports = {}
        self.ids = {}
        self.key_of = {}

    def run(self, *args):
        return subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=30)

    def start(self, name, swarm_key, seeds):
        key = os.path.join(self.dir, name + ".key")
        out = self.run("keygen", "--out", key)
        assert out.returncode == 0, out.stderr
        self.ids[name] = out.stdout.strip()
        port = free_port()
        self.ports[name] = port
        log = open(os.path.join(self.dir, name + ".log"), "w")
        cmd = [self.binary, "peer", "--listen", f"127.0.0.1:{port}", "--data-listen", "127.0.0.1:0",
               "--key", key, "--swarm-key", swarm_key,
               "--control", self.control(name), "--dc", "dc1", "--rack", "r" + name[-1], "--host", name]
        for seed in seeds:
            cmd += ["--seed", f"127.0.0.1:{self.ports[seed]}"]
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def control(self, name):
        return os.path.join(self.dir, name + ".sock")

    def status(self, name):
        out = self.run("status", "--control", self.control(name), "--json")
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)

    def states(self, name):
        """id -> state, as `name` sees the swarm."""
        s = self.status(name)
        if s is None:
            return None
        return {m["id"]: m["state"] for m in s["members"]}

    def stop_all(self):
        stop_processes(self.procs)


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="tensorhub-gossip-") as workdir:
        cluster = Cluster(binary, workdir)
        swarm = os.path.join(workdir, "swarm.key")
        other_swarm = os.path.join(workdir, "other-swarm.key")
        assert cluster.run("swarm-key", "--out", swarm).returncode == 0
        assert cluster.run("swarm-key", "--out", other_swarm).returncode == 0
        names = [f"p{i:02d}" for i in range(PEERS)]
        try:
            start = time.monotonic()
            cluster.start(names[0], swarm, [])
            wait_for("the first peer's control socket", lambda: cluster.status(names[0]) is not None, 10)
            for i, name in enumerate(names[1:], start=1):
                cluster.start(name, swarm, [names[0], names[(i * 7) % i]])
            # A peer with another swarm key tries to join through two members.
            cluster.start("outsider", other_swarm, [names[0], names[1]])

            def everyone_sees_everyone():
                for name in names:
                    states = cluster.states(name)
                    if states is None:
                        return False
                    alive = {i for i, s in states.items() if s == "alive"}
                    if alive != {cluster.ids[n] for n in names if n != name}:
                        return False
                return True

            t = wait_for("16 peers to see each other", everyone_sees_everyone, 30)
            print(f"16 peers converged {t - start:.1f}s after the first started")

            def outsider_invisible(observers):
                for name in observers:
                    if cluster.ids["outsider"] in cluster.states(name):
                        return False
                return True

            assert outsider_invisible(names), "a peer with another swarm key became a member"
            outsider_view = cluster.states("outsider")
            assert outsider_view == {}, f"the outsider learned members: {outsider_view}"

            # SIGKILL: every survivor marks it dead.
            victim = names[5]
            cluster.procs[victim].kill()
            killed = time.monotonic()
            survivors = [n for n in names if n != victim]
            t = wait_for("all survivors to mark the killed peer dead",
                         lambda: all(cluster.states(n).get(cluster.ids[victim]) == "dead" for n in survivors), 30)
            print(f"SIGKILLed peer marked dead by all {len(survivors)} survivors in {t - killed:.1f}s")

            # SIGTERM: it leaves gracefully and exits 0; everyone shows it as left.
            leaver = names[9]
            cluster.procs[leaver].send_signal(signal.SIGTERM)
            assert cluster.procs[leaver].wait(timeout=10) == 0, "a peer did not exit cleanly on SIGTERM"
            remaining = [n for n in survivors if n != leaver]
            t = wait_for("all to show the SIGTERMed peer as left",
                         lambda: all(cluster.states(n).get(cluster.ids[leaver]) == "left" for n in remaining), 15)
            print(f"SIGTERMed peer shown as left by all {len(remaining)} peers")

            assert outsider_invisible(remaining), "the outsider appeared later"
            for name in remaining:
                assert cluster.procs[name].poll() is None, f"{name} exited"
            print("all gossip multi-process checks passed")
        finally:
            cluster.stop_all()


if __name__ == "__main__":
    main()
