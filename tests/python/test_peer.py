"""The Python package's in-process peer over loopback: numpy arrays published
where they are and fetched into memory the package allocates, every dtype the
manifest names, odd and empty shapes, errors as exceptions, and waits that
leave the GIL free."""
import os
import threading
import time

import numpy as np
import pytest

import tensorhub as th

SWARM = bytes(range(32))


def weights(seed):
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": rng.standard_normal((257, 33), dtype=np.float32),
        "layers.0.bias": rng.standard_normal(7).astype(np.float16),
        "layers.0.step": np.array([seed], dtype=np.int64),
        "layers.0.mask": rng.integers(0, 2, size=(3, 5, 2)).astype(np.bool_),
        "layers.0.ids": rng.integers(-5, 5, size=(1000,), dtype=np.int32),
        "empty": np.zeros((0, 4), dtype=np.float64),
        "scalar": np.array(3.5, dtype=np.float64),
        "bytes": rng.integers(0, 255, size=(131071,), dtype=np.uint8),
    }


def test_publish_and_fetch_round_trip_every_dtype_and_shape(pair):
    trainer, worker = pair
    published = trainer.publish("policy", weights(1))
    assert published.version == 1
    head = worker.wait_for_head("policy", timeout=20)
    assert isinstance(head, th.VersionInfo)
    assert head.version == 1 and head.manifest_id == published.manifest_id and head.model == "policy"
    assert head.nbytes == published.nbytes and worker.latest("policy") == head
    assert head["version"] == 1 and head.get("manifest_id") == published.manifest_id  # read as the dict it was
    fetched = worker.fetch("policy").wait(timeout=30)
    got = fetched.state_dict()
    want = weights(1)
    assert set(got) == set(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array)
    # A second version follows the first, and arrives as such.
    second = trainer.publish("policy", weights(2))
    assert second.version == 2
    assert worker.wait_for_head("policy", after=1, timeout=20).version == 2
    np.testing.assert_array_equal(worker.fetch("policy", 2).wait(30).state_dict()["embed.weight"],
                                  weights(2)["embed.weight"])
    fetched.release()
    published.release()
    second.release()


def test_a_non_contiguous_array_is_packed_once_and_arrives_as_its_values(pair):
    trainer, worker = pair
    base = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    with trainer.publish("policy", [("transposed", base.T), ("strided", base[::3, 1::2])]):
        worker.wait_for_head("policy", timeout=20)
        got = worker.fetch("policy").wait(30).state_dict()
        np.testing.assert_array_equal(got["transposed"], base.T)
        np.testing.assert_array_equal(got["strided"], base[::3, 1::2])


def test_errors_are_exceptions_with_the_peers_reason(pair):
    trainer, worker = pair
    with pytest.raises(th.Error) as e:
        worker.wait_for_head("nothing-here", timeout=0.2)
    assert e.value.code == "timeout"
    with pytest.raises(th.Error) as e:
        trainer.publish("Bad Name!", {"x": np.zeros(4, dtype=np.float32)})
    assert e.value.code == "invalid_argument"
    with pytest.raises(th.Error):
        trainer.publish("policy", {"x": np.zeros(4, dtype=np.complex64)})
    with pytest.raises(th.Error):
        th.Peer.start(swarm_key=b"short")


def test_rdma_options_reach_the_peer():
    # RDMA off: the status says so and names no neighbour that reads.
    peer = th.Peer.start(swarm_key=SWARM, rdma=False)
    try:
        rdma = peer.status()["rdma"]
        assert "off" in rdma["note"], rdma
        assert rdma["neighbours"] == []
    finally:
        peer.close()
    # A queue pair count out of range is the peer's refusal, with its reason.
    for bad in (0, 17):
        with pytest.raises(th.Error) as e:
            th.Peer.start(swarm_key=SWARM, rdma_queue_pairs=bad)
        assert e.value.code == "invalid_argument" and "queue pairs" in str(e.value)


