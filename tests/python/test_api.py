"""The package's public surface: typed results that still read as dicts, one
argument order for fetch calls (C++'s: model, version, then where to) with
the old order refused rather than misread, timeouts on the daemon client's
calls, every public function saying what it raises, and an import graph
without a cycle."""
import ast
import inspect
import os
import pathlib
import socket
import threading

import numpy as np
import pytest

import tensorhub as th
from tensorhub import daemon, safetensors

SWARM = bytes(range(32))
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "tensorhub"


def test_a_version_info_reads_by_attribute_and_as_the_dict_it_was():
    info = th.VersionInfo("policy", 3, "ab" * 32, 4096)
    assert (info.model, info.version, info.manifest_id, info.nbytes) == ("policy", 3, "ab" * 32, 4096)
    assert info["version"] == 3 and info.get("nbytes") == 4096 and "manifest_id" in info
    assert dict(info) == {"model": "policy", "version": 3, "manifest_id": "ab" * 32, "nbytes": 4096}
    assert info == {"model": "policy", "version": 3, "manifest_id": "ab" * 32, "nbytes": 4096}
    assert info == th.VersionInfo("policy", 3, "ab" * 32, 4096) and hash(info) == hash(th.VersionInfo(*info.values()))
    # A daemon does not say a head's size: it reads as absent, as from its dict.
    head = th.VersionInfo("policy", 3, "ab" * 32)
    assert head.nbytes is None and "nbytes" not in head and head.get("nbytes", 0) == 0
    assert sorted(head) == ["manifest_id", "model", "version"]
    with pytest.raises(KeyError):
        head["nbytes"]
    with pytest.raises(KeyError):
        info["no_such_field"]
    with pytest.raises(AttributeError):  # frozen
        info.version = 4
    progress = th.FetchProgress(bytes_total=10, bytes_verified=5, shards_total=2, shards_verified=1, sources=1,
                                done=False)
    assert progress.bytes_verified == 5 and progress["done"] is False and "bytes_per_second" not in progress


def test_fetch_calls_take_model_version_then_destination_and_refuse_the_old_order(tmp_path):
    peer = th.Peer.start(swarm_key=SWARM, retain_head_replicas=0)
    try:
        with peer.publish("policy", {"x": np.arange(1024, dtype=np.float32)}) as published:
            out = tmp_path / "v.safetensors"
            # C++'s order: Peer::fetch_to_file(model, version, path).
            with peer.fetch_to_file("policy", published.version, out) as fetched:
                assert fetched.wait(30).info == published.info
            with peer.fetch_to_file("policy", path=str(out)) as fetched:  # the head
                assert fetched.wait(30).version == published.version
            # The old order, fetch_to_file(model, path[, version]): refused, never misread.
            for call in (lambda: peer.fetch_to_file("policy", out), lambda: peer.fetch_to_file("policy", str(out), 1),
                         lambda: peer.fetch_to_file("policy", str(out).encode(), 1)):
                with pytest.raises(TypeError) as e:
                    call()
                assert isinstance(e.value, th.Error) and e.value.code == "invalid_argument"
                assert "fetch_to_file(model, version, path)" in str(e.value), e.value
            with pytest.raises(TypeError):
                peer.fetch_to_file("policy", str(out), version=1)  # Python's own refusal
            with pytest.raises(TypeError) as e:
                peer.fetch_to_file("policy", 1)  # no path
            assert "path is missing" in str(e.value)
            for bad in ("1", 1.0, True, None):
                with pytest.raises(TypeError):
                    peer.fetch("policy", bad)
            with pytest.raises(th.Error) as e:
                peer.fetch("policy", -1)
            assert e.value.code == "invalid_argument"
            assert peer.fetch("policy", published.version).wait(30).progress().done
            with pytest.raises(TypeError):
                peer.wait_for_head("policy", after="0", timeout=1)
            with pytest.raises(TypeError):
                published.wait_replicated(0, timeout="soon")
            with pytest.raises(th.Error) as e:
                published.wait_replicated(1, timeout=-1)
            assert e.value.code == "invalid_argument"
    finally:
        peer.close()


