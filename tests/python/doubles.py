"""Doubles of the interfaces the adapters plug into, written from the
engines' own source (none of these engines can be installed here):

- vLLM (vllm-project/vllm, vllm/distributed/weight_transfer/base.py and
  factory.py, 2026): WeightTransferEngine's constructor (config,
  vllm_config, device, model), parse_*_info, the four-phase lifecycle, and
  the factory's registry, which refuses a name registered twice; the
  layerwise reload pair of vllm/model_executor/model_loader/reload.py.
- a model's load_weights as vLLM's and SGLang's loaders work: checkpoint
  names q/k/v_proj fused into qkv_proj through a stacked-params mapping, and
  each tensor-parallel rank narrowing out its own slice.
- SGLang (sgl-project/sglang, python/sglang/srt/entrypoints/http_server.py):
  POST /pause_generation, /update_weights_from_disk ({"success",
  "message"}; 400 when it fails), /continue_generation.
- verl (verl/checkpoint_engine/base.py) and NeMo-RL
  (nemo_rl/utils/checkpoint_engines/base.py): their CheckpointEngine
  method sets, as Protocols."""
from __future__ import annotations

import abc
import dataclasses
import http.server
import json
import os
import sys
import threading
import types
from typing import Any, ClassVar, Generic, List, Protocol, TypeVar, runtime_checkable

import numpy as np


# --- vLLM -------------------------------------------------------------------

def install_vllm_double():
    """Puts the vLLM double in sys.modules; returns (factory, reload calls);
    the trainer factory is factory.trainer_factory. Written from vLLM
    a8f1d798 (vllm/backends/distributed/weight_transfer/base.py, re-exported
    at vllm/distributed/weight_transfer/) and 055e47c2 (factory.py); the
    signature lists in tests/python/upstream/vllm.json, recorded from that
    source, are compared with these classes (test_upstream_signatures.py)."""
    calls: List[str] = []
    classes = _vllm_classes(calls)
    modules = {name: types.ModuleType(name) for name in (
        "vllm", "vllm.distributed", "vllm.distributed.weight_transfer", "vllm.distributed.weight_transfer.base",
        "vllm.distributed.weight_transfer.factory", "vllm.model_executor", "vllm.model_executor.model_loader",
        "vllm.model_executor.model_loader.reload")}
    base = modules["vllm.distributed.weight_transfer.base"]
    for name in ("WeightSource", "WeightTransferInitInfo", "TrainerInitInfo", "WeightTransferUpdateInfo",
                 "WeightTransferEngine", "VLLMWeightSyncClient", "TrainerWeightTransferEngine"):
        setattr(base, name, classes[name])
    factory = modules["vllm.distributed.weight_transfer.factory"]
    factory.WeightTransferEngineFactory = classes["WeightTransferEngineFactory"]
    factory.WeightTransferTrainerFactory = classes["WeightTransferTrainerFactory"]
    modules["vllm.distributed.weight_transfer"].base = base
    modules["vllm.distributed.weight_transfer"].factory = factory
    reload = modules["vllm.model_executor.model_loader.reload"]
    reload.initialize_layerwise_reload = classes["initialize_layerwise_reload"]
    reload.finalize_layerwise_reload = classes["finalize_layerwise_reload"]
    sys.modules.update(modules)
    classes["WeightTransferEngineFactory"].trainer_factory = classes["WeightTransferTrainerFactory"]
    return classes["WeightTransferEngineFactory"], calls


