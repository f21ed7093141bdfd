"""How fast and how right the waiting tasks' expected starts are.

    python benchmarks/expected_start.py [--seeds N]

**Cost.** ``model.forecast.expected_starts`` for 10,000 waiting tasks of four kinds (whole,
half and quarter GPUs, CPU only) behind four running ones on a node of 4 GPUs (CPU time, best
of 7; the goal is 50 ms), and what it adds to a snapshot of 200 rows (``views.snapshot.take``
with and without the kinds' times). Whether the model it uses (``model/allocation.py``) was
compiled is printed: it is in a wheel built with mypyc.

**Error.** A workload run on the real core with the project's simulator (``sim/``): one node
of 4 GPUs and 32 CPUs; tasks arrive at random (Poisson, about 1.2 times what the GPUs can
take, for two hours), a kind each: ``train`` (1 GPU, 600 s on average), ``finetune`` (0.5 GPU,
240 s), ``eval`` (0.25 GPU, 60 s), ``prep`` (4 CPUs, 30 s); each run's time is drawn from a
lognormal around its kind's mean (sigma 0.6). Every 10 minutes the waiting tasks' expected
starts are taken as a snapshot would take them, and compared, once the run is over, with when
each really started. Printed, as the median absolute error over all those tasks (and the
median true wait, for scale), for three sources of durations:

* ``learned``: each kind's time as the scheduler learns it (``Durations``: the mean of about
  the last ten of 30 past runs of the kind) - what a user sees;
* ``one mean``: the baseline known only from past runs without telling kinds apart: the mean
  of all past runs, whatever their kind;
* ``exact``: each task's true duration (what is left of the running ones' too): the forecast's
  own error, from placing as the core does not quite (its backfill, reservations, order).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from jupyter_sched.model import allocation as allocation_module
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.forecast import Durations, Holding, Place, Waiting, expected_starts
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import QUEUED
from jupyter_sched.sim import Simulation
from jupyter_sched.views.snapshot import take

KINDS = {  # kind -> (resources, mean seconds, share of arrivals)
    "train": ({"GPU": 1, "CPU": 1}, 600.0, 0.3),
    "finetune": ({"GPU": 0.5, "CPU": 1}, 240.0, 0.3),
    "eval": ({"GPU": 0.25, "CPU": 1}, 60.0, 0.3),
    "prep": ({"CPU": 4}, 30.0, 0.1),
}
SIGMA = 0.6
HOURS = 2.0
EVERY = 600.0
RATE = 1.2 * 4 / sum(m * r.get("GPU", 0) * w for r, m, w in KINDS.values())  # arrivals / s


def draw(rng: random.Random, mean: float) -> float:
    # a lognormal whose mean is ``mean``
    return rng.lognormvariate(0.0, SIGMA) * mean / (2.718281828459045 ** (SIGMA ** 2 / 2))


def one_run(seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    names, weights = list(KINDS), [w for _, _, w in KINDS.values()]
    learned, past = Durations(), []
    for kind in names:
        for _ in range(30):
            took = draw(rng, KINDS[kind][1])
            learned.learn(kind, took)
            past.append(took)
    one_mean = statistics.fmean(past)
    sim = Simulation(seed=seed)
    sim.add_node("n1", {"GPU": 4, "CPU": 32})
    at, tasks, kind_of, true = 0.0, {}, {}, {}
    while True:
        at += rng.expovariate(RATE)
        if at > HOURS * 3600:
            break
        kind = rng.choices(names, weights)[0]
        resources, mean, _ = KINDS[kind]
        took = draw(rng, mean)
        name = f"{kind}-{len(tasks)}"
        handle = sim.submit(duration=took, resources=resources, name=name, at=at)
        tasks[handle.id], kind_of[name], true[name] = handle, kind, took
    sources = {
        # (each simulated task has a name of its own, ``kind-i``: durations by it)
        "learned": {n: learned.get(k) for n, k in kind_of.items()},
        "one mean": dict.fromkeys(kind_of, one_mean),
        "exact": true,
    }
    guesses: dict[str, list[tuple[str, float, float]]] = {s: [] for s in sources}
    unknown = 0
    checkpoint = EVERY
    while checkpoint <= HOURS * 3600:
        sim.run(until=checkpoint)
        for source, durations in sources.items():
            snap = take(sim.core, max_rows=500, durations=durations, now=checkpoint)
            for view in snap.waiting:
                if view.state != QUEUED:
                    continue
                if view.expected_start is None:
                    unknown += 1
                    continue
                guesses[source].append((view.id, checkpoint, checkpoint + view.expected_start))
        checkpoint += EVERY
    sim.run()
    errors: dict[str, list[float]] = {s: [] for s in sources}
    for source, found in guesses.items():
        for task_id, _, guess in found:
            start = tasks[task_id].start
            if start is not None:
                errors[source].append(abs(guess - start))
    errors["wait"] = [tasks[i].start - seen for i, seen, _ in guesses["learned"]
                      if tasks[i].start is not None]
    errors["unknown"] = [float(unknown)]
    return errors


def error_table(seeds: int) -> None:
    pooled: dict[str, list[float]] = {}
    for seed in range(seeds):
        for source, errors in one_run(seed).items():
            pooled.setdefault(source, []).extend(errors)
    unknown = int(sum(pooled.pop("unknown")))
    wait = statistics.median(pooled.pop("wait"))
    print(f"error of the expected start, {seeds} runs of {HOURS:g} h, looked at every "
          f"{EVERY / 60:g} min ({len(pooled['learned'])} waiting tasks looked at; "
          f"{unknown} unknown; the median true wait left {wait:.0f} s):")
    for source, errors in pooled.items():
        print(f"  {source:9}  median |error| {statistics.median(errors):7.1f} s   "
              f"mean {statistics.fmean(errors):7.1f} s   90th percentile "
              f"{statistics.quantiles(errors, n=10)[-1]:7.1f} s")


def cost() -> None:
    res = NodeResources({"GPU": 4 * SCALE, "CPU": 64 * SCALE})
    running = []
    for left in (100.0, 200.0, 300.0, 400.0):
        allocation = res.acquire(Demand.of({"GPU": SCALE, "CPU": SCALE}))
        assert allocation is not None
        running.append(Holding(0, allocation, left))
    rng = random.Random(0)
    names, weights = list(KINDS), [w for _, _, w in KINDS.values()]
    waiting = []
    for _ in range(10_000):
        resources, mean, _ = KINDS[rng.choices(names, weights)[0]]
        units = {k: int(v * SCALE) for k, v in resources.items()}
        waiting.append(Waiting(Demand.of(units), draw(rng, mean)))
    best = float("inf")
    gc.disable()
    try:
        for _ in range(7):  # (CPU time: what other work on the machine takes is not counted)
            t = time.process_time()
            found = expected_starts([Place(res)], running, waiting)
            best = min(best, time.process_time() - t)
    finally:
        gc.enable()
    last = found[-1][0] or 0.0
    compiled = not allocation_module.__file__.endswith(".py")
    print(f"expected starts of 10,000 waiting tasks: {best * 1000:.1f} ms (goal: <= 50 ms; "
          f"model {'compiled' if compiled else 'interpreted'}); "
          f"the last expected in {last / 3600:.1f} h")
    sim = Simulation()
    sim.add_node("n1", {"GPU": 4, "CPU": 32})
    for i in range(2000):
        kind = names[i % len(names)]
        sim.submit(duration=KINDS[kind][1], resources=KINDS[kind][0], name=kind)
    sim.run(until=1.0)
    durations = Durations()
    for kind, (_, mean, _) in KINDS.items():
        durations.learn(kind, mean)
    times = {}
    for label, given in (("without", None), ("with", durations)):
        times[label] = min(_timed(lambda g=given: take(sim.core, durations=g, now=1.0))
                           for _ in range(20))
    print(f"a snapshot of 200 rows with 2,000 waiting: {times['without'] * 1000:.2f} ms "
          f"without expected starts, {times['with'] * 1000:.2f} ms with")


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    cost()
    error_table(args.seeds)


if __name__ == "__main__":
    main()
