"""Versions in parts from Python: each trainer rank publishes its own tensors
and slices with ``part=(rank, world)``, the ranks seal, and a worker fetches
the whole model bit-identical to the trainer's full tensors."""

import contextlib
import json

import numpy as np
import pytest

import tensorhub as th
from conftest import publisher_keys

SWARM = bytes(range(32))


def full_model():
    rng = np.random.default_rng(48)
    return {
        "w": rng.standard_normal((64, 32), dtype=np.float32),   # FSDP: rows split
        "c": rng.standard_normal((16, 8), dtype=np.float32),    # tensor parallel: columns split
        "b": rng.standard_normal((32,), dtype=np.float32),      # whole, on rank 0
    }


def rank_tensors(full, rank, world):
    rows, cols = 64 // world, 8 // world
    out = {
        "w": th.Slice(full["w"][rank * rows:(rank + 1) * rows], (64, 32), (slice(rank * rows, (rank + 1) * rows), slice(None))),
        "c": th.Slice(np.ascontiguousarray(full["c"][:, rank * cols:(rank + 1) * cols]), (16, 8),
                      (slice(None), slice(rank * cols, (rank + 1) * cols))),
    }
    if rank == 0:
        out["b"] = full["b"]
    return out


# A row-parallel rank's columns of "w" (strided in both parts), rows of "c", a slice of "b".
SELECT = {"w": (slice(None), slice(8, 24)), "c": (slice(4, 12), slice(None)), "b": slice(3, 7)}


def check_selected(state, full):
    """`state` (a selection's tensors, by name) holds SELECT's slices of `full`."""
    assert np.array_equal(state["w"], full["w"][:, 8:24])
    assert np.array_equal(state["c"], full["c"][4:12, :])
    assert np.array_equal(state["b"], full["b"][3:7])


@pytest.fixture
def ranks_and_worker(tmp_path):
    keys, ids = publisher_keys(tmp_path, 2)
    small = dict(swarm_key=SWARM, shard_size=64 << 10, block_size=16 << 10, retain_head_replicas=0,
                 trusted_publishers=ids)
    first = th.Peer.start(host="rank0", key_file=keys[0], **small)
    second = th.Peer.start(host="rank1", key_file=keys[1], seeds=[first.gossip_address], **small)
    worker = th.Peer.start(host="worker", seeds=[first.gossip_address], **small)
    yield [first, second], worker
    for p in (worker, second, first):
        p.close()


@contextlib.contextmanager
def sealed_parts(ranks, full):
    """Both ranks' parts of v1 of `full`, sealed; released at the end."""
    published = [ranks[r].publish("policy", rank_tensors(full, r, 2), version=1, part=(r, 2)) for r in range(2)]
    try:
        for p in published:
            assert p.version == 1
            p.wait_sealed(30)
        yield published
    finally:
        for p in published:
            p.release()


def test_two_ranks_publish_their_parts_and_a_worker_fetches_the_whole_model(ranks_and_worker):
    ranks, worker = ranks_and_worker
    full = full_model()
    with sealed_parts(ranks, full):
        head = worker.wait_for_head("policy", 0, 30)
        assert head.version == 1 and head.nbytes == sum(a.nbytes for a in full.values())
        with worker.fetch("policy", 1) as fetched:
            fetched.wait(30)
            state = fetched.state_dict()
            assert sorted(state) == ["b", "c", "w"]
            for name, array in full.items():
                assert state[name].shape == array.shape
                assert np.array_equal(state[name], array), name
            streamed = {name: np.array(t) for batch in fetched.iter_tensors(kind="numpy") for name, t in batch}
            assert all(np.array_equal(streamed[n], full[n]) for n in full)


def test_a_part_is_refused_with_a_reason_for_bad_arguments(ranks_and_worker):
    ranks, _ = ranks_and_worker
    full = full_model()
    tensors = rank_tensors(full, 0, 2)
    for kwargs, words in (({"part": (0, 2)}, "both version=v and part"),
                          ({"version": 1, "part": (2, 2)}, "0 <= rank < world"),
                          ({"version": 0, "part": (0, 2)}, "from 1"),
                          ({"version": 1, "part": (0, 2), "metadata": {"step": "1"}}, "no safetensors header")):
        with pytest.raises(th.Error) as e:
            ranks[0].publish("policy", tensors, **kwargs)
        assert e.value.code == "invalid_argument" and words in str(e.value)
    with pytest.raises(th.Error) as e:
        th.Slice(full["w"], (64, 32), (slice(0, 64),))
    assert "2 dimensions" in str(e.value)
    with pytest.raises(th.Error) as e:
        th.Slice(full["w"], (64, 32), (slice(0, 64, 2), slice(None)))
    assert "step 1" in str(e.value)
    wrong = {"w": th.Slice(full["w"], (64, 32), (slice(0, 32), slice(None)))}  # 64 rows given for 32
    with pytest.raises(th.Error) as e:
        ranks[0].publish("policy", wrong, version=1, part=(0, 2))
    assert "is not its slice's" in str(e.value)
    # Parts that overlap are never sealed: the tensor and the rows are named.
    overlapping = [ranks[r].publish("policy", {"w": th.Slice(full["w"][:40], (64, 32), (slice(24 * r, 24 * r + 40), slice(None)))},
                                    version=1, part=(r, 2)) for r in range(2)]
    try:
        with pytest.raises(th.Error) as e:
            overlapping[0].wait_sealed(20)
        assert e.value.code == "verify_failed" and "tensor 'w': parts 0 and 1 both cover [24:40, 0:32]" in str(e.value)
    finally:
        for p in overlapping:
            p.release()


