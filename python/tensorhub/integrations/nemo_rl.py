"""NeMo-RL: a checkpoint engine for ``refit_transport``::

    policy.generation.refit_transport: "tensorhub.integrations.nemo_rl:TensorHubCheckpointEngine"
    # engine_kwargs: {model: policy, control: /run/tensorhub.sock}

NeMo-RL builds it with ``bucket_size=`` and the engine kwargs, gathers every
worker's ``prepare()``, and passes the list to ``init_policy_process_group``
and ``init_rollout_process_group``: the trainer's master rank (rank 0) names
the version it will publish, and every rollout rank loads exactly that one
(``receive_weight_batches``) or raises.

Tested against the method set of NeMo-RL's
``nemo_rl/utils/checkpoint_engines/base.py`` copied into a test protocol,
not against NeMo-RL."""
from __future__ import annotations

from typing import Any, List

from ._group import GroupEngine

__all__ = ["TensorHubCheckpointEngine"]


class TensorHubCheckpointEngine(GroupEngine):
    cleanup_after_load = True

    def __init__(self, bucket_size: int = 512 << 20, **kwargs):
        self._rank = kwargs.pop("rank", None)
        super().__init__(bucket_size, kwargs.pop("is_master", self._rank == 0), **kwargs)

    def init_policy_process_group(self, *, worker_rank: int, train_world_size: int, rollout_world_size: int,
                                  metadata: List[Any]) -> None:
        self.version = self.handed_down(metadata)

    def init_rollout_process_group(self, *, rollout_rank: int, train_world_size: int, rollout_world_size: int,
                                   metadata: List[Any]) -> None:
        self.version = self.handed_down(metadata)

    def finalize(self) -> None:
        self.version = None

    def receive_weight_batches(self):
        return self.receive_batches()
