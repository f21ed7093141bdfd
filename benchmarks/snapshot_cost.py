"""What a snapshot of the core costs with much work waiting.

    python benchmarks/snapshot_cost.py [--queued N]

A one-node cluster kept full by one task, 100,000 tasks queued behind it (the mix of
``core_throughput``'s shapes, in two queues, a tenth of them at a higher priority, some in
4-member gangs) and 1,000 infeasible ones. Prints the CPU milliseconds of one
``views.snapshot.take(core)`` (200 rows, best of several), of ``Core.queue_position(200)`` and
of the full ``Core.queue_position()`` for comparison. Counts per state, the queues' waiting
jobs and the first rows' queue positions are kept or found without walking what waits, so a
snapshot costs a few milliseconds whatever the backlog.
"""

from __future__ import annotations

import argparse
import gc
import time

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec
from jupyter_sched.views.snapshot import take

U = SCALE
SHAPES = [Demand.of({"GPU": 2500, "CPU": U}), Demand.of({"GPU": 5000, "CPU": U}),
          Demand.of({"GPU": U, "CPU": 2 * U}), Demand.of({"CPU": 2 * U})]


def backlog(queued: int) -> Core:
    core = Core()
    core.handle(ev.NodeAdded("n0", NodeResources({"CPU": 64 * U, "GPU": 8 * U})),
                ev.QueueSet("a"), ev.QueueSet("b"),
                ev.Submit((TaskSpec("block", Demand.of({"GPU": 8 * U, "CPU": 64 * U})),)))
    events: list = []
    k = 0
    while k < queued:
        queue = "a" if k % 3 else "b"
        if k % 50 == 0:  # a gang of four
            specs = tuple(TaskSpec(f"q{k + j}", SHAPES[2], queue=queue) for j in range(4))
            events.append(ev.Submit(specs, GangSpec(f"g{k}", 4)))
            k += 4
            continue
        events.append(ev.Submit((TaskSpec(f"q{k}", SHAPES[k % len(SHAPES)], queue=queue,
                                          priority=1 if k % 10 == 0 else 0),)))
        k += 1
    big = Demand.of({"GPU": 16 * U})  # more than any node has: infeasible
    events += [ev.Submit((TaskSpec(f"x{i}", big),)) for i in range(1_000)]
    core.handle(*events)
    return core


def best_ms(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.disable()
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
        gc.enable()
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    core = backlog(args.queued)
    snap = take(core)
    assert snap.counts["queued"] >= args.queued and len(snap.waiting) == 200, snap.counts
    assert snap.counts["running"] == 1, snap.counts
    print(f"{snap.counts['queued']:,} queued, {snap.counts['infeasible']:,} infeasible, "
          f"{snap.counts['running']} running")
    print(f"snapshot (200 rows):          {best_ms(lambda: take(core), args.repeat):8.2f} ms")
    print(f"queue_position(200):          "
          f"{best_ms(lambda: core.queue_position(200), args.repeat):8.2f} ms")
    print(f"queue_position() of them all: "
          f"{best_ms(core.queue_position, max(1, args.repeat // 3)):8.2f} ms")


if __name__ == "__main__":
    main()
