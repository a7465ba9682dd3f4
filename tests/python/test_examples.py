"""The Python examples as a multi-process test: one trainer process steps a
torch.nn.Transformer and publishes every step in place; three worker
processes load every version into their own parameters, and their outputs
on a fixed batch equal the trainer's bit for bit."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")
STEPS = 3
WORKERS = 3


def test_three_workers_load_every_step_and_match_the_trainer_bit_for_bit():
    key = os.urandom(32).hex()
    env = dict(os.environ)
    trainer = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "trainer.py"), "--swarm-key", key,
                                "--steps", str(STEPS), "--replicas", str(WORKERS), "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    workers = []
    try:
        hello = json.loads(trainer.stdout.readline())
        for i in range(WORKERS):
            workers.append(subprocess.Popen(
                [sys.executable, os.path.join(EXAMPLES, "worker.py"), "--swarm-key", key, "--seed", hello["gossip"],
                 "--trust", hello["id"], "--versions", str(STEPS), "--host", f"worker{i}", "--timeout", "60",
                 "--linger", "3"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env))
        out, _ = trainer.communicate(timeout=240)
        assert trainer.returncode == 0
        published = [json.loads(line) for line in out.splitlines() if line.strip()]
        want = [(p["version"], p["digest"]) for p in published]
        assert [v for v, _ in want] == list(range(1, STEPS + 1))
        assert len({d for _, d in want}) == STEPS, "the steps did not change the model"
        for w in workers:
            out, _ = w.communicate(timeout=120)
            assert w.returncode == 0
            got = [(line["version"], line["digest"]) for line in map(json.loads, out.splitlines()) if line]
            assert got == want
    finally:
        for p in [trainer, *workers]:
            if p.poll() is None:
                p.kill()
                p.wait()
