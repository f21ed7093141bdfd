"""Local dispatch: how fast a queued task starts in a kernel thread, and fractional makespan.

    python benchmarks/dispatch_local.py [--tasks 1000] [--no-leases] [--json]

1. Submit-to-start latency: no-op tasks submitted one after the other on a free declared GPU
   (``GPU=0.5`` of two), from the ``submit`` call to the first line of the task. Compared with
   the peer measured in the same run: ``concurrent.futures.ThreadPoolExecutor.submit`` to the
   first line of the function (a warm pool, same sequence). Goal: median <= 1 ms.
2. Makespan: 16 tasks x 0.25 GPU x 1 s (sleeping) on 2 declared GPUs, run locally: eight run
   at a time, so the bound is 2.0 s. Goal: <= 2.2 s.

Every start on a GPU takes a lease from a host ledger (a fresh file in a temporary directory)
and every end gives it back, as in a kernel; ``--no-leases`` measures without them
(``Scheduler.host_leases = False``).

Figures go to stdout, one line each (``--json`` for one JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_sched.runtime.scheduler import Scheduler

WARMUP = 50


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1e3,
        "n": len(ordered),
    }


def scheduler_latency(sched: Scheduler, n: int) -> dict[str, float]:
    started: list[float] = []
    perf = time.perf_counter

    def noop() -> None:
        started.append(perf())

    samples = []
    for i in range(n + WARMUP):
        t0 = perf()
        handle = sched.submit(noop, resources={"GPU": 0.5})
        handle.result()
        if i >= WARMUP:
            samples.append(started[-1] - t0)
    return _stats(samples)


def threadpool_latency(n: int) -> dict[str, float]:
    started: list[float] = []
    perf = time.perf_counter

    def noop() -> None:
        started.append(perf())

    samples = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        for i in range(n + WARMUP):
            t0 = perf()
            pool.submit(noop).result()
            if i >= WARMUP:
                samples.append(started[-1] - t0)
    return _stats(samples)


def makespan(sched: Scheduler, tasks: int = 16, share: float = 0.25,
             seconds: float = 1.0) -> dict[str, float]:
    t0 = time.perf_counter()
    handles = [sched.submit(time.sleep, seconds, resources={"GPU": share}) for _ in range(tasks)]
    sched.wait(handles, timeout=60)
    end = time.perf_counter()
    gpus = len(sched.snapshot(fresh=True).nodes[0].devices)
    bound = tasks * share * seconds / gpus
    return {"makespan_s": end - t0, "bound_s": bound, "tasks": tasks, "gpus": gpus}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="latency samples (>= 500)")
    parser.add_argument("--no-leases", action="store_true",
                        help="take no host leases (Scheduler.host_leases = False)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    ledger = Path(tempfile.mkdtemp(prefix="dispatch-leases-")) / "leases.db"
    sched = Scheduler(local_resources="GPU=2", host_leases=not args.no_leases,
                      ledger_path=str(ledger))
    sched.start()
    try:
        ours = scheduler_latency(sched, args.tasks)
        peer = threadpool_latency(args.tasks)
        span = makespan(sched)
    finally:
        sched.shutdown()
    result = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "host_leases": not args.no_leases,
        "scheduler_submit_to_start": ours,
        "threadpool_submit_to_start": peer,
        "median_ratio": ours["median_ms"] / peer["median_ms"],
        "makespan": span,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return result
    print(f"submit-to-start, scheduler:   median {ours['median_ms']:.3f} ms, "
          f"p90 {ours['p90_ms']:.3f} ms  ({ours['n']} no-op tasks on GPU=0.5, host leases "
          f"{'off' if args.no_leases else 'on'})  goal <= 1 ms")
    print(f"submit-to-start, ThreadPool:  median {peer['median_ms']:.3f} ms, "
          f"p90 {peer['p90_ms']:.3f} ms")
    print(f"ratio (scheduler / ThreadPool median): {result['median_ratio']:.2f}")
    print(f"makespan 16 x 0.25 GPU x 1 s on 2 GPUs: {span['makespan_s']:.3f} s "
          f"(bound {span['bound_s']:.1f} s, goal <= 2.2 s)")
    return result


if __name__ == "__main__":
    main()
