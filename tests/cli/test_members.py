#!/usr/bin/env python3
"""Admission control from the command line: `tensorhub peer --members FILE`.

- Peers a and b list each other; c holds the swarm key but is listed by
  nobody: a and b see each other alive and never c, and a counts c's
  traffic as not admitted.
- Rewritten without b, a's list is reloaded within seconds: b is forgotten.
- A list that does not load (a bad line) leaves the list in force; the
  daemon lives on.
- A daemon whose list does not name it, or whose file has a bad line,
  refuses to start and says why.

Usage: test_members.py PATH/TO/tensorhub
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import control_raw, free_port, stop_processes, wait_for  # noqa: E402


def status(path):
    try:
        return control_raw(path, b'{"cmd":"status"}')[-1]
    except (OSError, ValueError, IndexError):
        return {}


def alive_ids(path):
    return {m.get("id") for m in status(path).get("members", []) if m.get("state") == "alive"}


def main():
    binary = os.path.abspath(sys.argv[1])
    procs = {}
    with tempfile.TemporaryDirectory(prefix="tensorhub-members-") as d:
        def run(*args):
            return subprocess.run([binary, *args], capture_output=True, timeout=30, text=True)

        swarm = os.path.join(d, "swarm.key")
        assert run("swarm-key", "--out", swarm).returncode == 0
        keys, ids = {}, {}
        for name in ("a", "b", "c", "d"):
            keys[name] = os.path.join(d, name + ".key")
            out = run("keygen", "--out", keys[name])
            assert out.returncode == 0, out.stderr
            ids[name] = out.stdout.splitlines()[0].strip()
        members = os.path.join(d, "members.txt")
        with open(members, "w") as f:
            f.write(f"# the trainer\n{ids['a']}\n\n{ids['b']}  # a rollout worker\n")

        def peer_cmd(name, port, *extra):
            return [binary, "peer", "--listen", f"127.0.0.1:{port}", "--data-listen", "127.0.0.1:0", "--key",
                    keys[name], "--swarm-key", swarm, "--control", os.path.join(d, name + ".sock"), *extra]

        try:
            port_a = free_port()
            procs["a"] = subprocess.Popen(peer_cmd("a", port_a, "--members", members),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            sock_a = os.path.join(d, "a.sock")
            wait_for("peer a's control socket", lambda: os.path.exists(sock_a), 10)
            seed = ["--seed", f"127.0.0.1:{port_a}"]
            procs["b"] = subprocess.Popen(peer_cmd("b", free_port(), "--members", members, *seed),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs["c"] = subprocess.Popen(peer_cmd("c", free_port(), *seed),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for("a and b to see each other", lambda: ids["b"] in alive_ids(sock_a) and
                     ids["a"] in alive_ids(os.path.join(d, "b.sock")), 20)
            # c keeps knocking (it seeds through a); give it time to.
            time.sleep(3)
            assert ids["c"] not in alive_ids(sock_a), "c, on nobody's list, became a member"
            assert status(sock_a)["stats"]["not_admitted"] > 0, "a counted none of c's traffic"
            print("b is a member; c, holding the swarm key but on nobody's list, is not")

            # Taken off the list: forgotten within seconds.
            with open(members + ".new", "w") as f:
                f.write(f"{ids['a']}\n# b is gone\n")
            os.replace(members + ".new", members)
            started = time.monotonic()
            wait_for("a to forget b", lambda: ids["b"] not in {m.get("id") for m in status(sock_a).get("members", [])},
                     10)
            print(f"b taken off the list is forgotten after {time.monotonic() - started:.1f} s")

            # A list that does not load changes nothing; the daemon lives on.
            with open(members + ".new", "w") as f:
                f.write(f"{ids['a']}\nnot-a-key\n{ids['b']}\n")
            os.replace(members + ".new", members)
            time.sleep(2.5)
            assert procs["a"].poll() is None, "the daemon died on a bad member list"
            assert ids["b"] not in alive_ids(sock_a), "a bad list was put in force"
            print("a member list with a bad line is refused, the list in force stays")

            # At start: a bad line, and a list without this peer, are refused.
            bad = run(*peer_cmd("d", free_port(), "--members", members)[1:])
            assert bad.returncode != 0 and "member list line 2" in bad.stderr, bad.stderr
            without = os.path.join(d, "without-d.txt")
            with open(without, "w") as f:
                f.write(ids["a"] + "\n")
            refused = run(*peer_cmd("d", free_port(), "--members", without)[1:])
            assert refused.returncode != 0 and "does not name this peer" in refused.stderr, refused.stderr
            print("a daemon refuses to start with a bad member list, or one that does not name it")
        finally:
            stop_processes(procs)
    print("cli.members: ok")


if __name__ == "__main__":
    main()
