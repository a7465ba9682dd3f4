"""Fetches into CUDA tensors. Without a GPU (CI), what runs is the naming
of GPUs and the refusals; with one, the round trip into CUDA tensors."""
import time
import types

import numpy as np
import pytest

import tensorhub as th
from conftest import BINARY, swarm_of_daemons
from tensorhub import _cuda


def test_a_gpu_is_named_by_its_uuid_whichever_way_torch_prints_it():
    uuid = "8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b"
    assert _cuda.gpu_uuid(types.SimpleNamespace(uuid=uuid)) == "GPU-" + uuid
    assert _cuda.gpu_uuid(types.SimpleNamespace(uuid="GPU-" + uuid.upper())) == "GPU-" + uuid
    with pytest.raises(ValueError):
        _cuda.gpu_uuid(types.SimpleNamespace(uuid="0", name="old torch"))
    with pytest.raises(ValueError):
        _cuda.gpu_uuid(types.SimpleNamespace(name="no uuid at all"))


def test_the_tensors_of_one_gpu_fetch_must_share_one_gpu():
    cuda0 = types.SimpleNamespace(type="cuda", index=0)
    cuda1 = types.SimpleNamespace(type="cuda", index=1)
    assert _cuda.device_of([types.SimpleNamespace(device=cuda0)] * 2) is cuda0
    with pytest.raises(ValueError):
        _cuda.device_of([types.SimpleNamespace(device=cuda0), types.SimpleNamespace(device=cuda1)])
    with pytest.raises(ValueError):
        _cuda.device_of([types.SimpleNamespace(device=types.SimpleNamespace(type="cpu", index=None))])


def info_tensors(peer):
    return peer._native.version_tensors("policy", 1)


def _cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda_available(), reason="this machine has a GPU: the refusals below would not happen")
def test_without_a_gpu_a_fetch_into_gpu_memory_is_refused_with_the_reason(pair):
    trainer, worker = pair
    weights = {"w": np.arange(4096, dtype=np.float32)}
    with trainer.publish("policy", weights):
        worker.wait_for_head("policy", timeout=20)
        info = worker._native.version_info("policy", 1)
        buffer = np.empty(info["nbytes"], dtype=np.uint8)
        regions = [(buffer.ctypes.data, buffer.nbytes)]
        with pytest.raises(th.Error, match="unavailable"):
            worker._native.fetch("policy", 1, regions, buffer, gpu="GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b")
        with pytest.raises(th.Error, match="not a GPU UUID"):
            worker._native.fetch("policy", 1, regions, buffer, gpu="cuda:0")
        specs = [(name, dtype, shape, offset, length) for name, dtype, shape, offset, length in info_tensors(worker)]
        with pytest.raises(th.Error, match="unavailable"):
            trainer._native.publish("other", regions, specs, buffer, gpu="GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b")


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (tests/gpu/run)")
def test_a_version_lands_in_cuda_tensors_and_equals_the_host_fetch(pair):
    import torch

    trainer, worker = pair
    torch.manual_seed(1)
    weights = {f"layer{i}.weight": torch.randn(256, 129).to(torch.bfloat16) for i in range(8)}
    weights["step"] = torch.tensor([3], dtype=torch.int64)
    with trainer.publish("policy", weights):
        worker.wait_for_head("policy", timeout=20)
        host = worker.fetch("policy").wait(60).state_dict(kind="torch")
        # Only some tensors given: the rest land in GPU memory allocated here.
        into = {name: torch.empty_like(t, device="cuda") for name, t in weights.items() if name != "step"}
        fetched = worker.fetch("policy", into=into).wait(60)
        got = fetched.state_dict(kind="torch")
        for name, value in host.items():
            assert got[name].is_cuda, name
            assert torch.equal(got[name].cpu(), value), name
        assert got["layer0.weight"].data_ptr() == into["layer0.weight"].data_ptr()
        with pytest.raises(th.Error, match="one kind of memory"):
            worker.fetch("policy", into={"layer0.weight": torch.empty_like(weights["layer0.weight"], device="cuda"),
                                         "step": np.zeros(1, dtype=np.int64)})


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (tests/gpu/run)")
def test_cuda_tensors_are_published_in_place_and_fetched_byte_exact(pair):
    import torch

    trainer, worker = pair
    torch.manual_seed(2)
    weights = {f"layer{i}.weight": torch.randn(128, 257, device="cuda").to(torch.bfloat16) for i in range(6)}
    with trainer.publish("policy", weights, metadata={"step": "7"}):
        status = trainer.status()
        assert status["versions"][0]["memory"].startswith("cuda:GPU-")
        worker.wait_for_head("policy", timeout=20)
        fetched = worker.fetch("policy").wait(60)
        got = fetched.state_dict(kind="torch")
        for name, value in weights.items():
            assert torch.equal(got[name], value.cpu()), name
        assert fetched.metadata == {"step": "7"}


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (tests/gpu/run)")
def test_iter_tensors_yields_tensors_on_the_asked_gpu(pair):
    import torch

    trainer, worker = pair
    weights = {f"w{i}": torch.arange(1000 * (i + 1), dtype=torch.float32) for i in range(4)}
    with trainer.publish("policy", weights):
        worker.wait_for_head("policy", timeout=20)
        seen = {}
        for batch in worker.fetch("policy").iter_tensors(kind="torch", device="cuda:0", timeout=60):
            for name, tensor in batch:
                assert tensor.is_cuda and tensor.device.index == 0, name
                seen[name] = tensor
        assert set(seen) == set(weights)
        for name, value in weights.items():
            assert torch.equal(seen[name].cpu(), value), name


