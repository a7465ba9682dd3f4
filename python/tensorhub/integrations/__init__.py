"""Adapters that plug TensorHub into the RL stacks' own extension points, so
that a user writes configuration, not code:

- ``vllm``: a ``WeightTransferEngine`` named "tensorhub" (registered by the
  ``vllm.general_plugins`` entry point) and a worker extension for vLLM
  without that API;
- ``sglang``: a driver that has the node's daemon hold a version and reloads
  an SGLang server from it (``/update_weights_from_disk``);
- ``verl``: a ``CheckpointEngine`` registered as "tensorhub";
- ``nemo_rl``: a checkpoint engine class path for ``refit_transport``;
- ``slime``: a post-write hook that publishes the checkpoint directory.

Every rank of a parallel group loads the explicit version that the trainer
or controller hands down, never a "latest" that each rank resolves alone;
a rank that cannot get it raises, which fails the group's update. None of
these engines can be installed where TensorHub is tested: each adapter is
tested against a double of the interface it plugs into (docs/python.md)."""