def test_bad_options_are_refused_at_start_with_a_reason():
    # Sizes and counts out of range are the peer's refusal (block_size=0 was
    # a SIGFPE at the first fetch, 3 a crawl).
    for options, reason in (({"block_size": 0}, "block size"), ({"block_size": 3}, "block size"),
                            ({"block_size": 1 << 30}, "block size"), ({"shard_size": 12345}, "shard size"),
                            ({"listen": "127.0.0.1:65535", "data_listen": None}, "65535")):
        with pytest.raises(th.Error) as e:
            th.Peer.start(swarm_key=SWARM, **options)
        assert e.value.code == "invalid_argument" and reason in str(e.value), (options, e.value)
    # Every C++ option is reachable; each out of range is the peer's refusal.
    for options, reason in (({"data_lanes": 0}, "data lanes"), ({"max_neighbours": 0}, "max neighbours"),
                            ({"upload_slots": 0}, "upload slots"), ({"shard_hash": "md5"}, "shard_hash"),
                            ({"max_release_deferral": -1}, "max_release_deferral"),
                            ({"start_timeout": 0}, "start_timeout"), ({"publish_head_wait": -1}, "publish_head_wait"),
                            ({"publish_head_wait": "10s"}, "publish_head_wait")):
        with pytest.raises(th.Error) as e:
            th.Peer.start(swarm_key=SWARM, **options)
        assert e.value.code == "invalid_argument" and reason in str(e.value), (options, e.value)
    secure = th.Peer.start(swarm_key=SWARM, shard_hash="blake2b-256", require_secure_hash=True, super_seed=False,
                           max_neighbours=4, upload_slots=2, data_lanes=2, max_release_deferral=1.5)
    try:
        published = secure.publish("policy", {"x": np.ones(1024, np.float32)})
        assert [v["model"] for v in secure.status()["versions"]] == ["policy"]
        published.release()
    finally:
        secure.close()
    # Wrong types: an Error naming the option, never AttributeError or a cast error.
    for options, name in (({"seeds": "127.0.0.1:1"}, "seeds"), ({"listen": 5}, "listen"),
                          ({"block_size": "1MiB"}, "block_size"), ({"block_size": True}, "block_size"),
                          ({"rdma": "yes"}, "rdma"), ({"trusted_publishers": [1]}, "trusted_publishers"),
                          ({"block_size": -1}, "block_size"), ({"swarm_key_file": 3}, "swarm_key_file")):
        with pytest.raises(th.Error) as e:
            th.Peer.start(swarm_key=SWARM, **options)
        assert e.value.code == "invalid_argument" and name in str(e.value), (options, e.value)


def test_a_failed_fetch_can_be_retried_at_once_and_fetch_to_file_leaves_nothing(pair, tmp_path):
    trainer, worker = pair
    published = trainer.publish("policy", {"x": np.ones(1 << 18, np.float32)})
    worker.wait_for_head("policy", timeout=20)
    published.release()  # the only holder is gone
    for _ in range(2):  # a retry fails as promptly as the first try, never hangs
        fetched = worker.fetch_to_file("policy", 1, tmp_path / "out.safetensors")
        with pytest.raises(th.Error) as e:
            fetched.wait(30)
        assert e.value.code == "unavailable"
        assert os.listdir(tmp_path) == []  # the temporary file went with the failure, before release()
        fetched.release()


def test_a_failed_fetch_hands_out_no_byte(pair):
    trainer, worker = pair
    published = trainer.publish("policy", {"x": np.ones(1 << 20, np.float32)})
    worker.wait_for_head("policy", timeout=20)
    published.release()  # the only holder is gone before the fetch begins
    fetched = worker.fetch("policy", 1)
    with pytest.raises(th.Error) as waited:
        fetched.wait(60)
    assert waited.value.code == "unavailable"
    for hand_out in (fetched.state_dict, lambda: fetched.metadata, lambda: list(fetched.iter_tensors(timeout=5))):
        with pytest.raises(th.Error) as e:
            hand_out()
        assert e.value.code == "unavailable", e.value


