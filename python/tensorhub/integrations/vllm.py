"""vLLM: a ``WeightTransferEngine`` named "tensorhub", and a worker extension
for vLLM releases without that API. Both load through the node's
``tensorhub peer`` daemon (``control``): no compiled code enters vLLM's
processes, and the tensor-parallel ranks of a node map one held file.

The engine (vLLM's native weight-transfer API)::

    # installed with the package: the entry point
    # [vllm.general_plugins] tensorhub = tensorhub.integrations.vllm:register
    vllm serve MODEL --weight-transfer-config '{"backend": "tensorhub"}'
    # (the server's HTTP weight-sync routes need VLLM_SERVER_DEV_MODE=1)
    # the trainer, on every rank, with vLLM's trainer-side API:
    tensorhub.integrations.vllm.register()  # a trainer process loads no vLLM plugins
    engine = WeightTransferTrainerFactory.trainer_init(
        TensorHubTrainerInitInfo(model="policy", control="/run/tensorhub.sock", rank=rank),
        client=client, source=source)
    engine.send_weights()   # each step: publish, then every worker loads that version
    # or by hand, after publishing version v:
    client.init_weight_transfer_engine({"model": "policy", "control": "/run/tensorhub.sock"})  # once
    client.start_weight_update(); client.update_weights({"version": v})
    client.finish_weight_update(weight_version=str(v))

The worker extension (older vLLM)::

    LLM(MODEL, worker_extension_cls="tensorhub.integrations.vllm.TensorHubWorkerExtension")
    llm.collective_rpc("tensorhub_update", args=("policy", v, "/run/tensorhub.sock"))

Checked against vLLM a8f1d798 (weight_transfer/base.py) and 055e47c2
(factory.py): tested against a double written from that source, whose
signatures a test compares with a list recorded from it
(tests/python/upstream/vllm.json); no vLLM runs in the tests."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ._common import Publisher, VersionLoader, explicit_version, reach

__all__ = ["register", "TensorHubInitInfo", "TensorHubUpdateInfo", "TensorHubWeightTransferEngine",
           "TensorHubTrainerInitInfo", "TensorHubTrainerEngine", "TensorHubWorkerExtension"]

_ENGINE_NAME = "tensorhub"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: registers the engine under
    "tensorhub" (lazily: this module is imported only when a server uses
    it). vLLM runs plugins in each of its processes, so a second call is a
    no-op."""
    from vllm.distributed.weight_transfer import factory

    registries = [(factory.WeightTransferEngineFactory, "TensorHubWeightTransferEngine")]
    if hasattr(factory, "WeightTransferTrainerFactory"):  # vLLM with trainer-side engines
        registries.append((factory.WeightTransferTrainerFactory, "TensorHubTrainerEngine"))
    for registry, class_name in registries:
        if _ENGINE_NAME in getattr(registry, "_registry", {}):
            continue
        try:
            registry.register_engine(_ENGINE_NAME, __name__, class_name)
        except ValueError:
            pass  # registered meanwhile


@dataclass
class _PlainTrainerInitInfo:
    """vLLM's TrainerInitInfo where vLLM is not importable: ``rank`` is
    keyword-only, so subclasses' fields come first."""
    rank: int = field(kw_only=True)


def _vllm_base():
    """vLLM's classes when vLLM is importable; plain ones otherwise, so this
    module imports (and is tested) without vLLM."""
    try:
        from vllm.distributed.weight_transfer import base
    except ImportError:
        return object, object, object, object, _PlainTrainerInitInfo
    return (base.WeightTransferEngine, base.WeightTransferInitInfo, base.WeightTransferUpdateInfo,
            getattr(base, "TrainerWeightTransferEngine", object),
            getattr(base, "TrainerInitInfo", _PlainTrainerInitInfo))


_EngineBase, _InitBase, _UpdateBase, _TrainerBase, _TrainerInitBase = _vllm_base()


@dataclass
class TensorHubInitInfo(_InitBase):
    model: str  # the model name the trainer publishes under
    control: str = "/run/tensorhub.sock"  # this node's daemon
    batch_bytes: int = 512 << 20  # tensors handed to load_weights at a time
    timeout: float = 600.0  # seconds a rank waits for its version before the update fails


@dataclass
class TensorHubUpdateInfo(_UpdateBase):
    version: int  # the explicit version every rank loads


