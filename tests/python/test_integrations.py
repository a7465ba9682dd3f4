"""The adapters against doubles of the interfaces they plug into
(doubles.py says what each is written from), with real peers: an
in-process trainer and `tensorhub peer` daemons on loopback. Also the
failure rules every adapter relies on: a rank loads the version it was
handed or raises, bytes that do not verify never reach load_weights, a
publisher killed mid-fetch costs nothing when another peer holds the
version, and a worker that joins late loads the head."""
import asyncio
import importlib
import os
import signal
import sys
import threading
import types

import numpy as np
import pytest

import tensorhub as th
from conftest import BINARY, swarm_of_daemons
from doubles import (FakeSGLang, FusedModel, NemoRLCheckpointEngine, VerlCheckpointEngine, install_verl_double,
                     install_vllm_double, nemo_rl_create_checkpoint_engine, remove_verl_double, remove_vllm_double)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not BINARY, reason="TENSORHUB_BINARY names no tensorhub binary")

HIDDEN = 8


def start_trainer(daemons, **kwargs):
    """An in-process trainer (trusted: trainer.key) seeded by the first daemon."""
    first = next(iter(daemons.ports.values()))
    return th.Peer.start(key_file=os.path.join(daemons.folder, "trainer.key"), swarm_key_file=daemons.swarm,
                         seeds=[f"127.0.0.1:{first}"], host="trainer", retain_head_replicas=0, **kwargs)


def start_worker(daemons, name, publisher="trainer"):
    first = next(iter(daemons.ports.values()))
    return th.Peer.start(swarm_key_file=daemons.swarm, seeds=[f"127.0.0.1:{first}"], host=name,
                         trusted_publishers=[daemons.ids[publisher]], retain_head_replicas=0)


def assert_loaded(model, checkpoint):
    for name, want in model.expected(checkpoint).items():
        np.testing.assert_array_equal(model.params[name].numpy(), want, err_msg=name)


@pytest.fixture
def vllm_double():
    factory, calls = install_vllm_double()
    adapter = importlib.reload(importlib.import_module("tensorhub.integrations.vllm"))
    yield adapter, factory, calls
    remove_vllm_double()
    importlib.reload(adapter)


