"""tensorhub.connect: a pure-Python client of `tensorhub peer` daemons. One
daemon publishes what the client hands it, another fetches it for its own
client, and an in-process peer in the same swarm fetches the same bytes; a
daemon holds a version as one file that several processes of its node share."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tensorhub as th
from conftest import BINARY, swarm_of_daemons

pytestmark = pytest.mark.skipif(not BINARY, reason="TENSORHUB_BINARY names no tensorhub binary")


def weights(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((300, 17), dtype=np.float32),
            "b": rng.standard_normal(17).astype(np.float16),
            "step": np.array([seed], dtype=np.int64)}


def test_daemon_clients_and_an_in_process_peer_see_the_same_version():
    with swarm_of_daemons(["a", "b"]) as daemons:
        clients, ids, swarm, ports, d = daemons.clients, daemons.ids, daemons.swarm, daemons.ports, daemons.folder
        a, b = clients["a"], clients["b"]
        with a.publish("policy", weights(41), metadata={"step": "41"}) as published:
            assert published.version == 1
            assert b.wait_for_head("policy", timeout=20).version == 1
            with b.fetch("policy", 1) as fetched:
                got = fetched.state_dict()
                for name, array in weights(41).items():
                    np.testing.assert_array_equal(got[name], array)
                assert fetched.metadata == {"step": "41"}
                # One request each, answered by the daemon when it holds (no polling).
                published.wait_replicated(1, timeout=20)
                with pytest.raises(th.Error) as e:
                    published.wait_replicated(5, timeout=0.5)
                assert e.value.code == "timeout" and "fewer than 5 replicas" in str(e.value), e.value
            with pytest.raises(th.Error) as e:
                b.wait_for_head("policy", after=1, timeout=0.5)
            assert e.value.code == "timeout", e.value
            # An in-process peer in the same swarm gets the same bytes.
            peer = th.Peer.start(swarm_key_file=swarm, seeds=[f"127.0.0.1:{ports['a']}"],
                                 trusted_publishers=[ids["a"]], host="c", retain_head_replicas=0)
            try:
                peer.wait_for_head("policy", timeout=20)
                mine = peer.fetch("policy", 1).wait(30)
                for name, array in weights(41).items():
                    np.testing.assert_array_equal(mine.state_dict()[name], array)
                assert mine.metadata == {"step": "41"}
            finally:
                peer.close()
        with pytest.raises(th.Error):
            b.fetch("policy", 7)  # not known
        with pytest.raises(th.Error):
            th.connect(os.path.join(d, "nobody.sock")).status()


def test_a_version_published_in_process_reaches_a_daemon_as_a_safetensors_file():
    with swarm_of_daemons(["a", "b"]) as daemons:
        clients, ids, swarm, ports, d = daemons.clients, daemons.ids, daemons.swarm, daemons.ports, daemons.folder
        trainer = th.Peer.start(key_file=os.path.join(d, "trainer.key"), swarm_key_file=swarm,
                                seeds=[f"127.0.0.1:{ports['a']}"], host="t", retain_head_replicas=0)
        try:
            with trainer.publish("actor", weights(5), metadata={"step": "5"}) as published:
                b = clients["b"]
                assert b.wait_for_head("actor", timeout=20).version == published.version
                with b.fetch("actor", published.version) as fetched:
                    for name, array in weights(5).items():
                        np.testing.assert_array_equal(fetched.state_dict()[name], array)
                    assert fetched.metadata == {"step": "5"}
                    torch = pytest.importorskip("torch")
                    moved = {n: t for batch in fetched.iter_tensors(kind="torch", device="cpu") for n, t in batch}
                    for name, array in weights(5).items():
                        assert torch.equal(moved[name], torch.from_numpy(array)), name
        finally:
            trainer.close()


def test_the_ranks_of_one_node_share_one_held_file():
    with swarm_of_daemons(["a", "b"]) as daemons:
        clients, ids, swarm, ports, d = daemons.clients, daemons.ids, daemons.swarm, daemons.ports, daemons.folder
        a, b = clients["a"], clients["b"]
        with a.publish("org/policy", weights(8), metadata={"step": "8"}) as published:
            b.wait_for_head("org/policy", timeout=20)
            # Four ranks ask at once: one fetch, one file.
            holds, errors = [None] * 4, []

            def rank(i):
                try:
                    holds[i] = th.connect(b.control, directory=d).hold("org/policy", published.version)
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(e)

            threads = [threading.Thread(target=rank, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not errors, errors
            paths = {h.path for h in holds}
            assert len(paths) == 1
            path = paths.pop()
            assert path.startswith(os.path.join(d, "hold")) and path.endswith("/v1/model.safetensors")
            assert "org%2Fpolicy" in path and os.path.dirname(path) == holds[0].dir
            for h in holds:
                for name, array in weights(8).items():
                    np.testing.assert_array_equal(h.state_dict()[name], array)
                assert h.metadata == {"step": "8"}
            served = [v["bytes_served"] for v in a.status()["versions"] if v["model"] == "org/policy"]
            assert served == [holds[0].nbytes]  # the publisher sent the version once, not once a rank
            for h in holds[:3]:
                h.release()
            assert os.path.exists(path)  # one hold is left
            holds[3].release()
            assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
            with pytest.raises(th.Error):
                b.hold("org/policy", 99)  # not known


def test_a_restarted_daemon_removes_the_files_its_killed_life_held():
    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        with a.publish("policy", weights(9)) as published:
            b.wait_for_head("policy", timeout=20)
            held = b.hold("policy", published.version)
            assert os.path.exists(held.path)
            daemons.procs["b"].send_signal(signal.SIGKILL)
            daemons.procs["b"].wait(10)
            assert os.path.exists(held.path)  # nobody removed it
            os.unlink(b.control)
            daemons.restart("b")
            deadline = time.monotonic() + 10
            while not os.path.exists(b.control):
                assert time.monotonic() < deadline, "daemon b did not start again"
                time.sleep(0.05)
            assert not os.path.exists(held.path)


def test_a_hold_whose_fetch_fails_answers_every_holder_and_leaves_no_file():
    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        published = a.publish("policy", weights(10))
        b.wait_for_head("policy", timeout=20)
        published.release()  # the only holder is gone before the hold fetches
        errors = []

        def rank():
            try:
                th.connect(b.control, directory=daemons.folder).hold("policy", 1)
            except th.Error as e:
                errors.append(e)

        threads = [threading.Thread(target=rank) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [e.code for e in errors] == ["unavailable", "unavailable"], errors
        hold_dir = os.path.join(daemons.folder, "hold")
        leftovers = [os.path.join(root, f) for root, _, files in os.walk(hold_dir) for f in files]
        assert leftovers == []


def test_a_rank_that_dies_lets_go_of_its_hold():
    """A hold lasts while its connection does: a rank killed while holding
    (no release) lets go, and with the last hold the file goes."""
    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        with a.publish("policy", weights(11)) as published:
            b.wait_for_head("policy", timeout=20)
            mine = b.hold("policy", published.version)
            rank = subprocess.Popen(
                [sys.executable, "-c", "import sys, time, tensorhub as th; "
                 "h = th.connect(sys.argv[1]).hold('policy', int(sys.argv[2])); print(h.path, flush=True); "
                 "time.sleep(600)", b.control, str(published.version)],
                stdout=subprocess.PIPE, text=True)
            try:
                assert rank.stdout.readline().strip() == mine.path
                mine.release()
                assert os.path.exists(mine.path)  # the rank still holds it
            finally:
                rank.send_signal(signal.SIGKILL)
                rank.wait(10)
            deadline = time.monotonic() + 10
            while os.path.exists(mine.path):
                assert time.monotonic() < deadline, "the dead rank's hold was not let go"
                time.sleep(0.05)


def test_the_daemon_client_fails_cleanly_retries_and_leaves_no_temporary_file():
    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        published = a.publish("policy", weights(11))
        b.wait_for_head("policy", timeout=20)
        published.release()  # the only holder is gone
        before = set(os.listdir(daemons.folder))
        for _ in range(2):  # the retry fails as promptly as the first try
            t0 = time.monotonic()
            with pytest.raises(th.Error) as e:
                b.fetch("policy", 1, timeout=60)
            assert e.value.code == "unavailable", e.value
            assert time.monotonic() - t0 < 30
        assert [n for n in set(os.listdir(daemons.folder)) - before if ".partial-" in n] == []
        # A model name the rule refuses, however long: an Error, never a raw OSError.
        for bad in ("m" * 300, "a b", "", "/abs"):
            with pytest.raises(th.Error) as e:
                b.publish(bad, weights(1))
            assert e.value.code == "invalid_argument"
        long_ok = "x/" * 60 + "m"  # legal, 121 bytes: its file name is cut, not refused
        done = a.publish(long_ok, weights(12))
        assert done.version == 1
        done.release()


def test_a_daemon_fetch_that_runs_out_of_time_is_cancelled():
    with swarm_of_daemons(["a", "b"]) as daemons:
        a, b = daemons.clients["a"], daemons.clients["b"]
        a.publish("policy", weights(13))
        b.wait_for_head("policy", timeout=20)
        daemons.procs["a"].send_signal(signal.SIGSTOP)  # the only holder answers nothing
        try:
            before = set(os.listdir(daemons.folder))
            t0 = time.monotonic()
            with pytest.raises(th.Error) as e:
                b.fetch("policy", 1, timeout=1.5)
            assert e.value.code == "timeout" and time.monotonic() - t0 < 5, e.value
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and [n for n in set(os.listdir(daemons.folder)) - before
                                                   if ".partial-" in n]:
                time.sleep(0.05)
            assert [n for n in set(os.listdir(daemons.folder)) - before if ".partial-" in n] == []
            assert b.status()["self"]["id"]
        finally:
            daemons.procs["a"].send_signal(signal.SIGCONT)