class TensorHubWeightTransferEngine(_EngineBase):
    """Loads version ``update_info["version"]`` of the model into vLLM's
    model through ``load_weights``, in batches, inside vLLM's layerwise
    reload (as its checkpoint-format engines do). Every rank loads that
    version or raises. The version loaded last stays held on the node (and
    served to the swarm) until the next one is loaded."""

    init_info_cls = TensorHubInitInfo
    update_info_cls = TensorHubUpdateInfo

    def __init__(self, config, *args, **kwargs):
        # vLLM has called this (config, parallel_config) and, since, (config,
        # vllm_config, device, model): both are taken.
        names = ["vllm_config", "device", "model"] if len(args) != 1 else ["parallel_config"]
        given = dict(zip(names, args), **kwargs)
        if _EngineBase is not object and "vllm_config" in given:
            super().__init__(config, given["vllm_config"], given.get("device"), given.get("model"))
        else:
            self.config = config
            self.model = given.get("model")
            self.device = given.get("device")
            vllm_config = given.get("vllm_config")
            self.model_config = getattr(vllm_config, "model_config", None)
        self._loader: Optional[VersionLoader] = None
        self._reloading = False

    def parse_init_info(self, init_dict: dict) -> TensorHubInitInfo:
        try:
            return TensorHubInitInfo(**init_dict)
        except TypeError as e:
            raise ValueError(f"Invalid init_info for {type(self).__name__}: {e}") from e

    def parse_update_info(self, update_dict: dict) -> TensorHubUpdateInfo:
        try:
            return TensorHubUpdateInfo(**update_dict)
        except TypeError as e:
            raise ValueError(f"Invalid update_info for {type(self).__name__}: {e}") from e

    def init_transfer_engine(self, init_info: TensorHubInitInfo) -> None:
        if isinstance(init_info, dict):
            init_info = self.parse_init_info(init_info)
        if self._loader is not None:
            self._loader.close()
        self._loader = VersionLoader(reach(control=init_info.control), init_info.model, init_info.batch_bytes,
                                     init_info.timeout)

    def start_weight_update(self, *args, **kwargs) -> None:
        """Opens vLLM's layerwise reload. Raises RuntimeError while an update
        is open (as vLLM's disk engine does)."""
        if self._reloading:
            raise RuntimeError("a weight update is already in progress: finish it first")
        reload = _layerwise_reload()
        if reload is not None and self.model is not None:
            self._reloading = True
            try:
                reload[0](self.model)
            except Exception:
                self._abort_update()
                raise

    def update_weights(self, update_info: dict) -> None:
        """Loads the version; on any failure (a bad request, a version that
        never comes, a corrupt holder) closes the layerwise reload before
        raising, so the model is never left inside it. vLLM's updates are not
        transactional: tensors loaded before the failure stay loaded."""
        try:
            self.receive_weights(self.parse_update_info(update_info))
        except BaseException:
            self._abort_update()
            raise
        torch = sys.modules.get("torch")
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and accelerator.is_available():
            accelerator.synchronize()

    def receive_weights(self, update_info: TensorHubUpdateInfo, load_weights=None) -> None:
        """Loads the version into the model (``load_weights``: the callback
        vLLM passed before its engines owned the model)."""
        if self._loader is None:
            raise RuntimeError("init_transfer_engine must be called before receive_weights")
        load = load_weights or self.model.load_weights
        self._loader.load(explicit_version(update_info.version), load)

    def finish_weight_update(self, *args, **kwargs) -> None:
        if self._reloading:
            self._reloading = False
            _layerwise_reload()[1](self.model, self.model_config)

    def _abort_update(self) -> None:
        """Leaves the layerwise reload, if open, whatever state the load left
        (as vLLM's disk engine aborts its session): a failure here is logged,
        not raised over the update's own error."""
        if not self._reloading:
            return
        self._reloading = False
        try:
            _layerwise_reload()[1](self.model, self.model_config)
        except Exception as e:  # noqa: BLE001 - the update's error is the one raised
            print(f"tensorhub: leaving vLLM's layerwise reload after a failed update: {e}", file=sys.stderr)

    def shutdown(self) -> None:
        self._abort_update()
        if self._loader is not None:
            self._loader.close()

    @staticmethod
    def trainer_send_weights(iterator, trainer_args) -> Any:
        """The trainer's side: publishes ``iterator``'s (name, tensor) pairs
        as the next version of ``trainer_args["model"]`` through
        ``trainer_args["hub"]`` (a Peer or a daemon client), with
        ``dtype``/``metadata`` if given, and returns the handle, which
        serves the version until it is released. Hand its ``version`` to
        the workers' ``update_weights``."""
        return trainer_args["hub"].publish(trainer_args["model"], list(iterator), dtype=trainer_args.get("dtype"),
                                           metadata=trainer_args.get("metadata"))