def test_a_wait_leaves_the_gil_free():
    trainer = th.Peer.start(swarm_key=SWARM)
    try:
        ticks = []
        stop = threading.Event()

        def tick():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.01)

        ticker = threading.Thread(target=tick)
        ticker.start()
        with pytest.raises(th.Error):
            trainer.wait_for_head("policy", timeout=1.0)
        stop.set()
        ticker.join()
        assert len(ticks) >= 50, f"the ticker ran {len(ticks)} times during a 1 s wait"
    finally:
        trainer.close()


def test_a_fetch_lands_in_the_callers_buffer(pair):
    trainer, worker = pair
    with trainer.publish("policy", weights(3)) as published:
        worker.wait_for_head("policy", timeout=20)
        with pytest.raises(th.Error):
            worker.fetch("policy", into=bytearray(published.nbytes - 1))  # one byte short
        with pytest.raises(th.Error):
            worker.fetch("policy", into=bytes(published.nbytes))  # read-only
        mine = np.zeros(published.nbytes, dtype=np.uint8)
        fetched = worker.fetch("policy", into=mine).wait(30)
        got = fetched.state_dict()
        np.testing.assert_array_equal(got["embed.weight"], weights(3)["embed.weight"])
        # The tensors are views of the caller's memory, not copies.
        assert np.shares_memory(got["embed.weight"], mine)
        fetched.release()


def test_a_fetch_lands_each_tensor_in_the_callers_array_of_its_name(pair):
    trainer, worker = pair
    with trainer.publish("policy", weights(4)):
        worker.wait_for_head("policy", timeout=20)
        mine = {"embed.weight": np.zeros((257, 33), np.float32), "layers.0.ids": np.zeros(1000, np.int32)}
        with pytest.raises(th.Error):
            worker.fetch("policy", into={"embed.weight": np.zeros((257, 32), np.float32)})  # wrong shape
        with pytest.raises(th.Error):
            worker.fetch("policy", into={"no.such": np.zeros(4, np.float32)})
        with pytest.raises(th.Error):
            worker.fetch("policy", into={"embed.weight": np.zeros((33, 257), np.float32).T})  # not contiguous
        fetched = worker.fetch("policy", into=mine).wait(30)
        want = weights(4)
        np.testing.assert_array_equal(mine["embed.weight"], want["embed.weight"])  # in place
        np.testing.assert_array_equal(mine["layers.0.ids"], want["layers.0.ids"])
        got = fetched.state_dict()
        assert got["embed.weight"] is mine["embed.weight"]
        for name, array in want.items():
            np.testing.assert_array_equal(got[name], array)
        fetched.release()


def test_a_dtype_cast_and_a_safetensors_file_published_from_its_mapping(pair, tmp_path):
    from tensorhub import safetensors

    trainer, worker = pair
    fp32 = {"w": np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64), "step": np.array([3], np.int64)}
    with trainer.publish("policy", ((name, array) for name, array in fp32.items()), dtype=np.float16):  # a generator
        worker.wait_for_head("policy", timeout=20)
        got = worker.fetch("policy").wait(30).state_dict()
        assert got["w"].dtype == np.float16 and got["step"].dtype == np.int64  # integers stay
        np.testing.assert_array_equal(got["w"], fp32["w"].astype(np.float16))
    path = str(tmp_path / "model.safetensors")
    safetensors.write(path, weights(6).items(), metadata={"step": "6"})
    with trainer.publish_safetensors("policy", path) as published:
        assert published.version == 2 and published.metadata == {"step": "6"}
        assert published.nbytes == os.path.getsize(path)  # the file as it is, header included
        worker.wait_for_head("policy", after=1, timeout=20)
        fetched = worker.fetch("policy", 2).wait(30)
        got = fetched.state_dict()
        for name, array in weights(6).items():
            np.testing.assert_array_equal(got[name], array)
        assert fetched.metadata == {"step": "6"}
        with open(path, "rb") as f:
            assert bytes(worker.fetch("policy", 2).wait(30)._buffer) == f.read()


