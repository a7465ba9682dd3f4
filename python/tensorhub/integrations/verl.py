"""verl: a ``CheckpointEngine`` registered as "tensorhub". Configure::

    actor_rollout_ref.rollout.checkpoint_engine.backend=tensorhub
    actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.tensorhub.model=policy
    actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.tensorhub.control=/run/tensorhub.sock

and import ``tensorhub.integrations.verl`` in the worker processes (it
registers itself in ``CheckpointEngineRegistry`` when verl is importable).
There is no process group: ``build_topology`` hands every worker the version
the trainer's master rank will publish, the trainer publishes it, and each
rollout worker loads that version (``receive_weights``, or ``get_weights``
from the node's held copy) or raises.

Tested against the method set of verl's ``verl/checkpoint_engine/base.py``
copied into a test protocol, not against verl."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ._group import GroupEngine

__all__ = ["TensorHubCheckpointEngine"]


class TensorHubCheckpointEngine(GroupEngine):
    @classmethod
    def build_topology(cls, trainer_world_size: int, rollout_world_size: int,
                       metadata: List[dict]) -> Tuple[Dict[str, List[Any]], Dict[str, List[Any]]]:
        version = cls.handed_down(metadata)
        return {"version": [version] * trainer_world_size}, {"version": [version] * rollout_world_size}

    def init_process_group(self, version: int, **kwargs) -> None:
        self.version = version

    def finalize(self) -> None:
        self.version = None  # the versions stay held and served until the next step's

    async def receive_weights(self):
        async for batch in self.receive_batches():
            for pair in batch:
                yield pair

    async def get_weights(self):
        """The version loaded last, from the node's held copy (verl's
        CheckpointEngineWithCache)."""
        if self.loader.current is None:
            return
        for batch in self.loader.current.iter_tensors(batch_bytes=self.bucket_size, kind="torch"):
            for pair in batch:
                yield pair


def _register() -> None:
    try:
        from verl.checkpoint_engine.base import CheckpointEngineRegistry
    except ImportError:
        return
    CheckpointEngineRegistry.register("tensorhub")(TensorHubCheckpointEngine)


_register()
