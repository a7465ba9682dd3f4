"""What the multi-process tests on loopback share: ports and waiting."""
import json
import os
import random
import socket
import subprocess
import threading
import time

_taken = set()


def free_port():
    """A port below the kernel's ephemeral range (32768 and up), free for UDP and
    TCP on 127.0.0.1. Ephemeral ports the peers bind (data listeners, clients)
    can then never take it between this check and the peer's bind."""
    rng = random.Random(os.getpid())
    while True:
        port = rng.randrange(20000, 32000)
        if port in _taken:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, \
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                u.bind(("127.0.0.1", port))
                t.bind(("127.0.0.1", port))
        except OSError:
            continue
        _taken.add(port)
        return port


def wait_for(what, predicate, timeout, interval=0.1):
    """Polls `predicate` until it holds; returns the time it did. Never a
    fixed sleep: the deadline only bounds a wait that is otherwise as short
    as it can be."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stop_processes(procs):
    """SIGKILLs whatever is still running of `procs` (a dict of Popen) and reaps all."""
    for p in procs.values():
        if p.poll() is None:
            p.kill()
    for p in procs.values():
        p.wait()


def control_raw(path, payload, timeout=10, newline=True, shut_write=False):
    """Sends `payload` (bytes; a newline added unless `newline` is false) to a
    daemon's control socket, closing the writing half after it if
    `shut_write`, and returns the reply lines as JSON. It reads while it
    sends: the daemon may answer before it has taken everything."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)

        def send():
            try:
                s.sendall(payload + (b"\n" if newline else b""))
                if shut_write:
                    s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the daemon answered and closed before taking it all

        sender = threading.Thread(target=send)
        sender.start()
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        sender.join()
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


class Swarm:
    """`tensorhub peer` daemons on loopback, named, in one work directory:
    each with its own key, control socket, log and hold directory. Peers
    trust `publisher` (once set), else themselves."""

    def __init__(self, binary, workdir):
        self.binary, self.dir = binary, workdir
        self.procs, self.ports, self.pubkeys, self.keys = {}, {}, {}, {}
        self.swarm_key = os.path.join(workdir, "swarm.key")
        assert self.run("swarm-key", "--out", self.swarm_key).returncode == 0
        self.publisher = None

    def run(self, *args, timeout=120):
        return subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=timeout)

    def keygen(self, name):
        key = os.path.join(self.dir, name + ".key")
        out = self.run("keygen", "--out", key)
        assert out.returncode == 0, out.stderr
        self.pubkeys[name] = out.stdout.strip()
        self.keys[name] = key
        return key

    def command(self, name, seeds=(), extra=()):
        """The daemon's command line; a name started before keeps its key and port."""
        key = self.keys.get(name) or self.keygen(name)
        port = self.ports.get(name) or free_port()
        self.ports[name] = port
        trust = self.pubkeys[self.publisher] if self.publisher else self.pubkeys[name]
        cmd = [self.binary, "peer", "--listen", f"127.0.0.1:{port}", "--data-listen", "127.0.0.1:0",
               "--key", key, "--swarm-key", self.swarm_key, "--control", self.control(name),
               "--hold-dir", os.path.join(self.dir, "hold-" + name), "--trust", trust, "--shard-size", "1MiB",
               "--host", name, *extra]
        for seed in seeds:
            cmd += ["--seed", f"127.0.0.1:{self.ports[seed]}"]
        return cmd

    def start(self, name, seeds=(), extra=()):
        cmd = self.command(name, seeds, extra)
        log = open(os.path.join(self.dir, name + ".log"), "a")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_for(f"{name}'s control socket", lambda: self.status(name) is not None, 10)

    def control(self, name):
        return os.path.join(self.dir, name + ".sock")

    def status(self, name):
        out = self.run("status", "--control", self.control(name), "--json")
        return json.loads(out.stdout) if out.returncode == 0 else None

    def head(self, name, model="policy"):
        s = self.status(name)
        return s["known_heads"].get(model, {}).get("version") if s else None

    def fetch(self, name, out, version="latest", timeout=120, model="policy", extra=()):
        return self.run("fetch", "--control", self.control(name), "--model", model, "--version", str(version),
                        "--out", out, *extra, timeout=timeout)

    def publish(self, name, model, path, *extra):
        return self.run("publish", "--control", self.control(name), "--model", model, path, *extra)

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log")) as f:
            return f.read()

    def stop_all(self):
        stop_processes(self.procs)


def cpu_seconds(pid):
    """User plus system CPU time of a process so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