def test_a_fetch_to_a_file_writes_a_safetensors_file_once_verified(pair, tmp_path):
    from tensorhub import safetensors

    trainer, worker = pair
    out = tmp_path / "fetched.safetensors"
    with trainer.publish("policy", weights(7), metadata={"step": "7"}) as published:
        worker.wait_for_head("policy", timeout=20)
        with worker.fetch_to_file("policy", path=out) as fetched:  # the head, into a path-like
            assert fetched.path == str(out)
            assert fetched.wait(30) is fetched
            assert fetched.version == published.version and fetched.nbytes == published.nbytes
            assert fetched.manifest_id == published.manifest_id
            assert fetched.progress().bytes_verified == published.nbytes
            assert fetched.progress()["bytes_verified"] == published.nbytes  # read as the dict it was
            assert fetched.progress().done and fetched.info.version == published.version
        # The file stays once in place: a safetensors file of the version.
        got = safetensors.read(str(out))
        for name, array in weights(7).items():
            np.testing.assert_array_equal(got[name], array)
        assert safetensors.read_metadata(str(out)) == {"step": "7"}
        assert sorted(os.listdir(tmp_path)) == ["fetched.safetensors"]

        with pytest.raises(th.Error) as e:
            worker.fetch_to_file("policy", 0, out, overwrite=False)
        assert e.value.code == "already_exists", e.value
        with pytest.raises(th.Error) as e:
            worker.fetch_to_file("policy", path=tmp_path / "no-such-dir" / "f")
        assert e.value.code == "not_found", e.value
        for path, mode in ((3.5, 0o644), (str(out), 0o10000), (str(out), -1), (str(out), "644"), (str(out), True)):
            with pytest.raises(th.Error) as e:
                worker.fetch_to_file("policy", 0, path, mode=mode)
            assert e.value.code == "invalid_argument", (path, mode, e.value)
        with pytest.raises(th.Error) as e:
            worker.fetch_to_file("policy", 99, str(out))
        assert e.value.code == "not_found", e.value
        private = tmp_path / "private.safetensors"
        worker.fetch_to_file("policy", path=private, mode=0o600).wait(30).release()
        assert os.stat(private).st_mode & 0o777 == 0o600
        assert private.read_bytes() == out.read_bytes()
        private.unlink()

    # The only holder is gone: the fetch fails and leaves the old file as it
    # was and no temporary file beside it.
    before = out.read_bytes()
    with trainer.publish("policy", weights(8)) as published:
        worker.wait_for_head("policy", after=published.version - 1, timeout=20)
    fetched = worker.fetch_to_file("policy", published.version, out)
    with pytest.raises(th.Error) as e:
        fetched.wait(60)
    assert e.value.code == "unavailable", e.value
    fetched.release()
    assert out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["fetched.safetensors"]


def test_a_checkpoint_directory_is_published_as_one_version(pair, tmp_path):
    from tensorhub import safetensors

    trainer, worker = pair
    all_weights = weights(4)
    names = list(all_weights)
    safetensors.write(str(tmp_path / "model-00001-of-00002.safetensors"),
                      [(n, all_weights[n]) for n in names[:3]], metadata={"step": "4"})
    safetensors.write(str(tmp_path / "model-00002-of-00002.safetensors"), [(n, all_weights[n]) for n in names[3:]])
    (tmp_path / "config.json").write_text("{}")
    with trainer.publish_safetensors("policy", str(tmp_path)) as published:
        assert published.metadata == {"step": "4"}
        worker.wait_for_head("policy", timeout=20)
        fetched = worker.fetch("policy").wait(30)
        got = fetched.state_dict()
        assert list(got) == names
        for name, array in all_weights.items():
            np.testing.assert_array_equal(got[name], array)
        assert fetched.metadata == {"step": "4"}
    safetensors.write(str(tmp_path / "model-00003-of-00003.safetensors"), [(names[0], all_weights[names[0]])])
    with pytest.raises(th.Error) as e:
        trainer.publish_safetensors("policy", str(tmp_path))  # one name in two files
    assert "used twice" in str(e.value)
    with pytest.raises(th.Error):
        trainer.publish_safetensors("policy", str(tmp_path / "empty-dir-that-is-missing"))