def test_the_daemon_clients_calls_take_a_timeout(tmp_path):
    nobody = str(tmp_path / "nobody.sock")
    with pytest.raises(TypeError):
        th.connect(nobody, timeout="600")
    client = th.connect(nobody, directory=str(tmp_path), timeout=5)
    for call in (lambda: client.status(timeout=0.5), lambda: client.latest("policy", timeout=0.5),
                 lambda: client.fetch("policy", 1, timeout=0.5), lambda: client.hold("policy", 1, timeout=0.5),
                 lambda: client.publish("policy", {"x": np.zeros(4, np.float32)}, timeout=0.5),
                 lambda: client.wait_for_head("policy", timeout=0.5)):
        with pytest.raises(th.Error) as e:
            call()
        assert e.value.code == "unavailable", e.value
    assert os.listdir(tmp_path) == []  # the publish that failed removed its file
    for call in (lambda: client.status(timeout=-1), lambda: client.fetch("policy", "1"),
                 lambda: client.wait_for_head("policy", after=-1)):
        with pytest.raises(th.Error) as e:
            call()
        assert e.value.code == "invalid_argument", e.value


def _public_callables():
    """(where, name, object) of every public function, method and property
    of the package's public modules."""
    for module in (th, daemon, safetensors):
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if getattr(obj, "__module__", "").split(".")[0] != "tensorhub":
                continue  # typing, numpy, ...
            if inspect.isfunction(obj):
                yield module.__name__, name, obj, ""
            elif inspect.isclass(obj):
                for klass in obj.__mro__:
                    if klass.__module__.split(".")[0] != "tensorhub" or issubclass(klass, BaseException):
                        continue
                    for member, value in vars(klass).items():
                        if member.startswith("_"):
                            continue
                        if isinstance(value, (classmethod, staticmethod)):
                            value = value.__func__
                        if inspect.isfunction(value) or isinstance(value, property):
                            yield obj.__name__, member, value, inspect.getdoc(obj) or ""


def test_every_public_function_says_what_it_raises():
    silent = []
    for where, name, obj, class_doc in _public_callables():
        doc = (obj.__doc__ or "").lower()
        if "raise" in doc or (isinstance(obj, property) and "raise" in class_doc.lower()):
            continue
        silent.append(f"{where}.{name}")
    assert not silent, f"these say nothing of what they raise: {sorted(set(silent))}"


def test_the_package_imports_without_a_cycle():
    """No module of the package imports the package itself (its __init__):
    what they share lives in private modules that import nothing above
    them, so the import graph is a tree."""
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {"_native"}
    graph = {}
    for path in PACKAGE.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                deps |= {n if n in modules else "__init__" for n in names}
        graph[path.stem] = deps
    for name, deps in graph.items():
        if name != "__init__":
            assert "__init__" not in deps, f"{name}.py imports from the package's __init__"

    def visit(name, path):
        for dep in graph.get(name, ()):
            assert dep not in path, f"an import cycle: {' -> '.join(path + [dep])}"
            visit(dep, path + [dep])

    for name in graph:
        visit(name, [name])


def _fake_daemon(path, answers):
    """A control socket that answers each connection with the next lines of
    `answers` (bytes), then closes it."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(len(answers))

    def serve():
        with server:
            for lines in answers:
                conn, _ = server.accept()
                with conn:
                    conn.recv(1 << 16)
                    conn.sendall(lines)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_daemon_wait_is_answered_once_and_a_daemon_gone_mid_answer_is_an_error(tmp_path):
    path = str(tmp_path / "fake.sock")
    head = b'{"done":true,"ok":true,"model":"policy","version":3,"id":"' + b"ab" * 32 + b'","bytes":64}\n'
    thread = _fake_daemon(path, [head, b'{"event":"replicas","count":0}\n'])
    client = th.connect(path, directory=str(tmp_path), timeout=5)
    # A zero timeout still takes the daemon's immediate answer.
    assert client.wait_for_head("policy", timeout=0) == th.VersionInfo("policy", 3, "ab" * 32, 64)
    # Progress, then the connection ends without a "done" line: the daemon
    # went, and the wait is not reported as met.
    (tmp_path / "x").write_bytes(bytes(64))
    published = daemon.DaemonPublished(client, "policy", 3, "ab" * 32, str(tmp_path / "x"), {}, owned=False)
    with pytest.raises(th.Error) as e:
        published.wait_replicated(1, timeout=5)
    assert e.value.code == "unavailable", e.value
    thread.join(5)