def _vllm_classes(calls: List[str]) -> dict:
    """The double's classes and functions by name (what the signature test
    reads)."""
    TInitInfo = TypeVar("TInitInfo")
    TUpdateInfo = TypeVar("TUpdateInfo")
    TTrainerInitInfo = TypeVar("TTrainerInitInfo")

    class WeightSource(abc.ABC):
        @abc.abstractmethod
        def metadata(self): ...

        @abc.abstractmethod
        def __iter__(self): ...

        def held_names(self):
            return None

        def groups(self):
            return [[m.name for m in self.metadata()]]

        def iter_groups(self):
            it = iter(self)
            for group in self.groups():
                pairs = [next(it) for _ in group]
                yield [n for n, _ in pairs], [t for _, t in pairs]

    @dataclasses.dataclass
    class WeightTransferInitInfo(abc.ABC):  # noqa: B024
        pass

    @dataclasses.dataclass
    class TrainerInitInfo:
        backend: ClassVar[str]
        rank: int = dataclasses.field(kw_only=True)

        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            if not getattr(cls, "backend", None):
                raise TypeError(f"{cls.__name__} must set a class-level `backend` string "
                                "(the WeightTransferTrainerFactory registry key).")

        @property
        def is_sender(self):
            return self.rank == 0

    @dataclasses.dataclass
    class WeightTransferUpdateInfo(abc.ABC):  # noqa: B024
        pass

    class WeightTransferEngine(abc.ABC, Generic[TInitInfo, TUpdateInfo]):
        init_info_cls: type
        update_info_cls: type
        supports_draft_weight_update: bool = True
        defers_processing: bool = False

        def drain_pending(self):
            pass

        def __init__(self, config, vllm_config, device, model):
            self.config = config
            self.vllm_config = vllm_config
            self.parallel_config = vllm_config.parallel_config
            self.model_config = vllm_config.model_config
            self.device = device
            self.model = model
            self._default_model_config = self.model_config
            self._default_model = model

        def set_weight_update_target(self, model, model_config):
            self.model, self.model_config = model, model_config

        def reset_weight_update_target(self):
            self.model, self.model_config = self._default_model, self._default_model_config

        def parse_init_info(self, init_dict):
            try:
                return self.init_info_cls(**init_dict)
            except TypeError as e:
                raise ValueError(f"Invalid init_info for {self.__class__.__name__}: {e}") from e

        def parse_update_info(self, update_dict):
            try:
                return self.update_info_cls(**update_dict)
            except TypeError as e:
                raise ValueError(f"Invalid update_info for {self.__class__.__name__}: {e}") from e

        @abc.abstractmethod
        def init_transfer_engine(self, init_info): ...

        @abc.abstractmethod
        def start_weight_update(self): ...

        @abc.abstractmethod
        def finish_weight_update(self): ...

        def update_weights(self, update_info):
            self.receive_weights(self.parse_update_info(update_info))

        @abc.abstractmethod
        def receive_weights(self, update_info): ...

        @abc.abstractmethod
        def shutdown(self): ...

    @runtime_checkable
    class VLLMWeightSyncClient(Protocol):
        def init_weight_transfer_engine(self, init_info): ...

        def start_weight_update(self): ...

        def update_weights(self, update_info): ...

        def finish_weight_update(self, weight_version=None): ...

    class TrainerWeightTransferEngine(abc.ABC, Generic[TTrainerInitInfo]):
        init_info_cls: type

        def __init__(self, *, client, source=None, is_sender=True):
            self.is_sender, self.client, self.source = is_sender, client, source

        @classmethod
        @abc.abstractmethod
        def trainer_init(cls, init_info, *, client, source=None): ...

        @abc.abstractmethod
        def send_weights(self): ...

        def shutdown(self):
            pass

    class WeightTransferEngineFactory:
        """vLLM's registry: a name registered twice is refused, and the
        module is imported only when the engine is built."""
        _registry: dict = {}

        @classmethod
        def register_engine(cls, name, module_path_or_cls, class_name=None):
            if name in cls._registry:
                raise ValueError(f"Weight transfer engine '{name}' is already registered.")
            cls._registry[name] = _vllm_loader(module_path_or_cls, class_name)

        @classmethod
        def create_engine(cls, config, vllm_config, device, model):
            if config.backend not in cls._registry:
                raise ValueError(f"Invalid weight transfer backend: {config.backend}. "
                                 f"Available engines: {list(cls._registry)}")
            return cls._registry[config.backend]()(config, vllm_config, device, model)

    class WeightTransferTrainerFactory:
        _registry: dict = {}

        @classmethod
        def register_engine(cls, name, module_path_or_cls, class_name=None):
            if name in cls._registry:
                raise ValueError(f"Weight transfer trainer engine '{name}' is already registered.")
            cls._registry[name] = _vllm_loader(module_path_or_cls, class_name)

        @classmethod
        def trainer_init(cls, init_info, *, client, source=None):
            backend = init_info.backend  # the init info's ClassVar picks the engine
            if backend not in cls._registry:
                raise ValueError(f"Invalid weight transfer backend: {backend}. "
                                 f"Available trainer engines: {list(cls._registry)}")
            return cls._registry[backend]().trainer_init(init_info=init_info, client=client, source=source)

    def initialize_layerwise_reload(model):
        calls.append("initialize_layerwise_reload")

    def finalize_layerwise_reload(*args, **kwargs):
        calls.append("finalize_layerwise_reload")

    return {name: value for name, value in locals().items() if not name.startswith("T") or name.startswith("Tr")}