def test_metadata_travels_in_the_versions_safetensors_header(pair):
    from tensorhub import safetensors

    trainer, worker = pair
    with trainer.publish("policy", weights(3), metadata={"step": "3", "run": "ppo-α"}) as published:
        assert published.metadata == {"step": "3", "run": "ppo-α"}
        worker.wait_for_head("policy", timeout=20)
        into_buffer = worker.fetch("policy").wait(30)
        assert into_buffer.metadata == {"step": "3", "run": "ppo-α"}
        # The version is a safetensors image: its bytes parse as one.
        base, header, metadata = safetensors.decode_header(into_buffer._buffer)
        assert metadata["step"] == "3" and set(header) == set(weights(3))
        mine = {name: np.empty_like(array) for name, array in weights(3).items()}
        into_arrays = worker.fetch("policy", into=mine).wait(30)
        assert into_arrays.metadata == {"step": "3", "run": "ppo-α"}
        np.testing.assert_array_equal(mine["embed.weight"], weights(3)["embed.weight"])
    with trainer.publish("policy", {"x": np.zeros(3, np.float32)}) as bare:
        worker.wait_for_head("policy", after=1, timeout=20)
        assert worker.fetch("policy", bare.version).wait(30).metadata == {}
    with pytest.raises(th.Error):
        trainer.publish("policy", [("x", np.zeros(1)), ("x", np.ones(1))])  # one name twice


def test_iter_tensors_yields_every_tensor_in_order_once_verified_in_batches(pair):
    trainer, worker = pair
    with trainer.publish("policy", weights(7)):
        worker.wait_for_head("policy", timeout=20)
        fetched = worker.fetch("policy")
        seen = []
        for batch in fetched.iter_tensors(batch_bytes=32 << 10, timeout=30):
            assert batch
            assert sum(a.nbytes for _, a in batch) <= 32 << 10 or len(batch) == 1
            seen.extend(batch)
        want = weights(7)
        assert [name for name, _ in seen] == list(want)  # the published order
        for name, array in seen:
            np.testing.assert_array_equal(array, want[name])
        fetched.wait(10)
        any_order = [pair for batch in worker.fetch("policy").iter_tensors(order="verified", timeout=30)
                     for pair in batch]
        assert sorted(name for name, _ in any_order) == sorted(want)
        for name, array in any_order:
            np.testing.assert_array_equal(array, want[name])
        with pytest.raises(th.Error):
            next(iter(worker.fetch("policy").iter_tensors(order="random")))
        only = list(worker.fetch("policy").iter_tensors(names=["layers.0.step"], timeout=30))
        assert [name for batch in only for name, _ in batch] == ["layers.0.step"]
        with pytest.raises(th.Error):
            next(iter(worker.fetch("policy").iter_tensors(kind="jax")))


def test_a_publisher_whose_seed_never_answers_gives_up_after_publish_head_wait():
    # The seed is a peer of another swarm: it never answers this one.
    other = th.Peer.start(swarm_key=bytes([0x55]) * 32, listen="127.0.0.1:0")
    try:
        lonely = th.Peer.start(swarm_key=SWARM, listen="127.0.0.1:0", seeds=[other.gossip_address],
                               publish_head_wait=0.5, start_timeout=2.0)
        try:
            began = time.monotonic()
            with pytest.raises(th.Error) as e:
                lonely.publish("policy", {"x": np.ones(1024, np.float32)})
            took = time.monotonic() - began
            assert e.value.code == "unavailable" and "no seed answered" in str(e.value), e.value
            assert 0.45 <= took < 5, took
        finally:
            lonely.close()
    finally:
        other.close()