@dataclass
class TensorHubTrainerInitInfo(_TrainerInitBase):
    """The trainer side's init info. vLLM's factory picks the engine by the
    ``backend`` class variable; ``rank`` (keyword-only, vLLM's) is this
    trainer process's rank: rank 0 drives the inference side."""
    backend: ClassVar[str] = _ENGINE_NAME
    model: str  # the model name versions are published under
    control: str = ""  # the trainer node's daemon, or:
    peer_options: Optional[dict] = None  # an in-process peer's Peer.start keywords
    worker_control: str = "/run/tensorhub.sock"  # the daemon socket on the inference nodes
    dtype: Any = None  # the rollout dtype floating-point weights are cast to, if any


class TensorHubTrainerEngine(_TrainerBase):
    """The trainer's side of vLLM's weight-transfer API (vLLM a8f1d798):
    ``WeightTransferTrainerFactory.trainer_init(TensorHubTrainerInitInfo(
    model=..., rank=r), client=client, source=source)`` on every trainer
    rank; rank 0 tells the inference side where to load from. Each
    ``send_weights()`` runs on every rank: every rank iterates the source
    (FSDP's gathers are collectives), one tensor at a time, and only rank 0
    keeps them, cast to the rollout dtype on the way, publishes them as the
    next version and has every worker load exactly that version, recorded
    as vLLM's ``weight_version``. The publication is served until the next
    one. The trainer process never loads vLLM's plugins: call ``register()``
    there first."""

    init_info_cls = TensorHubTrainerInitInfo

    def __init__(self, *, client, source=None, is_sender: bool = True, publisher=None):
        self.client, self.source, self.is_sender = client, source, is_sender
        self.publisher = publisher
        self.version = 0  # the last version sent

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None) -> "TensorHubTrainerEngine":
        if isinstance(init_info, dict):
            init_info = TensorHubTrainerInitInfo(**init_info)
        if source is None:
            raise ValueError("the tensorhub trainer engine needs source= (a WeightSource of the trainer's weights)")
        is_sender = init_info.rank == 0
        publisher = None
        if is_sender:
            hub = reach(control=init_info.control or None, peer_options=init_info.peer_options)
            publisher = Publisher(hub, init_info.model, init_info.dtype)
            client.init_weight_transfer_engine({"model": init_info.model, "control": init_info.worker_control})
        return cls(client=client, source=source, is_sender=is_sender, publisher=publisher)

    def send_weights(self) -> None:
        if not self.is_sender:
            for _ in self.source:  # the gathers run in step; nothing is kept here
                pass
            return
        published = self.publisher.publish(iter(self.source))
        self.version = published.version
        self.client.start_weight_update()
        self.client.update_weights({"version": published.version})
        self.client.finish_weight_update(weight_version=str(published.version))

    def shutdown(self) -> None:
        if self.publisher is not None:
            self.publisher.close()


def _layerwise_reload():
    """vLLM's (initialize_layerwise_reload, finalize_layerwise_reload), or
    None where this vLLM has no layerwise reload."""
    try:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload
    except ImportError:
        return None
    return initialize_layerwise_reload, finalize_layerwise_reload


class TensorHubWorkerExtension:
    """``--worker-extension-cls tensorhub.integrations.vllm.TensorHubWorkerExtension``:
    vLLM mixes it into each worker, and ``collective_rpc("tensorhub_update",
    args=(model, version, control))`` loads that version on every rank (an
    error on any rank fails the call)."""

    def tensorhub_update(self, model: str, version: int, control: str = "/run/tensorhub.sock",
                         batch_bytes: int = 512 << 20) -> int:
        loaders = self.__dict__.setdefault("_tensorhub_loaders", {})
        if model not in loaders:
            loaders[model] = VersionLoader(reach(control=control), model, batch_bytes)
        net = self.model_runner.model
        loaders[model].load(explicit_version(version), net.load_weights)
        try:
            from vllm.model_executor.model_loader.utils import process_weights_after_loading
        except ImportError:
            return version
        process_weights_after_loading(net, self.model_runner.model_config, self.device)
        return version
