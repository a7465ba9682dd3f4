#!/usr/bin/env python3
"""The house's layers, checked on the source tree:

- no two folders under src/ include each other (layers depend one way);
- each folder includes only the folders below it (FORBIDDEN names what each
  may not reach: the sans-I/O cores nothing of the runtime, the seams
  nothing above them, RDMA and CUDA not the peer core or the runtime, the
  simulator never the runtime);
- the sans-I/O cores (gossip, swarm, peer) include no socket, thread, lock,
  asio, verbs, CUDA or SimGrid header (they run on their driver's thread,
  and waiters belong to the driver);
- the public headers expose no third-party type.

It checks itself first on a small tree that breaks each rule, so a rule
that no longer catches anything fails too.

Usage: test_layers.py PROJECT_ROOT
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)

# folder -> folders of src/ it must not include (directly).
FORBIDDEN = {
    "core": {"manifest", "gossip", "swarm", "seams", "peer", "transport", "rdma", "cuda", "cli"},
    "manifest": {"gossip", "swarm", "seams", "peer", "transport", "rdma", "cuda", "cli"},
    "gossip": {"swarm", "seams", "peer", "transport", "rdma", "cuda", "cli"},
    "swarm": {"seams", "peer", "transport", "rdma", "cuda", "cli"},
    "seams": {"peer", "transport", "rdma", "cuda", "cli"},
    "peer": {"transport", "rdma", "cuda", "cli"},
    "rdma": {"peer", "transport", "cuda", "cli"},
    "cuda": {"peer", "transport", "rdma", "cli"},
    "transport": {"cli"},
}
# The sans-I/O cores: what they never include.
CORES = ("gossip", "swarm", "peer")
CORE_SYSTEM = re.compile(r"^(asio|sys/socket\.h|netinet/|arpa/|infiniband/|cuda|simgrid|thread$|future$|mutex$|"
                         r"shared_mutex$|condition_variable$|semaphore$|latch$|barrier$|stop_token$|atomic$)")
SIM_FORBIDDEN = {"transport", "rdma", "cuda", "cli"}
PUBLIC_THIRD_PARTY = re.compile(r"^(asio|sodium|msgpack|xxhash|infiniband/|cuda|nlohmann|CLI/|simgrid|doctest)")


def includes(path):
    with open(path, errors="replace") as f:
        return INCLUDE.findall(f.read())


def sources(folder):
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith((".hpp", ".cpp", ".h", ".cu", ".inc")):
                yield os.path.join(root, name)


def problems_in(root):
    problems = []
    src = os.path.join(root, "src")
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    edges = {}
    for folder in folders:
        for path in sources(os.path.join(src, folder)):
            for kind, target in includes(path):
                top = target.split("/", 1)[0]
                if kind == '"' and "/" in target and top in folders and top != folder:
                    edges.setdefault((folder, top), path)
                    if top in FORBIDDEN.get(folder, ()):
                        problems.append(f"{path} includes {target}: src/{folder} may not reach src/{top}")
                if kind == "<" and folder in CORES and CORE_SYSTEM.match(target):
                    problems.append(f"{path} includes <{target}>: src/{folder} is a sans-I/O core")
    for (a, b), path in sorted(edges.items()):
        if a < b and (b, a) in edges:
            problems.append(f"src/{a} and src/{b} include each other ({path}, {edges[(b, a)]})")
    for path in sources(os.path.join(root, "sim")):
        for kind, target in includes(path):
            if kind == '"' and target.split("/", 1)[0] in SIM_FORBIDDEN:
                problems.append(f"{path} includes {target}: the simulator drives the cores, never the runtime")
    for path in sources(os.path.join(root, "include", "tensorhub")):
        for kind, target in includes(path):
            if PUBLIC_THIRD_PARTY.match(target):
                problems.append(f"{path} includes {target}: public headers expose no third-party type")
    return problems


def self_check():
    """A tree that breaks every rule once: each must be found."""
    broken = {
        "src/peer/a.hpp": '#include "transport/b.hpp"\n#include <thread>\n',
        "src/swarm/h.hpp": "#include <mutex>\n#include <condition_variable>\n",
        "src/transport/b.hpp": '#include "peer/a.hpp"\n',
        "src/seams/c.hpp": '#include "cuda/d.hpp"\n',
        "src/cuda/d.hpp": "",
        "sim/e.cpp": '#include "rdma/f.hpp"\n',
        "src/rdma/f.hpp": "",
        "include/tensorhub/g.hpp": "#include <asio.hpp>\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for rel, text in broken.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        found = "\n".join(problems_in(d))
    for expected in ("may not reach src/transport", "is a sans-I/O core", "include each other", "<mutex>",
                     "<condition_variable>",
                     "may not reach src/cuda", "never the runtime", "no third-party type"):
        assert expected in found, f"the check no longer finds '{expected}' in a tree that breaks it:\n{found}"


def main():
    self_check()
    problems = problems_in(os.path.abspath(sys.argv[1]))
    for p in problems:
        print(p)
    assert not problems, f"{len(problems)} layering problem(s)"
    print("layers depend one way; the cores include no runtime header; the public headers no third-party type")


if __name__ == "__main__":
    main()
