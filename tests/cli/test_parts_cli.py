#!/usr/bin/env python3
"""`tensorhub publish --version V --part I/N` through daemons on loopback:
two trainer ranks publish their safetensors files (slices named in the
metadata "tensorhub.slices"), each declaring two tensor-parallel ranks'
views (--views), the daemons seal, and a third daemon sees the version as
its head. `tensorhub fetch --select` then writes one rank's strided columns
into a safetensors file (its slice named in the metadata), receiving exactly
those bytes, and `tensorhub fetch` writes the whole model in parts into one;
two daemons, the ranks of a TP2 instance, stage their columns for their
group (`fetch --group`) and `tensorhub commit` it together, while a group
missing a rank times out naming it. Bad --part, --views, --select and
--group arguments and a slice map that names a missing tensor are refused
with their reason.

Usage: test_parts_cli.py PATH/TO/tensorhub
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import Swarm, wait_for  # noqa: E402


def write_part(path, rank, rows=256, cols=64, slices=None):
    """Rank `rank` of 2: rows [rank*rows, +rows) of a [2*rows, cols] F32 "w"."""
    data = bytes((rank * 7 + i) % 251 for i in range(rows * cols * 4))
    if slices is None:
        slices = {"w": {"global_shape": [2 * rows, cols], "begin": [rank * rows, 0]}}
    header = {"w": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [0, len(data)]},
              "__metadata__": {"tensorhub.slices": json.dumps(slices)}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="tensorhub-parts-") as workdir:
        cluster = Swarm(binary, workdir)
        try:
            names = ["rank0", "rank1", "watcher", "tp1"]
            for n in names:
                cluster.keygen(n)
            trust = []
            for n in ("rank0", "rank1"):
                trust += ["--trust", cluster.pubkeys[n]]
            cluster.start("rank0", extra=trust)
            cluster.start("rank1", seeds=["rank0"], extra=trust)
            cluster.start("watcher", seeds=["rank0"], extra=trust)
            cluster.start("tp1", seeds=["rank0"], extra=trust)

            # Refused before anything is sent, with the reason.
            part0 = os.path.join(workdir, "rank0.safetensors")
            write_part(part0, 0)
            for extra, words in ((["--part", "2/2", "--version", "1"], "I/N"), (["--part", "0/2"], "--version"),
                                 (["--version", "3"], "goes with --part"), (["--part", "x", "--version", "1"], "I/N")):
                out = cluster.publish("rank0", "policy", part0, *extra)
                assert out.returncode != 0 and words in out.stderr, (extra, out.stderr)
            bad = os.path.join(workdir, "bad.safetensors")
            write_part(bad, 0, slices={"nope": {"global_shape": [1], "begin": [0]}})
            out = cluster.publish("rank0", "policy", bad, "--version", "1", "--part", "0/2")
            assert out.returncode != 0 and "names 'nope', which the file does not hold" in out.stderr, out.stderr

            views = os.path.join(workdir, "views.json")
            with open(views, "w") as f:
                json.dump([{"w": [[0, 512], [0, 32]]}, {"w": [[0, 512], [32, 64]]}], f)
            with open(os.path.join(workdir, "bad-views.json"), "w") as f:
                json.dump({"w": None}, f)
            for extra, words in ((["--views", views], "goes with --part"),
                                 (["--part", "0/2", "--version", "1", "--views", os.path.join(workdir, "bad-views.json")],
                                  "a JSON list of selections")):
                out = cluster.publish("rank0", "policy", part0, *extra)
                assert out.returncode != 0 and words in out.stderr, (extra, out.stderr)
            full = b""
            for rank in (0, 1):
                path = os.path.join(workdir, f"rank{rank}.safetensors")
                write_part(path, rank)
                full += read_safetensors(path)[1]
                out = cluster.publish(f"rank{rank}", "policy", path, "--version", "1", "--part", f"{rank}/2",
                                      "--views", views)
                assert out.returncode == 0, out.stderr
                assert f"published part {rank} of 2 of v1" in out.stdout, out.stdout
            for n in names:
                wait_for(f"{n} to see v1 sealed", lambda n=n: cluster.head(n) == 1, 30)
            heads = {cluster.status(n)["known_heads"]["policy"]["id"] for n in names}
            assert len(heads) == 1, heads  # every rank's seal is one version
            for n in names:
                wait_for(f"{n} to have verified the seal",
                         lambda n=n: cluster.status(n)["heads"].get("policy", {}).get("parts") == 2, 30)
            mine = [v for v in cluster.status("rank1")["versions"] if v.get("part")]
            assert len(mine) == 1 and mine[0]["part"] == [1, 2] and mine[0]["sealed"], mine

            # The right-hand rank's columns, a piece of every row of both parts, through the daemon.
            selected = os.path.join(workdir, "right.safetensors")
            out = cluster.fetch("watcher", selected, version=1, extra=("--select", '{"w": [[0, 512], [32, 64]]}'))
            assert out.returncode == 0, out.stderr
            assert "fetched a selection of policy v1: 64.0 KiB" in out.stdout, out.stdout
            assert "64.0 KiB received)" in out.stdout, out.stdout  # its views: whole shards would be 128 KiB
            header, data = read_safetensors(selected)
            assert header["w"]["shape"] == [512, 32] and header["w"]["dtype"] == "F32", header
            slices = json.loads(header["__metadata__"]["tensorhub.slices"])
            assert slices == {"w": {"global_shape": [512, 64], "begin": [0, 32]}}, slices
            assert data == b"".join(full[r * 256 + 128:(r + 1) * 256] for r in range(512))
            # The whole model in parts, into one safetensors file: "w" whole.
            whole = os.path.join(workdir, "whole.safetensors")
            out = cluster.fetch("watcher", whole, version=1)
            assert out.returncode == 0, out.stderr
            header, data = read_safetensors(whole)
            assert header["w"]["shape"] == [512, 64] and "__metadata__" not in header, header
            assert data == full
            for select, words in (('{"w": [[5, 2], [0, 64]]}', "0 <= begin < end"), ("nope", "--select is not JSON"),
                                  ('{"x": null}', "no tensor 'x'"), ('["w"]', "an object of tensor names")):
                out = cluster.fetch("watcher", os.path.join(workdir, "bad.out"), version=1, extra=("--select", select))
                assert out.returncode != 0 and words in out.stderr, (select, out.stderr)
            assert not os.path.exists(os.path.join(workdir, "bad.out"))

            # An instance of two TP ranks (the watcher and tp1): each stages its columns for the group
            # into a file, and both commit together.
            stages = []
            for rank, daemon in enumerate(("watcher", "tp1")):
                path = os.path.join(workdir, f"tp{rank}.safetensors")
                out = cluster.fetch(daemon, path, version=1, extra=(
                    "--group", "instance-0", "--group-size", "2", "--group-rank", str(rank),
                    "--select", json.dumps({"w": [[0, 512], [32 * rank, 32 * rank + 32]]})))
                assert out.returncode == 0, out.stderr
                assert "staged for group instance-0: a selection of policy v1" in out.stdout, out.stdout
                stages.append(path)
            commits = [subprocess.Popen([binary, "commit", "--control", cluster.control(d), "--group", "instance-0",
                                         "--version", "1", "--timeout", "20"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for d in ("watcher", "tp1")]
            for c in commits:
                stdout, stderr = c.communicate(timeout=60)
                assert c.returncode == 0 and "committed v1 for group instance-0" in stdout, (stdout, stderr)
            # What the group committed, as a restarted rank asks it before catching up.
            for rank, daemon in enumerate(("watcher", "tp1")):
                out = cluster.run("committed", "--control", cluster.control(daemon), "--group", "instance-0",
                                  "--group-size", "2", "--group-rank", str(rank), "--model", "policy", "--wait", "5")
                assert out.returncode == 0 and out.stdout == "1\n", (out.stdout, out.stderr)
            out = cluster.run("committed", "--control", cluster.control("watcher"), "--group", "instance-0",
                              "--group-size", "2", "--group-rank", "1", "--model", "policy")
            assert out.returncode != 0 and "rank 0 of 2 of group 'instance-0' already" in out.stderr, out.stderr
            for rank, path in enumerate(stages):
                assert read_safetensors(path)[1] == b"".join(
                    full[r * 256 + 128 * rank:r * 256 + 128 * rank + 128] for r in range(512))
            # A group whose rank 1 never stages: the commit times out naming it; an unknown group is refused.
            out = cluster.fetch("watcher", os.path.join(workdir, "lonely.safetensors"), version=1, extra=(
                "--group", "instance-1", "--group-size", "2", "--group-rank", "0"))
            assert out.returncode == 0, out.stderr
            out = cluster.run("commit", "--control", cluster.control("watcher"), "--group", "instance-1",
                              "--version", "1", "--timeout", "1.5")
            assert out.returncode != 0 and "timeout" in out.stderr and "rank 1" in out.stderr, out.stderr
            out = cluster.run("committed", "--control", cluster.control("watcher"), "--group", "instance-1",
                              "--group-size", "2", "--group-rank", "0", "--model", "policy")
            assert out.returncode == 0 and out.stdout == "none\n", (out.stdout, out.stderr)
            out = cluster.run("commit", "--control", cluster.control("watcher"), "--group", "nobody", "--version", "1")
            assert out.returncode != 0 and "no rank of group 'nobody'" in out.stderr, out.stderr
            out = cluster.fetch("watcher", os.path.join(workdir, "x"), version="latest", extra=(
                "--group", "instance-0", "--group-size", "2", "--group-rank", "0"))
            assert out.returncode != 0 and "explicit --version" in out.stderr, out.stderr
            print("parts over the CLI: 2 ranks sealed v1; every daemon's head is", heads.pop()[:12],
                  "; a selection's file holds its columns, received exactly; a TP2 group staged and committed")
        finally:
            cluster.stop_all()


if __name__ == "__main__":
    main()
