#!/usr/bin/env python3
"""Bad input reaches a daemon from its command line and its control socket.

- A peer whose own record would break the record rules (a label that is not
  printable ASCII, an advertised name instead of an IP) refuses to start, with
  the reason, instead of signing a record that other peers must refuse.
- A seed given by name is looked up once at start and joins.
- Every malformed control request (not JSON, wrong types, invalid UTF-8, an
  unknown command, a model name outside the rule) gets one error line, and
  the daemon answers `status` afterwards.
- A published file truncated under the daemon withdraws its version; the
  daemon lives on.
- The default control socket lives in a directory of this user's alone; a
  daemon refuses one open to others. As root (setpriv present): a client
  refuses a socket served by another user (one who took the path first),
  and the daemon answers no connection from another user.

Usage: test_hostile_input.py PATH/TO/tensorhub
"""
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import control_raw, free_port, stop_processes, wait_for  # noqa: E402


def main():
    binary = os.path.abspath(sys.argv[1])
    procs = {}
    with tempfile.TemporaryDirectory(prefix="tensorhub-hostile-") as d:
        def run(*args):
            return subprocess.run([binary, *args], capture_output=True, timeout=30)

        swarm = os.path.join(d, "swarm.key")
        assert run("swarm-key", "--out", swarm).returncode == 0
        keys = {}
        for name in ("a", "b", "bad"):
            keys[name] = os.path.join(d, name + ".key")
            assert run("keygen", "--out", keys[name]).returncode == 0

        def peer_cmd(name, port, *extra):
            return [binary, "peer", "--listen", f"127.0.0.1:{port}", "--data-listen", "127.0.0.1:0", "--key",
                    keys[name], "--swarm-key", swarm, "--control", os.path.join(d, name + ".sock"), *extra]

        try:
            port_a = free_port()
            procs["a"] = subprocess.Popen(peer_cmd("a", port_a), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            sock_a = os.path.join(d, "a.sock")
            wait_for("peer a's control socket", lambda: os.path.exists(sock_a), 10)

            # A record every other peer would refuse is never signed: the start fails.
            for extra, reason in (([b"--dc", b"\xff"], b"printable ASCII"),
                                  ([b"--advertise", b"localhost:7999"], b"IP address")):
                out = subprocess.run([os.fsencode(a) for a in peer_cmd("bad", free_port())] + extra,
                                     capture_output=True, timeout=20)
                assert out.returncode != 0, f"a peer started with {extra}"
                assert reason in out.stderr + out.stdout, f"{extra}: {out.stderr!r}"
            print("a peer with a non-printable label or a named advertise address refuses to start")

            # A seed by name: looked up once at start, and it joins.
            procs["b"] = subprocess.Popen(peer_cmd("b", free_port(), "--seed", f"localhost:{port_a}"),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            def members(sock):
                try:
                    return control_raw(sock, b'{"cmd":"status"}')[-1].get("members", [])
                except (OSError, ValueError, IndexError):
                    return []

            wait_for("b, seeded by name, to join a", lambda: any(m.get("state") == "alive" for m in members(sock_a)), 20)
            print("a seed given by name is resolved at start and joins")

            malformed = [
                b"not json",
                b"[1, 2]",
                b'{"cmd": 5}',
                b'{"cmd": "fetch", "model": "policy", "version": "x"}',
                b'{"cmd": "fetch", "model": "policy", "version": -1}',
                b'{"cmd": "publish", "model": 7, "file": "/nonexistent"}',
                b'{"cmd": "publish", "model": "caf\xc3\xa9", "file": "/nonexistent"}',
                b'{"cmd": "publish", "model": "policy", "file": "/nonexistent", "wait_replicas": "all"}',
                b'{"cmd": "release", "model": "policy", "version": 1, "now": "yes"}',
                b'{"cmd": "\xff\xfe"}',
                b'{"cmd": "\\u00ff\\u00fe"}',
                b'{"cmd": "digest", "model": "\xc3\x28", "version": 1}',
            ]
            for request in malformed:
                lines = control_raw(sock_a, request)
                assert lines, f"no answer to {request!r}"
                assert lines[-1].get("ok") is False and lines[-1].get("error"), f"{request!r}: {lines}"
                assert procs["a"].poll() is None, f"the daemon died on {request!r}"
            assert members(sock_a), "the daemon stopped answering status"
            print(f"{len(malformed)} malformed control requests each got an error line; the daemon lives on")

            # A published file truncated under the daemon: the version is
            # withdrawn with an error, and the daemon lives on.
            model = os.path.join(d, "model.safetensors")
            assert run("synth-model", "--out", model, "--size", "8MiB").returncode == 0
            out = subprocess.run([binary, "publish", "--control", sock_a, "--model", "policy", model],
                                 capture_output=True, timeout=30)
            assert out.returncode == 0, out.stderr

            def versions(sock):
                return control_raw(sock, b'{"cmd":"status"}')[-1].get("versions", [])

            assert versions(sock_a), "the published version is not listed"
            os.truncate(model, 0)
            wait_for("the truncated file's version to be withdrawn", lambda: not versions(sock_a), 10)
            assert procs["a"].poll() is None, "the daemon died when its published file was truncated"
            print("a published file truncated under the daemon: the version is withdrawn, the daemon lives on")

            # The default control socket: in a private directory, found by --peer.
            runtime = os.path.join(d, "runtime")
            os.mkdir(runtime, 0o700)
            env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
            port_c = free_port()
            cmd_c = [binary, "peer", "--listen", f"127.0.0.1:{port_c}", "--data-listen", "127.0.0.1:0",
                     "--key", keys["b"], "--swarm-key", swarm]
            procs["c"] = subprocess.Popen(cmd_c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            private = os.path.join(runtime, "tensorhub")
            sock_c = os.path.join(private, f"peer-127_0_0_1-{port_c}.sock")
            wait_for("the default control socket", lambda: os.path.exists(sock_c), 10)
            assert stat.S_IMODE(os.stat(private).st_mode) == 0o700, oct(os.stat(private).st_mode)
            out = subprocess.run([binary, "status", "--peer", f"127.0.0.1:{port_c}"], env=env, capture_output=True,
                                 timeout=20)
            assert out.returncode == 0, out.stderr
            procs["c"].kill()
            procs["c"].wait()
            open_runtime = os.path.join(d, "open-runtime")
            os.makedirs(os.path.join(open_runtime, "tensorhub"))
            os.chmod(os.path.join(open_runtime, "tensorhub"), 0o777)
            out = subprocess.run(cmd_c, env=dict(os.environ, XDG_RUNTIME_DIR=open_runtime), capture_output=True,
                                 timeout=20)
            assert out.returncode != 0 and b"open to other users" in out.stderr, out.stderr
            print("the default control socket is in a private directory; an open one is refused")

            setpriv = shutil.which("setpriv")
            if os.geteuid() != 0 or setpriv is None or not os.path.exists("/usr/bin/python3"):
                print("skipped the other-user checks: they need root, setpriv and /usr/bin/python3")
                return
            # Another user (nobody), with the system's python (this one may
            # live in root's home).
            nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"]
            os.chmod(d, 0o711)
            # A squatter of another user listening where a client looks.
            shared = os.path.join(d, "shared")
            os.mkdir(shared)
            os.chmod(shared, 0o777)
            squat = os.path.join(shared, "peer.sock")
            squatter = subprocess.Popen(nobody + [
                "import socket,sys\n"
                "s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); print('up', flush=True)\n"
                "while True:\n"
                "  c,_=s.accept()\n"
                "  try: c.recv(4096); c.sendall(b'{\"done\":true,\"ok\":true}\\n')\n"
                "  except OSError: pass\n"
                "  c.close()\n",
                squat], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            procs["squatter"] = squatter
            assert squatter.stdout.readline().strip() == b"up"
            out = subprocess.run([binary, "status", "--control", squat], capture_output=True, timeout=20)
            assert out.returncode != 0 and b"served by uid 65534" in out.stderr, out.stderr
            # A client of another user, should the socket's mode be widened.
            os.chmod(sock_a, 0o777)
            client = subprocess.run(nobody + [
                "import socket,sys\n"
                "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                "try: s.sendall(b'{\"cmd\":\"status\"}\\n'); print(len(s.recv(65536)))\n"
                "except OSError: print(0)\n", sock_a], capture_output=True, timeout=20)
            assert client.returncode == 0 and client.stdout.strip() == b"0", (client.stdout, client.stderr)
            assert members(sock_a), "the daemon stopped answering its own user"
            print("a socket served by another user is refused by the client; the daemon answers no other user")
        finally:
            stop_processes(procs)


if __name__ == "__main__":
    main()
