#!/usr/bin/env python3
"""An outsider floods a peer's data port; the peer keeps its CPU, its place in
the swarm, and its upload.

A `tensorhub peer` daemon (the victim) runs with `ulimit -n 256` and
publishes a model. From another address (127.0.0.2) an outsider without the
swarm key opens CONNECTIONS idle TCP connections to the victim's data port
and holds them, and replays one captured hello REPLAYS times, each on a new
connection (a member's genuine hello to the victim, taken off the wire: the
outsider can copy it, not make one). Then, while the idle connections are
still held, a second peer fetches the model from the victim.

Measured, in one run: the victim's CPU over the flood (utime + stime from
/proc, as a share of one core, from the first connection until its CPU time
stops moving: the flooder on loopback connects far faster than the victim
accepts, so the victim works on after the flooder is done); whether gossip kept it alive (the fetcher
sees it alive, at the incarnation it had, so it was never suspected long
enough to refute); and the flooded fetch's time against an unflooded fetch
of the same model by a first peer, before the flood, from the victim alone.

Goals (issue: hardening, item 3): CPU under 20% of a core, never suspected
dead, the flooded fetch at no less than 80% of the unflooded speed. The
test asserts the second. The victim's CPU share is its cost per connection
times the flooder's rate, and the flooder's rate on a shared 2-core machine
varies: usually 10,000-11,000 connections a second (9-13% of a core), once
in a CI run 28,000 (20.5% of a core at 7.3 us a connection); and the cost
per connection triples when other work shares the two cores (37.9% of a
core at 16.7 us a connection, 22,700 connections a second, with a second
test suite running beside it; 51.3% at 22.7 us in a CI run). So the test
asserts what the victim controls: its cost per connection, under 60 us, and
that its CPU time stops moving within 5 s of the flood's end (a victim that
spins, as before the accept caps, never stops). --cpu-goal asks for the
share of a core instead. A loopback fetch varies by
10-20% from run to run, so it asserts only that the flooded fetch completes
at half the speed or better, unless --speed-goal asks for more. Run by hand
with --cpu-goal 0.2 --speed-goal 0.8, it checks the goals
(docs/security.md).

With --sources N the flood comes from N addresses (127.0.0.2 and up), so the
per-address cap does not stop it; with --sustained the outsider goes on
opening idle connections (holding the newest 2,000) for as long as the
second fetch runs, so the handshakes in flight stay at their cap and a
member's handshake survives only if the victim prefers members' addresses.

Usage: test_flood.py PATH/TO/tensorhub [--connections 5000] [--replays 10000]
                     [--sources 1] [--sustained]
                     [--size 256MiB] [--speed-goal 0.5] [--cpu-goal 0.2]
                     [--us-per-connection-goal 60] [--json]
Under sanitizers (CPU time is not the product's) CMake passes goals of 0.
"""
import argparse
import hashlib
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import free_port, stop_processes, wait_for  # noqa: E402

FLOOD_FROM = "127.0.0.2"


def flood_source(i, sources):
    """The i-th connection's source address: 127.0.0.2 and up, cycled."""
    n = 2 + i % sources
    return f"127.0.{n >> 8}.{n & 255}"


def flood_socket(i, sources, timeout):
    """An unconnected socket bound to the i-th flood address, closed with a
    reset (no TIME_WAIT, so runs do not use up the ports)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.bind((flood_source(i, sources), 0))
    s.settimeout(timeout)
    return s
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def swarm_key_bytes(path):
    for line in open(path):
        if line.startswith("tensorhub-swarm-key "):
            return bytes.fromhex(line.split()[1])
    raise AssertionError(f"{path} holds no swarm key")


def derive(key, purpose, subkey_id=1):
    """SwarmKey::derive: libsodium's crypto_kdf_derive_from_key (BLAKE2b)."""
    person = purpose.encode().ljust(8, b"\0")[:8] + b"\0" * 8
    salt = subkey_id.to_bytes(8, "little") + b"\0" * 8
    return hashlib.blake2b(b"", digest_size=32, key=key, salt=salt, person=person).digest()