def test_a_gpu_mapping_refuses_a_malformed_handle_or_uuid_and_says_why_it_cannot_open():
    from tensorhub import _native

    uuid = "GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b"
    with pytest.raises(th.Error, match="64 bytes, not 10"):
        _native.GpuMapping(b"x" * 10, 0, 16, uuid)
    with pytest.raises(th.Error, match="not a GPU UUID"):
        _native.GpuMapping(b"x" * 64, 0, 16, "cuda:0")
    with pytest.raises(th.Error, match="at least one byte"):
        _native.GpuMapping(b"x" * 64, 0, 0, uuid)
    with pytest.raises(th.Error, match="past 2\\^64"):
        _native.GpuMapping(b"x" * 64, 2**63, 2**63, uuid)
    if not _cuda_available():
        with pytest.raises(th.Error, match="unavailable|not_found"):
            _native.GpuMapping(b"x" * 64, 0, 16, uuid)


@pytest.mark.skipif(not BINARY, reason="TENSORHUB_BINARY names no tensorhub binary")
def test_a_daemon_hold_on_a_gpu_is_refused_with_the_reason_where_it_cannot_be_made():
    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        with a.publish("policy", {"w": np.arange(4096, dtype=np.float32)}):
            b.wait_for_head("policy", timeout=20)
            with pytest.raises(th.Error, match="invalid argument: .*neither a GPU UUID nor|not a GPU UUID"):
                b.hold("policy", gpu="the big one")
            if not _cuda_available():
                with pytest.raises(th.Error, match="unavailable|not_found"):
                    b.hold("policy", gpu="GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b")
            # "gpu" belongs to holds alone.
            with pytest.raises(th.Error, match="goes with \"hold\" only"):
                b._request({"cmd": "status", "gpu": "GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b"})
            # The daemon lives on and still holds in files.
            held = b.hold("policy")
            np.testing.assert_array_equal(held.state_dict()["w"], np.arange(4096, dtype=np.float32))
            held.release()


@pytest.mark.skipif(not BINARY or not _cuda_available(), reason="needs a CUDA GPU and TENSORHUB_BINARY (tests/gpu/run)")
def test_a_daemon_hands_versions_to_an_engine_on_its_gpu_two_at_a_time():
    import torch

    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        versions = [{"w": torch.randn(512, 300).to(torch.bfloat16), "step": torch.tensor([v])} for v in range(3)]
        published = []
        for v, weights in enumerate(versions):
            published.append(a.publish("policy", weights))
            b.wait_for_head("policy", after=v, timeout=20)  # each head heard: its manifest is known
        first = b.hold("policy", 1, gpu="cuda:0")
        again = th.connect(b.control, directory=daemons.folder).hold("policy", 1, gpu=0)  # another rank: same memory
        got = first.state_dict()
        assert got["w"].is_cuda and got["w"].dtype == torch.bfloat16
        assert torch.equal(got["w"].cpu(), versions[0]["w"]) and torch.equal(got["step"].cpu(), versions[0]["step"])
        assert again.state_dict()["w"].data_ptr() != 0
        second = b.hold("policy", 2, gpu="cuda:0")
        assert torch.equal(second.state_dict()["w"].cpu(), versions[1]["w"])
        with pytest.raises(th.Error, match="holds 2 versions already"):
            b.hold("policy", 3, gpu="cuda:0")
        first.release()
        again.release()  # the last hold on v1: its memory is free
        third = b.hold("policy", 3, gpu="cuda:0")
        assert torch.equal(third.state_dict()["w"].cpu(), versions[2]["w"])
        for h in (second, third):
            h.release()
        for p in published:
            p.release()


@pytest.mark.skipif(not BINARY or not _cuda_available(), reason="needs a CUDA GPU and TENSORHUB_BINARY (tests/gpu/run)")
def test_a_daemon_copies_a_version_from_a_host_mates_gpu_by_cuda_ipc():
    import os

    import torch

    with swarm_of_daemons(["a", "node1"]) as daemons:
        b = daemons.clients["node1"]
        trainer = th.Peer.start(key_file=os.path.join(daemons.folder, "trainer.key"), swarm_key_file=daemons.swarm,
                                seeds=[f"127.0.0.1:{daemons.ports['a']}"], host="node1", retain_head_replicas=0)
        try:
            weights = {f"layer{i}": torch.randn(1024, 777, device="cuda").to(torch.bfloat16) for i in range(4)}
            with trainer.publish("policy", weights):
                b.wait_for_head("policy", timeout=20)
                # The trainer's holding reaches the daemon by gossip.
                deadline = time.monotonic() + 20
                while not any(h.get("complete") for m in b.status().get("members", []) for h in m.get("holds", [])):
                    assert time.monotonic() < deadline, "the daemon never heard that the trainer holds the version"
                    time.sleep(0.05)
                held = b.hold("policy", gpu="cuda:0")
                got = held.state_dict()
                for name, value in weights.items():
                    assert torch.equal(got[name], value), name
                mates = b.status()["host_mates"]
                assert mates["shards_copied"] > 0 and mates["bytes_copied"] == held.nbytes, mates
                assert trainer.status()["host_mates"]["versions_shared"] == 1
                held.release()
        finally:
            trainer.close()