def _vllm_loader(module_path_or_cls, class_name):
    if not isinstance(module_path_or_cls, str):
        return lambda: module_path_or_cls
    if class_name is None:
        raise ValueError("class_name is required when registering with module path")
    import importlib

    return lambda: getattr(importlib.import_module(module_path_or_cls), class_name)


def remove_vllm_double():
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


# --- a model's load_weights ----------------------------------------------------

class FusedModel:
    """One decoder layer's attention projections as an engine holds them:
    q, k and v fused into qkv_proj, cut across `tp` ranks (rank `rank` keeps
    rows [rank*h/tp, (rank+1)*h/tp) of each). load_weights maps checkpoint
    names to its own, as vLLM's stacked_params_mapping does, and records
    every batch it was given."""

    STACKED = [("qkv_proj", "q_proj", 0), ("qkv_proj", "k_proj", 1), ("qkv_proj", "v_proj", 2)]

    def __init__(self, hidden: int, tp: int, rank: int):
        import torch

        self.hidden, self.tp, self.rank = hidden, tp, rank
        rows = hidden // tp
        self.params = {"layers.0.self_attn.qkv_proj.weight": torch.zeros(3 * rows, hidden),
                       "layers.0.self_attn.o_proj.weight": torch.zeros(hidden, rows),
                       "embed_tokens.weight": torch.zeros(16, hidden)}
        self.batches: List[List[str]] = []

    def load_weights(self, weights):
        batch = list(weights)
        self.batches.append([name for name, _ in batch])
        rows = self.hidden // self.tp
        for name, tensor in batch:
            for fused, part, index in self.STACKED:
                if part in name:
                    shard = tensor.narrow(0, self.rank * rows, rows)
                    self.params[name.replace(part, fused)][index * rows:(index + 1) * rows].copy_(shard)
                    break
            else:
                if "o_proj" in name:
                    self.params[name].copy_(tensor.narrow(1, self.rank * rows, rows))
                else:
                    self.params[name].copy_(tensor)
        return {name for name, _ in batch}

    @staticmethod
    def checkpoint(hidden: int, seed: int):
        """A checkpoint's tensors (HF names, unfused), as float32 numpy."""
        rng = np.random.default_rng(seed)
        names = ["embed_tokens.weight", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
                 "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight"]
        shapes = [(16, hidden)] + [(hidden, hidden)] * 4
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}

    def expected(self, checkpoint):
        rows = self.hidden // self.tp
        r = slice(self.rank * rows, (self.rank + 1) * rows)
        prefix = "layers.0.self_attn."
        return {
            prefix + "qkv_proj.weight": np.concatenate([checkpoint[prefix + p + ".weight"][r]
                                                         for p in ("q_proj", "k_proj", "v_proj")]),
            prefix + "o_proj.weight": checkpoint[prefix + "o_proj.weight"][:, r],
            "embed_tokens.weight": checkpoint["embed_tokens.weight"],
        }


# --- SGLang -------------------------------------------------------------------

