"""Same events in the same order, same instructions: also in another process, with another hash
seed (the order of a set of strings must never decide anything)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = """
import random
from jupyter_sched.sim import Simulation

rng = random.Random(11)
sim = Simulation(seed=5, preemption=True, reservation_after=0.5, stop_delay=(0.0, 1.0),
                 policy="{policy}")
for i in range(4):
    sim.add_node(f"n{{i}}", {{"CPU": 8, "GPU": 2}}, labels={{"gpu.model": "AB"[i % 2]}},
                 gpu_memory="40GiB")
sim.add_node("pinned", {{"GPU": 2}}, engines_per_gpu=2, gpu_memory="16GiB")
sim.add_node("floating", {{"GPU": 2}}, engines=3)
sim.add_node("late", {{"GPU": 4, "CPU": 16}}, at=4.0)
sim.add_queue("a", weight=2, capability={{"GPU": 4}})
sim.add_queue("b", guarantee={{"GPU": 1}})
made = []
for k in range(80):
    gang = rng.choice([None, None, None, ("g%d" % k, 2), ("h%d" % k, 3, 2)])
    memory = rng.choice([None, None, "8GiB"])
    out = sim.submit(
        duration=rng.uniform(0.2, 4.0), at=rng.uniform(0.0, 6.0),
        resources={{"CPU": rng.choice([0, 1, 2])}} if memory else
        {{"GPU": rng.choice([0.25, 0.5, 1, 2]), "CPU": rng.choice([0, 1])}},
        gpu_memory=memory, priority=rng.randrange(4), gang=gang,
        strategy=rng.choice(["pack", "spread", "strict-pack", "strict-spread"]),
        queue=rng.choice(["default", "a", "b"]), preemptible=rng.random() < 0.5,
        time_limit=rng.choice([None, 1.0, 3.0]), retries=rng.randrange(3),
        fails=rng.choice([0, 0, 1]), target=rng.choice(["any", "any", "engines"]))
    made.extend(out if isinstance(out, list) else [out])
for task in rng.sample(made, 8):
    sim.cancel(task, at=max(task.submitted, rng.uniform(0.0, 8.0)))
sim.remove_node("n1", at=3.0)
sim.run()
for when, instruction in sim.trace:
    print(f"{{when:.6f}}", repr(instruction))
print("stale", sim.core.stale_reports, "refused", sim.refused)
print(sorted((t.id, t.state) for t in made))
"""


def _play(policy: str, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", SCENARIO.format(policy=policy)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_same_events_give_the_same_instructions_in_another_process():
    for policy in ("binpack", "spread"):
        first = _play(policy, "0")
        assert first.count("Start(") > 50 and "Preempt(" in first
        assert _play(policy, "4242") == first
