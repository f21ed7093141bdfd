"""What a queue position costs: ``Core.position_of`` against the walk it replaces.

    python benchmarks/positions.py [--sizes 1000,10000,100000]

1. A node with one GPU, held by one task; behind it ``n`` waiting tasks of four classes (two
   priorities, whole and half GPUs) and a gang every 100 tasks; every 10th task cancelled, so
   the counts have holes in them.
2. ``position_of``: CPU microseconds per query, over random waiting tasks (their answers are
   checked against the walk's); and the first query after the submissions, which takes the
   arrivals into the classes' trees (arrivals only append: the count is made when asked).
3. The walk: ``Core.queue_position()`` with no limit, the classes' FIFOs merged in rank order
   to the end, which was the only way to the position of a task past a snapshot's first rows
   (``in_order`` up to it: the last task of the queue costs the whole walk).
4. The ratio of the two, per size: the query stays near flat in ``n`` (O(classes x log n)),
   the walk grows with it.

Measured on a shared two-core machine, plain Python (JUPYTER_SCHED_PURE=1), CPU time:

    submitted  waiting   jobs  first query  position_of  walk (old)  walk/query
        1,000      910    900      0.18 ms       5.6 us      2.2 ms        402x
       10,000    9,100  9,000      0.92 ms       5.3 us     15.1 ms      2,860x
      100,000   91,000 90,000     13.64 ms      19.2 us    258.0 ms     13,430x

(five classes; the query's growth past 10,000 is the memory the counts are spread over, not
more steps: log2 of the class size, twice, per class.) What keeping the counts costs the
cycle: ``benchmarks/core_throughput.py`` (docs/architecture.md, "What views read is kept").
"""

from __future__ import annotations

import argparse
import random
import time

from jupyter_sched.core import events as ev
from jupyter_sched.core import state
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec

U = SCALE
WHOLE = Demand.of({"GPU": U, "CPU": U})
HALF = Demand.of({"GPU": U // 2, "CPU": U})


def queued_core(n: int) -> tuple[Core, list[str]]:
    """A core with ``n`` tasks submitted behind a running one, every 10th cancelled; and the
    ids of the tasks that wait."""
    core = Core()
    core.handle(ev.NodeAdded("n", NodeResources({"CPU": 64 * U, "GPU": U})))
    core.handle(ev.Submit((TaskSpec("run", WHOLE),)))
    subs: list[ev.Submit] = []
    ids: list[str] = []
    for i in range(n):
        if i % 100 == 99:
            members = tuple(TaskSpec(f"g{i}.{r}", HALF, priority=i % 2) for r in range(2))
            subs.append(ev.Submit(members, GangSpec(f"g{i}", 2)))
            ids += [m.id for m in members]
        else:
            subs.append(ev.Submit((TaskSpec(f"t{i}", WHOLE if i % 3 else HALF,
                                            priority=(i // 7) % 2),)))
            ids.append(f"t{i}")
    core.handle(*subs)
    core.handle(*(ev.Cancel(f"t{i}") for i in range(5, n, 10)))
    return core, [t for t in ids if core.tasks[t].state == "queued"]


def measure(n: int, queries: int = 2_000, seed: int = 0) -> dict[str, float]:
    core, waiting = queued_core(n)
    rng = random.Random(seed)
    asked = [rng.choice(waiting) for _ in range(queries)]
    start = time.process_time()
    core.position_of(waiting[-1])  # the first count takes in the arrivals since the last
    first = time.process_time() - start
    start = time.process_time()
    got = [core.position_of(t) for t in asked]
    per_query = (time.process_time() - start) / queries
    walks = max(1, min(20, 200_000 // n))
    start = time.process_time()
    for _ in range(walks):
        positions = core.queue_position()
    per_walk = (time.process_time() - start) / walks
    assert got == [positions[t] for t in asked], "position_of disagrees with the walk"
    assert core.position_of(waiting[-1]) is not None
    return {"n": n, "waiting": core.counts["queued"], "first": first, "query": per_query,
            "walk": per_walk, "deepest": max(positions.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="tasks submitted behind the running one, comma-separated")
    args = parser.parse_args()
    print("core:", "plain Python (built with JUPYTER_SCHED_PURE=1)"
          if state.__file__.endswith(".py") else "compiled with mypyc")
    print(f"{'submitted':>10} {'waiting':>8} {'jobs':>8} {'first query':>12} "
          f"{'position_of':>12} {'walk (old)':>11} {'walk/query':>11}")
    for n in (int(s) for s in args.sizes.split(",")):
        r = measure(n)
        print(f"{r['n']:>10,} {r['waiting']:>8,} {r['deepest']:>8,} "
              f"{r['first'] * 1e3:>9.2f} ms {r['query'] * 1e6:>9.1f} us "
              f"{r['walk'] * 1e3:>8.1f} ms {r['walk'] / r['query']:>10,.0f}x")


if __name__ == "__main__":
    main()