class FakeSGLang:
    """An HTTP server on 127.0.0.1 that answers as SGLang's http_server does
    and records each call. /update_weights_from_disk loads model_path as a
    model directory (its model.safetensors and, when `needs_config`, its
    config.json) and fails with 400 when `fail` is set or a file is
    missing."""

    def __init__(self, needs_config: bool = False):
        self.calls: List[tuple] = []
        self.loaded = None  # the tensors of the last successful load
        self.fail = False
        self.needs_config = needs_config
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.calls.append((self.path, body))
                status, answer = 200, {"success": True, "message": "Succeeded to update model weights."}
                if self.path == "/update_weights_from_disk":
                    status, answer = server._load(body)
                elif self.path not in ("/pause_generation", "/continue_generation"):
                    status, answer = 404, {"detail": "Not Found"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _load(self, body):
        from tensorhub import safetensors

        path = body.get("model_path", "")
        if self.fail:
            return 400, {"success": False, "message": "Failed to update weights: out of memory"}
        if self.needs_config and not os.path.exists(os.path.join(path, "config.json")):
            return 400, {"success": False, "message": f"no config.json in {path}"}
        try:
            self.loaded = {n: np.array(a) for n, a in safetensors.read(os.path.join(path, "model.safetensors")).items()}
        except (OSError, ValueError) as e:
            return 400, {"success": False, "message": str(e)}
        return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# --- verl and NeMo-RL ---------------------------------------------------------

def install_verl_double():
    """verl.checkpoint_engine.base with its CheckpointEngineRegistry (a
    decorator registering a class under a backend name; new() builds one)."""
    class CheckpointEngineRegistry:
        _registry: dict = {}

        def register(backend):  # noqa: N805 (verl defines it without self, used on the class)
            def wrapper(cls):
                CheckpointEngineRegistry._registry[backend] = cls
                return cls
            return wrapper

        @classmethod
        def new(cls, backend, *args, **kwargs):
            if backend not in cls._registry:
                raise ValueError(f"Checkpoint engine {backend} not registered")
            return cls._registry[backend](*args, **kwargs)

    modules = {name: types.ModuleType(name) for name in ("verl", "verl.checkpoint_engine",
                                                          "verl.checkpoint_engine.base")}
    modules["verl.checkpoint_engine.base"].CheckpointEngineRegistry = CheckpointEngineRegistry
    sys.modules.update(modules)
    return CheckpointEngineRegistry


def remove_verl_double():
    for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")]:
        del sys.modules[name]


def nemo_rl_create_checkpoint_engine(backend: str, *, bucket_size_bytes: int, engine_kwargs: dict):
    """NeMo-RL's create_checkpoint_engine: "module:Class", built with
    bucket_size= and the engine kwargs."""
    import importlib

    module_name, class_name = backend.split(":", 1)
    engine_cls = getattr(importlib.import_module(module_name), class_name)
    return engine_cls(bucket_size=bucket_size_bytes, **engine_kwargs)


@runtime_checkable
class VerlCheckpointEngine(Protocol):
    """verl/checkpoint_engine/base.py: CheckpointEngine(WithCache)."""

    def prepare(self) -> dict: ...

    @classmethod
    def build_topology(cls, trainer_world_size: int, rollout_world_size: int, metadata: list) -> tuple: ...

    def init_process_group(self, **kwargs): ...

    def finalize(self): ...

    async def send_weights(self, weights): ...

    def receive_weights(self): ...

    def get_weights(self): ...


@runtime_checkable
class NemoRLCheckpointEngine(Protocol):
    """nemo_rl/utils/checkpoint_engines/base.py: CheckpointEngine."""

    cleanup_after_load: bool

    def prepare(self) -> Any: ...

    def init_policy_process_group(self, *, worker_rank: int, train_world_size: int, rollout_world_size: int,
                                  metadata: list) -> None: ...

    def init_rollout_process_group(self, *, rollout_rank: int, train_world_size: int, rollout_world_size: int,
                                   metadata: list) -> None: ...

    def finalize(self) -> None: ...

    async def send_weights(self, weights) -> None: ...

    def receive_weight_batches(self): ...
