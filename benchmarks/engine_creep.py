"""Per-task cost on engines as tasks pass through: the first 2,000 against 100,000 after 100,000.

    python benchmarks/engine_creep.py [--first 2000] [--through 100000] [--last 100000]

One scheduler, a cluster of 2 local engines, tiny tasks, one ``submit`` each, all of a batch
submitted then waited, batches in a row: ``--first``, then batches up to ``--through`` tasks
passed, then ``--last`` tasks. Each batch's rate (wall), and the scheduler process's CPU time a
task (its runtime thread and the submitting thread; the engines are other processes). The goal
(issue 44): the last batch at >= 0.9x the rate of the first. Beside it, in the same run, raw
ipyparallel direct views (round robin over the same two engines) before the first batch and
after the last: how much of a change is the machine's. Memory: Python's allocations
(tracemalloc) held after a further batch of ``--first`` is waited and its handles dropped,
made during that batch (the scheduler keeps the last 1,000 ended tasks' records: what a task
leaves must be given back as later ones end).

One run on a shared 2-core machine (load 5.7-8.5; benchmarks/results/design.md, "Per-task cost
as tasks pass through"): 730/s for the first 2,000, 286/s for 100,000 after 100,000 (0.39x).
The full collections held while many are in flight (runtime/collector.py) helped a little; the
cause was elsewhere (design.md, "A backlog sent ahead whatever its head holds"): a backlog that
waited long enough for its head to hold a reservation was never sent ahead, so its tasks went
one request each, round trip by round trip, at 380-480/s. Since, on a quiet machine: 1,418/s
for the first 2,000, 2,858, 2,476 and 2,182/s for the batches up to 100,000, then 2,252/s for
100,000 after 100,000 (1.59x; CPU 369 against 576 us a task); raw direct views 512/s before
and 523/s after.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                         os.environ.get("PYTHONPATH")]))

from jupyter_sched.runtime.scheduler import Scheduler  # noqa: E402

GOAL = 0.9  # the last batch's rate against the first's


def tiny(x):
    return x


def batch(sched, n: int) -> tuple[float, float]:
    """Tasks/s (wall) and CPU µs a task of one batch of ``n``."""
    c0, t0 = time.process_time(), time.perf_counter()
    handles = [sched.submit(tiny, i, target="engines") for i in range(n)]
    sched.wait(handles)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert all(h.result() == i for i, h in enumerate(handles[:100]))
    return n / wall, cpu / n * 1e6


def raw(executor, n: int) -> float:
    """Tasks/s of raw direct views, round robin over the engines, all submitted then waited."""
    client = executor.client
    views = [client[i] for i in client.ids[:2]]
    t0 = time.perf_counter()
    results = [views[i % len(views)].apply_async(tiny, i) for i in range(n)]
    for r in results:
        r.get()
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=2_000)
    parser.add_argument("--through", type=int, default=100_000)
    parser.add_argument("--last", type=int, default=100_000)
    args = parser.parse_args(argv)
    sched = Scheduler()
    try:
        executor = sched.start_cluster(engines=2)
        sched.wait([sched.submit(tiny, i, target="engines") for i in range(200)])  # warm
        raw_before = raw(executor, args.first)
        print(f"{'passed before':>14} {'batch':>8} {'tasks/s':>9} {'CPU us/task':>12}")
        rows = []
        passed = 0
        sizes = [args.first]
        while passed + sum(sizes) < args.through:
            sizes.append(min(max(sizes[-1] * 4, 8_000), args.through - sum(sizes)))
        for n in sizes:
            rate, cpu = batch(sched, n)
            rows.append((passed, n, rate, cpu))
            print(f"{passed:>14,} {n:>8,} {rate:>9,.0f} {cpu:>12.1f}", flush=True)
            passed += n
        rate, cpu = batch(sched, args.last)
        print(f"{passed:>14,} {args.last:>8,} {rate:>9,.0f} {cpu:>12.1f}", flush=True)
        first_rate = rows[0][2]
        gc.collect()
        tracemalloc.start()  # (tracing slows every allocation: on only now, after the timing)
        sched.wait([sched.submit(tiny, i, target="engines") for i in range(args.first)])
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        raw_after = raw(executor, args.first)
        print(f"raw ipyparallel direct views, {args.first:,} tasks: {raw_before:,.0f}/s before, "
              f"{raw_after:,.0f}/s after (the machine's own drift: "
              f"{raw_after / raw_before:.2f}x)")
        ratio = rate / first_rate
        met = "met" if ratio >= GOAL else "not met"
        print(f"{args.last:,} after {passed:,}: {rate:,.0f}/s against {first_rate:,.0f}/s for "
              f"the first {args.first:,}: {ratio:.2f}x (goal >= {GOAL}x: {met}); CPU "
              f"{cpu:.0f} against {rows[0][3]:.0f} us a task")
        print(f"Python memory made by a batch of {args.first:,} more and still held once its "
              f"handles are dropped: {held / 2**20:.2f} MB ({held / args.first:,.0f} bytes a "
              f"task; the last 1,000 ended tasks' records are kept)")
    finally:
        sched.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
