"""Versions in parts and group commit across processes, with torch: 4
trainer processes each publish an FSDP-style dim-0 shard of a trained
model; 2 instances of 2 tensor-parallel ranks stage the version through
their groups and commit it. A rank killed before its group commits fails
that group's commit, naming it, within two failure-detection periods,
while the other instance commits; its replacement catches up and the
group commits. Each rank fetches its Megatron-style slice alone (fetch by
selection), bit-identical to slicing the trainer's model."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import tensorhub as th

torch = pytest.importorskip("torch")
WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")
sys.path.insert(0, os.path.dirname(__file__))
import group_worker  # noqa: E402  (the expected model, computed here as the trainers do)
from conftest import publisher_keys  # noqa: E402


class Process:
    """A worker process and the JSON events it printed, read as they come."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, WORKER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.events = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.events.append(json.loads(line))
                self.cond.notify_all()

    def wait_for(self, event, timeout=60):
        with self.cond:
            assert self.cond.wait_for(lambda: any(e["event"] == event for e in self.events), timeout), \
                f"no {event!r} from {self.proc.args[2:]} (events {self.events}, exit {self.proc.poll()})"
            return next(e for e in self.events if e["event"] == event)

    def tell(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_trainer_parts_two_instances_a_killed_rank_and_its_replacement(tmp_path):
    keys, ids = publisher_keys(tmp_path, 4, "trainer")
    seed = th.Peer.start(host="seed", swarm_key=bytes(range(32)), trusted_publishers=ids, **group_worker.SMALL)
    procs = []
    try:
        trusted = ",".join(ids)
        trainers = [Process("trainer", seed.gossip_address, keys[r], trusted, str(r), "4") for r in range(4)]
        procs += trainers
        for t in trainers:
            t.wait_for("sealed")
        ranks = {(i, r): Process("rank", seed.gossip_address, trusted, f"inst{i}", "2", str(r), "1")
                 for i in range(2) for r in range(2)}
        procs += ranks.values()
        for p in ranks.values():
            p.wait_for("staging")
        # Instance 0's rank 1 dies before its group commits.
        killed = ranks[(0, 1)]
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait()
        killed_at = time.time()
        for key, p in ranks.items():
            if key != (0, 1):
                p.tell("go")
        failure = ranks[(0, 0)].wait_for("failed")
        assert failure["code"] == "aborted", failure
        assert "rank 1:" in failure["message"] and "rank 0:" not in failure["message"], failure
        waited = failure["at"] - killed_at
        print(f"instance 0's commit failed {waited:.2f} s after its rank 1 was killed: {failure['message']}")
        assert waited <= 3.5
        expected = group_worker.trained_model()
        for r in range(2):
            done = ranks[(1, r)].wait_for("committed")
            assert done["slices"] == group_worker.digest(group_worker.tensor_parallel_slices(expected, r, 2))
            assert done["committed"] == 1
        assert not any(e["event"] == "committed" for e in ranks[(0, 0)].events)

        # The replacement of rank 1 joins, stages v1, and instance 0 commits.
        replacement = Process("rank", seed.gossip_address, trusted, "inst0", "2", "1", "1")
        procs.append(replacement)
        replacement.wait_for("staging")
        replacement.tell("go")
        for r, p in ((0, ranks[(0, 0)]), (1, replacement)):
            done = p.wait_for("committed")
            assert done["slices"] == group_worker.digest(group_worker.tensor_parallel_slices(expected, r, 2))
    finally:
        for p in procs:
            p.stop()
        seed.close()
