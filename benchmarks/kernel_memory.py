"""Memory of 100,000 queued tasks in the kernel, through the whole scheduler.

    python benchmarks/kernel_memory.py [--tasks N]

A ``Scheduler`` with one declared GPU, held by one task; then ``map`` queues N more that each
need the whole GPU, so they all wait. Measured: the process's resident memory growth and the
Python allocations (tracemalloc) for the queued tasks, their handles, records and core state.
The peer, measured in the same run: the same N calls queued on a one-thread
``concurrent.futures.ThreadPoolExecutor`` whose thread is busy.

Goal (docs/architecture.md, DESIGN section 8): 100,000 queued tasks under 200 MB.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import psutil

from jupyter_sched.runtime.scheduler import Scheduler


def noop(i: int) -> int:
    return i


def measure(queue_them, count: int, trace: bool) -> float:
    """MB that ``queue_them(count)`` keeps: Python allocations (``trace``: tracemalloc, which
    itself costs memory) or the growth of the resident set (no tracing)."""
    proc = psutil.Process()
    gc.collect()
    if trace:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    else:
        base = proc.memory_info().rss
    keep = queue_them(count)
    gc.collect()
    if trace:
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    else:
        used = proc.memory_info().rss - base
    del keep
    return used / 2**20


def pool_run(count: int, trace: bool) -> float:
    gate = threading.Event()
    pool = ThreadPoolExecutor(1)
    pool.submit(gate.wait, 120)
    used = measure(lambda n: [pool.submit(noop, i) for i in range(n)], count, trace)
    gate.set()
    pool.shutdown(cancel_futures=True)
    return used


def scheduler_run(count: int, trace: bool) -> tuple[float, int]:
    gate = threading.Event()
    sched = Scheduler(local_resources="GPU=1").start()
    sched.submit(gate.wait, 120, resources={"GPU": 1})

    def queue_them(n: int):
        handles = sched.map(noop, range(n), resources={"GPU": 1})
        deadline = time.monotonic() + 60
        while sched.snapshot(fresh=True).counts["queued"] < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return handles

    used = measure(queue_them, count, trace)
    queued = sched.snapshot(fresh=True).counts["queued"]
    sched.cancel_all()
    gate.set()
    sched.shutdown()
    return used, queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    args = parser.parse_args()
    n = args.tasks
    rss, queued = scheduler_run(n, trace=False)  # first, before anything else grew the heap
    traced, _ = scheduler_run(n, trace=True)
    peer_traced = pool_run(n, trace=True)

    print(f"{n:,} queued tasks ({queued:,} seen queued)")
    print(f"  scheduler:          RSS +{rss:6.1f} MB; Python allocations {traced:6.1f} MB "
          f"({traced * 2**20 / n:,.0f} B a task)")
    print(f"  ThreadPoolExecutor: Python allocations {peer_traced:6.1f} MB "
          f"({peer_traced * 2**20 / n:,.0f} B a task)")
    print(f"  ratio (allocations): {traced / peer_traced:.2f}x the bare pool's futures")
    scaled = rss * 100_000 / n
    print(f"  goal: 100,000 queued under 200 MB of RSS -> {scaled:.0f} MB "
          f"({'met' if scaled < 200 else 'NOT met'})")


if __name__ == "__main__":
    main()
