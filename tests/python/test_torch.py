"""torch tensors in and out of the in-process peer: CPU tensors published
where they lie (bf16 included), a model's own parameters fetched in place,
and state_dict as torch tensors over the fetched bytes."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorhub as th  # noqa: E402


def test_torch_tensors_round_trip_and_land_in_a_models_own_parameters(pair):
    torch.manual_seed(0)
    trained = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    extra = {"bf16": torch.randn(300, 7).to(torch.bfloat16), "step": torch.tensor([12], dtype=torch.int64),
             "transposed": torch.randn(16, 9).t()}  # not contiguous: packed once
    trainer, worker = pair
    weights = dict(trained.state_dict())
    weights.update(extra)
    with trainer.publish("policy", weights):
        worker.wait_for_head("policy", timeout=20)
        # As torch tensors over the fetched bytes.
        got = worker.fetch("policy").wait(30).state_dict(kind="torch")
        assert got["bf16"].dtype == torch.bfloat16
        assert torch.equal(got["bf16"], extra["bf16"])
        assert torch.equal(got["step"], extra["step"])
        assert torch.equal(got["transposed"], extra["transposed"])
        # In place, into a fresh model's own parameters.
        rollout = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
        own = rollout.state_dict()
        fetched = worker.fetch("policy", into=own).wait(30)
        for name, value in trained.state_dict().items():
            assert torch.equal(rollout.state_dict()[name], value), name
        x = torch.randn(4, 64)
        assert torch.equal(rollout(x), trained(x))
        assert fetched.state_dict(kind="torch")["0.weight"].data_ptr() == own["0.weight"].data_ptr()
        # A tensor of another dtype or shape is refused before the fetch starts.
        with pytest.raises(th.Error):
            worker.fetch("policy", into={"bf16": torch.zeros(300, 7)})
        with pytest.raises(th.Error):
            worker.fetch("policy", into={"0.weight": torch.zeros(64, 32)})


def test_fp32_weights_published_as_bf16(pair):
    trainer, worker = pair
    weights = {"w": torch.randn(128, 64), "ids": torch.arange(10)}
    with trainer.publish("policy", weights, dtype=torch.bfloat16):
        worker.wait_for_head("policy", timeout=20)
        got = worker.fetch("policy").wait(30).state_dict(kind="torch")
        assert got["w"].dtype == torch.bfloat16 and got["ids"].dtype == torch.int64
        assert torch.equal(got["w"], weights["w"].to(torch.bfloat16))
        with pytest.raises(th.Error):
            trainer.publish("policy", weights, dtype="float16")  # not a torch dtype


def test_f8_weights_come_back_as_float8_where_torch_has_it_and_as_their_bytes_otherwise(pair, tmp_path):
    from tensorhub import safetensors

    trainer, worker = pair
    bits = np.arange(256, dtype=np.uint8).reshape(16, 16)
    path = str(tmp_path / "fp8.safetensors")
    safetensors.write(path, [("w", bits), ("scale", np.ones(16, np.float32))], dtypes={"w": "F8_E4M3"})
    with trainer.publish_safetensors("policy", path):
        worker.wait_for_head("policy", timeout=20)
        got = worker.fetch("policy").wait(30).state_dict(kind="torch")
        float8 = getattr(torch, "float8_e4m3fn", None)
        assert got["w"].dtype == (float8 if float8 is not None else torch.uint8)
        assert torch.equal(got["w"].view(torch.uint8), torch.from_numpy(bits))
        if float8 is not None:
            # And a float8 tensor is published as F8_E4M3, byte for byte.
            with trainer.publish("policy", {"w": got["w"].clone()}) as again:
                worker.wait_for_head("policy", after=1, timeout=20)
                back = worker.fetch("policy", again.version).wait(30)
                assert [t[1] for t in back.tensors] == ["F8_E4M3"]
                assert torch.equal(back.state_dict(kind="torch")["w"].view(torch.uint8), torch.from_numpy(bits))


def test_iter_tensors_puts_tensors_on_the_device_asked_for(pair):
    trainer, worker = pair
    weights = {"a": torch.arange(4096, dtype=torch.float32), "b": torch.ones(33, 7, dtype=torch.bfloat16)}
    with trainer.publish("policy", weights):
        worker.wait_for_head("policy", timeout=20)
        got = {name: t for batch in worker.fetch("policy").iter_tensors(kind="torch", device="cpu", timeout=30)
               for name, t in batch}
        assert set(got) == set(weights)
        for name, value in weights.items():
            assert got[name].device.type == "cpu"
            assert torch.equal(got[name], value)
        # device= is for torch tensors, and for devices this torch has.
        with pytest.raises(th.Error, match="kind='torch'"):
            next(iter(worker.fetch("policy").iter_tensors(device="cpu")))
        if not torch.cuda.is_available():
            with pytest.raises(th.Error, match="no CUDA GPU"):
                next(iter(worker.fetch("policy").iter_tensors(kind="torch", device="cuda:0")))