def member_hello(swarm_key, initiator_id, responder_id):
    """A genuine hello (secure_channel.hpp, message 1) from a member to the
    responder, as one taken off the wire would be."""
    body = b"THd1" + os.urandom(32) + initiator_id + struct.pack(">Q", int(time.time() * 1e6))
    mac = hashlib.blake2b(responder_id + body, digest_size=16, key=derive(swarm_key, "data")).digest()
    return body + mac


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--replays", type=int, default=10000)
    ap.add_argument("--size", default="256MiB")
    ap.add_argument("--sources", type=int, default=1, help="flood from this many addresses")
    ap.add_argument("--sustained", action="store_true", help="keep flooding during the second fetch")
    ap.add_argument("--speed-goal", type=float, default=0.5)
    ap.add_argument("--cpu-goal", type=float, default=None,
                    help="the victim's share of a core during the flood (default: not asserted)")
    ap.add_argument("--us-per-connection-goal", type=float, default=60.0,
                    help="the victim's CPU per connection; 0: not asserted (sanitizer builds)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 512
    if hard != resource.RLIM_INFINITY and hard < want:
        print(f"skipped: the flooder needs {want} descriptors, the hard limit is {hard}")
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    probe = socket.socket()
    try:
        probe.bind((FLOOD_FROM, 0))
    except OSError:
        print(f"skipped: cannot bind {FLOOD_FROM} (no 127/8 loopback)")
        return
    finally:
        probe.close()

    procs = {}
    with tempfile.TemporaryDirectory(prefix="tensorhub-flood-") as d:
        def run(*a, timeout=120):
            return subprocess.run([binary, *a], capture_output=True, text=True, timeout=timeout)

        swarm = os.path.join(d, "swarm.key")
        assert run("swarm-key", "--out", swarm).returncode == 0
        keys, ids = {}, {}
        for name in ("victim", "first", "second"):
            keys[name] = os.path.join(d, name + ".key")
            out = run("keygen", "--out", keys[name])
            assert out.returncode == 0, out.stderr
            ids[name] = out.stdout.strip()
        ports = {}

        def control(name):
            return os.path.join(d, name + ".sock")

        def status(name):
            out = run("status", "--control", control(name), "--json")
            return json.loads(out.stdout) if out.returncode == 0 else None

        def start(name, seeds=(), preexec=None):
            ports[name] = free_port()
            cmd = [binary, "peer", "--listen", f"127.0.0.1:{ports[name]}", "--data-listen", "127.0.0.1:0",
                   "--key", keys[name], "--swarm-key", swarm, "--control", control(name),
                   "--trust", ids["victim"], "--shard-size", "4MiB", "--host", name]
            for s in seeds:
                cmd += ["--seed", f"127.0.0.1:{ports[s]}"]
            log = open(os.path.join(d, name + ".log"), "w")
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec)
            wait_for(f"{name}'s control socket", lambda: status(name) is not None, 10)

        def timed_fetch(name):
            out_path = os.path.join(d, name + ".safetensors")
            t0 = time.monotonic()
            out = run("fetch", "--control", control(name), "--model", "policy", "--version", "1", "--out", out_path)
            took = time.monotonic() - t0
            assert out.returncode == 0, f"{name}: {out.stderr}"
            os.unlink(out_path)
            return took

        def view_of_victim(name):
            s = status(name)
            for m in (s or {}).get("members", []):
                if m["id"] == ids["victim"]:
                    return m["state"], m["incarnation"]
            return None, None

        model = os.path.join(d, "policy.safetensors")
        assert run("synth-model", "--out", model, "--size", args.size, "--tensor-size", "4MiB").returncode == 0
        try:
            limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # noqa: E731
            start("victim", preexec=limit)
            start("first", seeds=["victim"])
            start("second", seeds=["victim"])
            out = run("publish", "--control", control("victim"), "--model", "policy", model)
            assert out.returncode == 0, out.stderr
            for name in ("first", "second"):
                wait_for(f"{name} to learn v1",
                         lambda n=name: (status(n) or {}).get("known_heads", {}).get("policy", {}).get("version") == 1,
                         20)
            unflooded = timed_fetch("first")
            procs["first"].terminate()
            procs["first"].wait()
            state_before, incarnation_before = view_of_victim("second")
            assert state_before == "alive", state_before

            victim = status("victim")
            host, port = victim["data_addr"].rsplit(":", 1)
            target = (host, int(port))
            pid = procs["victim"].pid
            hello = member_hello(swarm_key_bytes(swarm), bytes.fromhex(ids["first"]), bytes.fromhex(ids["victim"]))

            # The flood: idle connections, held; then the replays.
            cpu0, wall0 = cpu_seconds(pid), time.monotonic()
            idle, refused = [], 0
            for i in range(args.connections):
                s = socket.socket()
                s.bind((flood_source(i, args.sources), 0))
                s.settimeout(5)
                try:
                    s.connect(target)
                    idle.append(s)
                except OSError:
                    refused += 1
                    s.close()
            replayed = 0
            for i in range(args.replays):
                s = flood_socket(i, args.sources, 5)
                try:
                    s.connect(target)
                    s.sendall(hello)
                    replayed += 1
                except OSError:
                    pass
                finally:
                    s.close()
            flood_wall = time.monotonic() - wall0
            # The victim may still be working through its accept queue: the
            # window runs until its CPU time stops moving (50 ms at a time).
            last = cpu_seconds(pid)
            settle_by = time.monotonic() + 5
            while True:
                time.sleep(0.05)
                now_cpu = cpu_seconds(pid)
                if now_cpu - last < 1.0 / CLOCK_TICKS:
                    break
                last = now_cpu
                assert time.monotonic() < settle_by, "the victim was still busy 5 s after the flood ended"
            busy_wall = time.monotonic() - 0.05 - wall0
            flood_cpu_s = last - cpu0
            flood_cpu = flood_cpu_s / busy_wall

            # While the idle connections are held: the second fetch.
            alive_throughout = True
            watching = True

            def watch():
                nonlocal alive_throughout
                while watching:
                    state, _ = view_of_victim("second")
                    alive_throughout = alive_throughout and state == "alive"
                    time.sleep(0.2)

            sustained = 0

            def keep_flooding():
                nonlocal sustained
                held = []
                while watching:
                    s = flood_socket(sustained, args.sources, 1)
                    try:
                        s.connect(target)
                        held.append(s)
                        sustained += 1
                    except OSError:
                        s.close()
                    if len(held) > 2000:
                        held.pop(0).close()
                for s in held:
                    s.close()

            watcher = threading.Thread(target=watch)
            watcher.start()
            flooder = threading.Thread(target=keep_flooding)
            if args.sustained:
                flooder.start()
            cpu1, wall1 = cpu_seconds(pid), time.monotonic()
            flooded = timed_fetch("second")
            fetch_wall = time.monotonic() - wall1
            hold_cpu = (cpu_seconds(pid) - cpu1) / fetch_wall
            watching = False
            watcher.join()
            if args.sustained:
                flooder.join()
            state_after, incarnation_after = view_of_victim("second")
            still_open = 0  # neither closed nor reset by the victim
            for s in idle:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.setblocking(False)
                try:
                    s.recv(1)  # b"": closed
                except BlockingIOError:
                    still_open += 1
                except OSError:
                    pass  # reset
                s.close()
            shed = status("victim").get("handshakes_shed", 0)
        finally:
            stop_processes(procs)

    ratio = unflooded / flooded
    result = {"connections": args.connections, "sources": args.sources, "connect_refused": refused,
              "replays": replayed, "sustained_connections": sustained,
              "sustained_per_second": round(sustained / fetch_wall) if args.sustained else 0,
              "size": args.size, "flood_wall_s": round(flood_wall, 2), "victim_busy_s": round(busy_wall, 2),
              "victim_cpu_s": round(flood_cpu_s, 3),
              "victim_cpu_us_per_connection": round(flood_cpu_s * 1e6 / max(1, args.connections + replayed), 1),
              "victim_cpu_flood": round(flood_cpu, 3),
              "victim_cpu_during_fetch": round(hold_cpu, 3), "handshakes_shed": shed,
              "idle_still_open": still_open, "alive_throughout": alive_throughout,
              "incarnation_unchanged": incarnation_after == incarnation_before,
              "fetch_unflooded_s": round(unflooded, 3), "fetch_flooded_s": round(flooded, 3),
              "speed_ratio": round(ratio, 3)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"flood: {args.connections} idle connections ({refused} refused), {replayed} replayed hellos in "
              f"{flood_wall:.2f} s; the victim (ulimit -n 256) was busy {busy_wall:.2f} s and used "
              f"{flood_cpu_s:.3f} s of CPU ({flood_cpu * 100:.1f}% of a core, "
              f"{flood_cpu_s * 1e6 / max(1, args.connections + replayed):.1f} us a connection), closed "
              f"{shed} handshakes at its caps, {still_open} idle connections still open")
        print(f"gossip: the victim {'stayed alive' if alive_throughout else 'was suspected or declared dead'}, "
              f"incarnation {'unchanged' if incarnation_after == incarnation_before else 'changed (it refuted)'}")
        if args.sustained:
            print(f"sustained: {sustained} more idle connections from {args.sources} addresses during the "
                  f"flooded fetch ({sustained / fetch_wall:.0f}/s)")
        print(f"fetch: {unflooded:.2f} s unflooded, {flooded:.2f} s flooded: {ratio:.2f} of the speed")
    us_per_connection = flood_cpu_s * 1e6 / max(1, args.connections + replayed)
    assert args.us_per_connection_goal == 0 or us_per_connection < args.us_per_connection_goal, \
        f"the victim used {us_per_connection:.1f} us of CPU a connection"
    assert args.cpu_goal is None or flood_cpu < args.cpu_goal, \
        f"the victim used {flood_cpu * 100:.1f}% of a core during the flood"
    assert alive_throughout and state_after == "alive", "the victim was suspected or declared dead"
    assert incarnation_after == incarnation_before, "the victim had to refute a suspicion"
    assert ratio >= args.speed_goal, f"the flooded fetch ran at {ratio:.2f} of the unflooded speed"


if __name__ == "__main__":
    main()
