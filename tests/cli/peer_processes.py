"""What the multi-process tests on loopback share: ports and waiting."""
import json
import os
import random
import socket
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


def control_raw(path, payload, timeout=10):
    """Sends `payload` (bytes, one line) to a daemon's control socket and
    returns the reply lines as JSON."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(payload + b"\n")
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