def test_vllm_engine_loads_the_handed_down_version_on_every_tensor_parallel_rank(vllm_double):
    adapter, factory, calls = vllm_double
    adapter.register()
    adapter.register()  # vLLM runs plugins in each of its processes
    assert "tensorhub" in factory._registry
    with swarm_of_daemons(["node"]) as daemons:
        control = daemons.clients["node"].control
        trainer = start_trainer(daemons)
        try:
            checkpoint = FusedModel.checkpoint(HIDDEN, 1)
            published = adapter.TensorHubWeightTransferEngine.trainer_send_weights(
                iter(checkpoint.items()), {"hub": trainer, "model": "policy", "metadata": {"step": "1"}})
            config = types.SimpleNamespace(backend="tensorhub")
            vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(), model_config=object())
            ranks = [FusedModel(HIDDEN, 2, r) for r in range(2)]
            engines = [factory.create_engine(config, vllm_config, "cpu", m) for m in ranks]
            base = sys.modules["vllm.distributed.weight_transfer.base"].WeightTransferEngine
            for engine in engines:
                assert isinstance(engine, base)
                engine.init_transfer_engine(engine.parse_init_info(
                    {"model": "policy", "control": control, "batch_bytes": 300}))
                engine.start_weight_update()
                engine.update_weights({"version": published.version})
                engine.finish_weight_update()
            assert calls == ["initialize_layerwise_reload", "finalize_layerwise_reload"] * 2
            for model in ranks:
                assert_loaded(model, checkpoint)
                assert len(model.batches) == len(checkpoint)  # batch_bytes 300: one tensor a batch
            # Both ranks hold the node's one file until the next version.
            assert engines[0]._loader.current.path == engines[1]._loader.current.path
            # The next version replaces the held one.
            second = FusedModel.checkpoint(HIDDEN, 2)
            published = adapter.TensorHubWeightTransferEngine.trainer_send_weights(
                iter(second.items()), {"hub": trainer, "model": "policy"})
            old_path = engines[0]._loader.current.path
            for engine in engines:
                engine.start_weight_update()
                engine.update_weights({"version": published.version})
                engine.finish_weight_update()
            for model in ranks:
                assert_loaded(model, second)
            assert not os.path.exists(old_path)
            # Bad update requests fail the rank, and leave vLLM's layerwise
            # reload (as its disk engine does); nothing resolves "latest".
            del calls[:]
            with pytest.raises(ValueError):
                engines[0].start_weight_update()
                engines[0].update_weights({"step": 1})
            assert calls == ["initialize_layerwise_reload", "finalize_layerwise_reload"]
            assert not engines[0]._reloading
            with pytest.raises(th.Error) as e:
                engines[0].start_weight_update()
                engines[0].update_weights({"version": 0})
            assert e.value.code == "invalid_argument"
            engines[0].init_transfer_engine({"model": "policy", "control": control, "timeout": 0.5})
            del calls[:]
            engines[0].start_weight_update()
            with pytest.raises(RuntimeError, match="already in progress"):
                engines[0].start_weight_update()
            with pytest.raises(th.Error) as e:
                engines[0].update_weights({"version": 99})  # never published
            assert e.value.code == "timeout"
            assert calls == ["initialize_layerwise_reload", "finalize_layerwise_reload"] and not engines[0]._reloading
            # vLLM's older constructor (config, parallel_config) and its
            # load_weights callback.
            old = adapter.TensorHubWeightTransferEngine(config, types.SimpleNamespace())
            old.init_transfer_engine(old.parse_init_info({"model": "policy", "control": control}))
            got = []
            old.receive_weights(old.parse_update_info({"version": published.version}), load_weights=got.extend)
            assert [name for name, _ in got] == list(second)
            for name, tensor in got:
                np.testing.assert_array_equal(tensor.numpy(), second[name])
            # The worker extension, as collective_rpc calls it on a worker.
            worker_cls = type("Worker", (adapter.TensorHubWorkerExtension,), {})
            worker = worker_cls()
            worker.model_runner = types.SimpleNamespace(model=FusedModel(HIDDEN, 2, 1), model_config=object())
            worker.device = "cpu"
            assert worker.tensorhub_update("policy", published.version, control) == published.version
            assert_loaded(worker.model_runner.model, second)
            for engine in engines + [old]:
                engine.shutdown()
            published.release()
        finally:
            trainer.close()


def test_vllm_trainer_engine_moves_each_round_to_every_worker_through_the_sync_client(vllm_double):
    adapter, factory, calls = vllm_double
    adapter.register()
    trainers = factory.trainer_factory
    assert "tensorhub" in trainers._registry
    with swarm_of_daemons(["node"]) as daemons:
        control = daemons.clients["node"].control
        config = types.SimpleNamespace(backend="tensorhub")
        vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(), model_config=object())
        ranks = [FusedModel(HIDDEN, 2, r) for r in range(2)]
        workers = [factory.create_engine(config, vllm_config, "cpu", m) for m in ranks]

        class Client:
            """A VLLMWeightSyncClient: each call goes to every worker, as
            vLLM's engine client fans it out."""

            def __init__(self):
                self.calls = []

            def init_weight_transfer_engine(self, info):
                self.calls.append("init")
                for w in workers:
                    w.init_transfer_engine(w.parse_init_info(info))

            def start_weight_update(self):
                self.calls.append("start")
                for w in workers:
                    w.start_weight_update()

            def update_weights(self, info):
                self.calls.append(f"update v{info['version']}")
                for w in workers:
                    w.update_weights(info)

            def finish_weight_update(self, weight_version=None):
                self.calls.append(f"finish {weight_version}")
                for w in workers:
                    w.finish_weight_update()

        base = sys.modules["vllm.distributed.weight_transfer.base"]

        class Source(base.WeightSource):
            """A WeightSource: a fresh pass of the trainer's weights each round."""

            def __init__(self):
                self.round, self.passes = 0, 0

            def metadata(self):
                return list(FusedModel.checkpoint(HIDDEN, 70 + self.round))

            def __iter__(self):
                self.passes += 1
                return iter(FusedModel.checkpoint(HIDDEN, 70 + self.round).items())

        client, source = Client(), Source()
        assert isinstance(client, base.VLLMWeightSyncClient)
        info = adapter.TensorHubTrainerInitInfo
        assert info.backend == "tensorhub" and issubclass(info, base.TrainerInitInfo)
        sender = trainers.trainer_init(info("policy", control=control, worker_control=control, rank=0),
                                       client=client, source=source)
        other = trainers.trainer_init(info("policy", control=control, worker_control=control, rank=1),
                                      client=client, source=source)
        assert sender.is_sender and not other.is_sender and client.calls == ["init"]
        assert isinstance(sender, base.TrainerWeightTransferEngine)
        with pytest.raises(TypeError):
            info(model="policy")  # rank is required, keyword-only, as vLLM has it
        with pytest.raises(ValueError, match="source="):
            trainers.trainer_init(info("policy", rank=1), client=client)
        for round_ in (0, 1):
            source.round = round_
            other.send_weights()  # iterates the source (the gathers), publishes nothing
            sender.send_weights()
            for model in ranks:
                assert_loaded(model, FusedModel.checkpoint(HIDDEN, 70 + round_))
        assert client.calls == ["init", "start", "update v1", "finish 1", "start", "update v2", "finish 2"]
        assert source.passes == 4
        for engine in workers + [sender, other]:
            engine.shutdown()