def test_declared_views_move_exactly_a_strided_selections_bytes(ranks_and_worker, tmp_path):
    ranks, worker = ranks_and_worker
    full = full_model()
    # SELECT, and another rank's columns, which the worker does not fetch.
    select = SELECT
    other = {"w": (slice(None), slice(0, 8))}
    published = [ranks[r].publish("policy", rank_tensors(full, r, 2), version=1, part=(r, 2), views=[select, other])
                 for r in range(2)]
    try:
        for p in published:
            p.wait_sealed(30)
        worker.wait_for_head("policy", 0, 30)
        with worker.fetch("policy", 1, select=select) as fetched:
            fetched.wait(30)
            state = fetched.state_dict()
            check_selected(state, full)
            streamed = {name: np.array(t) for batch in fetched.iter_tensors() for name, t in batch}
            assert all(np.array_equal(streamed[n], state[n]) for n in state)
            # Exactly the selection: each part's view, not its shards (the parts' 9 KiB and 8 KiB).
            assert fetched.progress().bytes_received == sum(a.nbytes for a in state.values())
        # Into safetensors files: the selection (its slices named in the metadata), and the whole model.
        from tensorhub import safetensors
        with worker.fetch_to_file("policy", 1, tmp_path / "selection.safetensors", select=select) as written:
            written.wait(30)
        check_selected(safetensors.read(str(tmp_path / "selection.safetensors")), full)
        slices = json.loads(safetensors.read_metadata(str(tmp_path / "selection.safetensors"))["tensorhub.slices"])
        assert slices["w"] == {"global_shape": [64, 32], "begin": [0, 8]} and slices["c"]["begin"] == [4, 0]
        with worker.fetch_to_file("policy", 1, tmp_path / "whole.safetensors") as written:
            written.wait(30)
        tensors = safetensors.read(str(tmp_path / "whole.safetensors"))
        assert sorted(tensors) == ["b", "c", "w"] and all(np.array_equal(tensors[n], full[n]) for n in full)
    finally:
        for p in published:
            p.release()
    tensors = rank_tensors(full, 0, 2)
    with pytest.raises(th.Error) as e:
        ranks[0].publish("policy", tensors, version=2, part=(0, 2), views=[other, {"w": (slice(0, 99), slice(None))}])
    assert e.value.code == "invalid_argument" and "views[1]" in str(e.value) and "'w'" in str(e.value)
    with pytest.raises(th.Error) as e:
        ranks[0].publish("policy", tensors, views=[other])
    assert e.value.code == "invalid_argument" and "part=(rank, world)" in str(e.value)
    with pytest.raises(TypeError):
        ranks[0].publish("policy", tensors, version=2, part=(0, 2), views=other)


def test_a_worker_fetches_a_selection_bit_identical_to_slicing_the_trainers_model(ranks_and_worker):
    ranks, worker = ranks_and_worker
    full = full_model()
    with sealed_parts(ranks, full):
        worker.wait_for_head("policy", 0, 30)
        select = SELECT
        with worker.fetch("policy", 1, select=select) as fetched:
            fetched.wait(30)
            state = fetched.state_dict()
            check_selected(state, full)
            assert [t[0] for t in fetched.tensors] == ["w", "c", "b"]  # the whole model's order, end to end
            assert [t[2] for t in fetched.tensors] == [[64, 16], [8, 8], [4]]
            streamed = {name: np.array(t) for batch in fetched.iter_tensors() for name, t in batch}
            assert all(np.array_equal(streamed[n], state[n]) for n in state)
            assert fetched.progress().bytes_received >= state["w"].nbytes + state["c"].nbytes + state["b"].nbytes
        # Whole tensors by name, into the caller's arrays: only part 0 holds "b", so part 1 is never fetched.
        into = {"b": np.zeros(32, dtype=np.float32)}
        with worker.fetch("policy", 1, select=["b"], into=into) as fetched:
            fetched.wait(30)
            assert np.array_equal(into["b"], full["b"])
            assert fetched.state_dict()["b"] is into["b"]
            # Streamed as well, though most of each fetched part's shards are not wanted.
            streamed = [(name, np.array(t)) for batch in fetched.iter_tensors(timeout=10) for name, t in batch]
            assert [name for name, _ in streamed] == ["b"] and np.array_equal(streamed[0][1], full["b"])
            progress = fetched.progress()
            assert progress.shards_total == 1
            assert 0 < progress.bytes_received < sum(a.nbytes for a in full.values())
        # Bad selections are refused with a reason, before anything is fetched.
        for select, words in (({"x": slice(None)}, "no tensor 'x'"),
                              ({"w": (slice(0, 100), slice(None))}, "reaches outside"),
                              ({"w": (slice(0, 4, 2), slice(None))}, "step 2"),
                              ({"w": (slice(5, 5), slice(None))}, "empty"),
                              (["nope"], "no tensor 'nope'"),
                              ([], "names no tensor"),
                              ({}, "names no tensor")):
            with pytest.raises(th.Error) as e:
                worker.fetch("policy", 1, select=select)
            assert words in str(e.value), (select, str(e.value))
        with pytest.raises(TypeError):
            worker.fetch("policy", 1, select="w")
        with pytest.raises(th.Error) as e:
            worker.fetch("policy", 1, select=["b"], into=np.zeros(3, dtype=np.uint8))
        assert "(the selection) is 128" in str(e.value)