def test_sglang_updater_pauses_reloads_from_the_held_file_and_continues():
    server = FakeSGLang(needs_config=True)
    with swarm_of_daemons(["node"]) as daemons:
        base = os.path.join(daemons.folder, "base-model")
        os.makedirs(base)
        with open(os.path.join(base, "config.json"), "w") as f:
            f.write("{}")
        with open(os.path.join(base, "model.safetensors"), "wb") as f:
            f.write(b"the original weights, which the held version replaces")
        trainer = start_trainer(daemons)
        updater = sglang_updater(server, daemons, base)
        try:
            first = FusedModel.checkpoint(HIDDEN, 3)
            with trainer.publish("policy", first) as v1:
                updater.update(v1.version)
                assert [c[0] for c in server.calls] == ["/pause_generation", "/update_weights_from_disk",
                                                        "/continue_generation"]
                assert server.calls[0][1] == {"mode": "abort"}
                update = server.calls[1][1]
                assert update["weight_version"] == str(v1.version) and update["flush_cache"] is True
                for name, array in first.items():
                    np.testing.assert_array_equal(server.loaded[name], array)
                held_v1 = updater.held.path
                second = FusedModel.checkpoint(HIDDEN, 4)
                with trainer.publish("policy", second) as v2:
                    updater.update(v2.version)
                    for name, array in second.items():
                        np.testing.assert_array_equal(server.loaded[name], array)
                    assert not os.path.exists(held_v1)  # the previous version was let go
                    # A failed reload raises and leaves generation paused.
                    server.fail = True
                    server.calls.clear()
                    with trainer.publish("policy", first) as v3:
                        with pytest.raises(th.Error) as e:
                            updater.update(v3.version)
                        assert "generation stays paused" in str(e.value)
                        assert [c[0] for c in server.calls] == ["/pause_generation", "/update_weights_from_disk"]
                    with pytest.raises(th.Error):
                        updater.update(0)
        finally:
            updater.close()
            server.close()
            trainer.close()


def sglang_updater(server, daemons, base):
    from tensorhub.integrations import sglang

    return sglang.Updater(server.url, "policy", control=daemons.clients["node"].control, base_dir=base, timeout=20)


def run_group_transfer(trainer_engines, rollout_engines, weights, prepare, init):
    """One transfer as the frameworks drive it: every worker's prepare(),
    the answers to every worker, then the trainer's send beside each
    rollout's receive, each in a process of its own (threads here)."""
    metadata = [e.prepare() for e in trainer_engines + rollout_engines]
    init(metadata)
    received = [[] for _ in rollout_engines]
    errors = []

    def send(engine):
        try:
            asyncio.run(engine.send_weights(iter(list(weights.items()))))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def receive(engine, out):
        async def drain():
            async for item in prepare(engine):
                out.append(item)
        try:
            asyncio.run(drain())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=receive, args=(e, out)) for e, out in zip(rollout_engines, received)]
    threads += [threading.Thread(target=send, args=(e,)) for e in trainer_engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return received


@pytest.fixture
def verl_registry():
    registry = install_verl_double()
    adapter = importlib.reload(importlib.import_module("tensorhub.integrations.verl"))
    yield registry, adapter
    remove_verl_double()
    importlib.reload(adapter)


def test_verl_checkpoint_engine_moves_each_step_to_every_rollout(verl_registry):
    registry, adapter = verl_registry
    TensorHubCheckpointEngine = adapter.TensorHubCheckpointEngine
    assert registry._registry["tensorhub"] is TensorHubCheckpointEngine  # registered at import

    with swarm_of_daemons(["node"]) as daemons:
        trainer = start_trainer(daemons)
        control = daemons.clients["node"].control
        try:
            # As verl builds them: CheckpointEngineRegistry.new(backend, bucket_size=..., **engine_kwargs).
            trainers = [registry.new("tensorhub", bucket_size=1 << 10, is_master=rank == 0, model="policy",
                                     hub=trainer) for rank in range(2)]
            rollouts = [registry.new("tensorhub", bucket_size=1 << 10, model="policy", control=control, timeout=20)
                        for _ in range(3)]
            for engine in trainers + rollouts:
                assert isinstance(engine, VerlCheckpointEngine)

            def init(metadata):
                trainer_kwargs, rollout_kwargs = TensorHubCheckpointEngine.build_topology(2, 3, metadata)
                for i, engine in enumerate(trainers):
                    engine.init_process_group(**{k: v[i] for k, v in trainer_kwargs.items()})
                for i, engine in enumerate(rollouts):
                    engine.init_process_group(**{k: v[i] for k, v in rollout_kwargs.items()})

            for step in (1, 2):
                weights = FusedModel.checkpoint(HIDDEN, 10 + step)
                received = run_group_transfer(trainers, rollouts, weights, lambda e: e.receive_weights(), init)
                for got in received:
                    assert [name for name, _ in got] == list(weights)
                    for name, tensor in got:
                        np.testing.assert_array_equal(tensor.numpy(), weights[name])
                assert trainers[0].publisher.current.version == step
                for engine in trainers + rollouts:
                    engine.finalize()

            async def cached():
                return [item async for item in rollouts[0].get_weights()]

            assert [name for name, _ in asyncio.run(cached())] == list(weights)
            with pytest.raises(th.Error):
                TensorHubCheckpointEngine.build_topology(2, 3, [{}, {}, {}])  # no master
            for engine in trainers + rollouts:
                engine.close()
        finally:
            trainer.close()


def test_nemo_rl_checkpoint_engine_moves_a_refit_to_every_rollout():
    from tensorhub.integrations.nemo_rl import TensorHubCheckpointEngine

    with swarm_of_daemons(["node"]) as daemons:
        trainer = start_trainer(daemons)
        control = daemons.clients["node"].control
        try:
            trainers = [TensorHubCheckpointEngine(bucket_size=1 << 10, rank=rank, model="policy", hub=trainer)
                        for rank in range(2)]
            rollouts = [nemo_rl_create_checkpoint_engine(  # as NeMo-RL builds it from refit_transport
                "tensorhub.integrations.nemo_rl:TensorHubCheckpointEngine", bucket_size_bytes=1 << 10,
                engine_kwargs={"model": "policy", "control": control, "timeout": 20}) for _ in range(2)]
            for engine in trainers + rollouts:
                assert isinstance(engine, NemoRLCheckpointEngine)

            def init(metadata):
                for i, engine in enumerate(trainers):
                    engine.init_policy_process_group(worker_rank=i, train_world_size=2, rollout_world_size=2,
                                                     metadata=metadata)
                for i, engine in enumerate(rollouts):
                    engine.init_rollout_process_group(rollout_rank=i, train_world_size=2, rollout_world_size=2,
                                                      metadata=metadata)

            weights = FusedModel.checkpoint(HIDDEN, 20)
            received = run_group_transfer(trainers, rollouts, weights, lambda e: e.receive_weight_batches(), init)
            for batches in received:
                assert all(sum(t.numel() * t.element_size() for _, t in b) <= 1 << 10 or len(b) == 1 for b in batches)
                got = [pair for batch in batches for pair in batch]
                assert [name for name, _ in got] == list(weights)
                for name, tensor in got:
                    np.testing.assert_array_equal(tensor.numpy(), weights[name])
            for engine in trainers + rollouts:
                engine.close()
        finally:
            trainer.close()


def test_slime_post_write_publishes_the_checkpoint_directory(tmp_path):
    from tensorhub import safetensors
    from tensorhub.integrations import slime

    with swarm_of_daemons(["node"]) as daemons:
        trainer = start_trainer(daemons)
        worker = start_worker(daemons, "worker")
        try:
            versions = []
            for step in (1, 2):
                weights = FusedModel.checkpoint(HIDDEN, 30 + step)
                names = list(weights)
                out = tmp_path / f"weight_v{step:06d}"
                out.mkdir()
                safetensors.write(str(out / "model-00001-of-00002.safetensors"), [(n, weights[n]) for n in names[:2]])
                safetensors.write(str(out / "model-00002-of-00002.safetensors"), [(n, weights[n]) for n in names[2:]])
                version = slime.post_write(types.SimpleNamespace(), str(out), [], hub=trainer, model="policy")
                versions.append(version)
                worker.wait_for_head("policy", after=version - 1, timeout=20)
                fetched = worker.fetch("policy", version).wait(30)
                assert fetched.metadata["slime_dir"] == str(out)
                for name, array in weights.items():
                    np.testing.assert_array_equal(fetched.state_dict()[name], array)
                fetched.release()
            assert versions == [1, 2]
            slime._published.pop("policy").release()
        finally:
            worker.close()
            trainer.close()


def test_a_corrupt_holders_bytes_never_reach_load_weights():
    from tensorhub.integrations._common import VersionLoader

    with swarm_of_daemons(["pub", "bad"], extra={"bad": ["--test-corrupt-serving"]}) as daemons:
        weights = FusedModel.checkpoint(HIDDEN, 40)
        published = daemons.clients["pub"].publish("policy", weights)
        daemons.clients["bad"].wait_for_head("policy", timeout=20)
        held = daemons.clients["bad"].hold("policy", published.version)  # verified, then served corrupted
        published.release()  # the corrupt holder is the only one left
        worker = start_worker(daemons, "worker", publisher="pub")
        try:
            loads = []
            loader = VersionLoader(worker, "policy", batch_bytes=1 << 10, timeout=3)
            with pytest.raises(th.Error) as e:
                loader.load(published.version, loads.append)
            assert e.value.code == "timeout", e.value
            assert loads == []
            # Corrupt bytes did arrive, and were refused.
            served = [v["bytes_served"] for v in daemons.clients["bad"].status()["versions"] if v["model"] == "policy"]
            assert served and served[0] > 0
        finally:
            worker.close()
            held.release()


def test_a_publisher_killed_mid_fetch_costs_nothing_when_another_peer_holds_the_version():
    with swarm_of_daemons(["pub", "relay"]) as daemons:
        rng = np.random.default_rng(5)
        weights = {f"layer{i}": rng.standard_normal(1 << 20, dtype=np.float32) for i in range(8)}  # 32 MiB
        published = daemons.clients["pub"].publish("policy", weights)
        daemons.clients["relay"].wait_for_head("policy", timeout=20)
        held = daemons.clients["relay"].hold("policy", published.version)
        worker = start_worker(daemons, "worker", publisher="pub")
        try:
            worker.wait_for_head("policy", timeout=20)
            fetched = worker.fetch("policy", published.version)
            daemons.procs["pub"].send_signal(signal.SIGKILL)
            fetched.wait(60)
            for name, array in weights.items():
                np.testing.assert_array_equal(fetched.state_dict()[name], array)
        finally:
            worker.close()
            held.release()


def test_a_worker_that_joins_late_loads_the_head():
    from tensorhub.integrations._common import Publisher, VersionLoader

    with swarm_of_daemons(["node"]) as daemons:
        trainer = start_trainer(daemons)
        try:
            publisher = Publisher(trainer, "policy")
            for step in (1, 2, 3):
                publisher.publish(FusedModel.checkpoint(HIDDEN, 50 + step).items(), expected=step)
            late = start_worker(daemons, "late")
            try:
                # It hears of the versions published before it started (in any
                # order: gossip may bring v2's news before v3's) and loads the head.
                head = late.wait_for_head("policy", after=2, timeout=20)
                assert head.version == 3
                model = FusedModel(HIDDEN, 1, 0)
                VersionLoader(late, "policy").load(head.version, model.load_weights)
                assert_loaded(model, FusedModel.checkpoint(HIDDEN, 53))
                with pytest.raises(th.Error):
                    publisher.publish(FusedModel.checkpoint(HIDDEN, 1).items(), expected=9)  # not the number handed down
            finally:
                late.close()
            publisher.close()
        finally:
            trainer.close()
