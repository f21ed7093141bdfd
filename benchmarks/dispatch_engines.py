"""Engine dispatch: the scheduler against raw ipyparallel, on the same engines, in the same run.

DESIGN.md section 8:

* latency: a no-op task through the scheduler to an engine, against ``view.apply_sync`` on the
  engine the scheduler's calls settle on (goal: at most 1.1x, medians of at least 200 calls,
  taken in alternating rounds of ten calls, each path first in every other round);
* throughput: tiny tasks through the scheduler to two engines, one ``submit`` per task (not
  ``map``, which sends items in chunks), against raw direct views on the same two engines, all
  submitted at once (goal: at least 1.0x, the median ratio of six alternating rounds);
* fractional makespan: 16 tasks x 0.25 GPU x 1 s on two declared GPUs with four pinned engines
  per GPU (bound 2.0 s, goal at most 2.1 s: within 5%).

Run from the repository root::

    python benchmarks/dispatch_engines.py            # all three
    python benchmarks/dispatch_engines.py --calls 300 --tasks 2000 --skip-makespan
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# engines inherit the environment: let them import this checkout too
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                         os.environ.get("PYTHONPATH")]))

from jupyter_sched.runtime.scheduler import Scheduler  # noqa: E402


def noop():
    return None


def tiny(x):
    return x


def nap(seconds):
    import time

    time.sleep(seconds)
    return seconds


def latency(sched, executor, calls: int, per_round: int = 10) -> tuple[float, float]:
    """Medians (seconds) of raw ``apply_sync`` and of submit-and-wait, on the same engine, in
    short alternating rounds (each path goes first in every other round, as in ``peers.py``),
    so that the load of a shared machine, which changes by the second, weighs on both alike."""
    client = executor.client
    for _ in range(20):  # warm the scheduler's path; raw calls go to the engine it settled on
        handle = sched.submit(noop, target="engines")
        handle.result()
    view = client[next(e.eid for e in executor.engines.values() if e.slot == handle.slot)]
    for _ in range(20):
        view.apply_sync(noop)
    raw, ours = [], []
    paths = [(raw, lambda: view.apply_sync(noop)),
             (ours, lambda: sched.submit(noop, target="engines").result())]
    for r in range(max(1, calls // per_round)):
        for samples, call in paths if r % 2 == 0 else paths[::-1]:
            for _ in range(per_round):
                t = time.perf_counter()
                call()
                samples.append(time.perf_counter() - t)
    return statistics.median(raw), statistics.median(ours)


def throughput(sched, executor, tasks: int, rounds: int = 6) -> tuple[float, float, float]:
    """Tiny tasks/s of raw direct views (round robin) and of the scheduler on two engines, in
    alternating rounds (each path goes first in every other round, as in ``peers.py``): the
    median rate of each, and the median of the rounds' ratios."""
    client = executor.client
    views = [client[e] for e in sorted(executor.engines)[:2]]

    def raw() -> None:
        results = [views[i % 2].apply_async(tiny, i) for i in range(tasks)]
        assert [ar.get() for ar in results] == list(range(tasks))

    def ours() -> None:
        # one task per item, as the raw views get (``map`` would send the items in chunks)
        handles = [sched.submit(tiny, i, target="engines") for i in range(tasks)]
        sched.wait(handles)
        assert [h.result() for h in handles] == list(range(tasks))

    rates: dict[str, list[float]] = {"raw": [], "ours": []}
    paths = [("raw", raw), ("ours", ours)]
    for r in range(rounds):
        for key, run in paths if r % 2 == 0 else paths[::-1]:
            t = time.perf_counter()
            run()
            rates[key].append(tasks / (time.perf_counter() - t))
    ratios = [o / w for o, w in zip(rates["ours"], rates["raw"], strict=True)]
    return (statistics.median(rates["raw"]), statistics.median(rates["ours"]),
            statistics.median(ratios))


def makespan(tasks: int = 16, share: float = 0.25, seconds: float = 1.0,
             rounds: int = 3) -> list[float]:
    """Seconds from submitting the tasks to the last one ending, per round (same engines)."""
    sched = Scheduler(local_resources="GPU=2")
    try:
        sched.start_cluster(engines_per_gpu=4)
        warm = [sched.submit(nap, 0.0, resources={"GPU": share}, target="engines")
                for _ in range(8)]
        sched.wait(warm)
        spans = []
        for _ in range(rounds):
            t = time.perf_counter()
            handles = [sched.submit(nap, seconds, resources={"GPU": share}, target="engines")
                       for _ in range(tasks)]
            sched.wait(handles)
            spans.append(time.perf_counter() - t)
            failed = [h for h in handles if h.state != "done"]
            if failed:
                raise RuntimeError(f"{len(failed)} tasks did not finish: {failed[0].reason}")
        return spans
    finally:
        sched.shutdown()


def dispatch(calls: int, tasks: int) -> None:
    sched = Scheduler()
    try:
        t = time.perf_counter()
        executor = sched.start_cluster(engines=2)
        print(f"cluster of 2 engines ready in {time.perf_counter() - t:.1f}s")
        raw, ours = latency(sched, executor, calls)
        print(f"latency, median of {calls}: raw apply_sync {raw * 1e3:.2f} ms, "
              f"scheduler {ours * 1e3:.2f} ms, ratio {ours / raw:.2f}x (goal <= 1.1x)")
        raw_rate, our_rate, ratio = throughput(sched, executor, tasks)
        print(f"throughput, {tasks} tiny tasks on 2 engines, medians of 6 rounds: raw direct "
              f"views {raw_rate:.0f}/s, scheduler {our_rate:.0f}/s, median ratio {ratio:.2f}x "
              f"(goal >= 1.0x)")
    finally:
        sched.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="latency calls per path")
    parser.add_argument("--tasks", type=int, default=1000, help="throughput tasks per path")
    parser.add_argument("--skip-makespan", action="store_true")
    parser.add_argument("--only-makespan", action="store_true")
    parser.add_argument("--rounds", type=int, default=5, help="makespan rounds")
    args = parser.parse_args()
    if not args.only_makespan:
        dispatch(args.calls, args.tasks)
    if not args.skip_makespan:
        spans = makespan(rounds=args.rounds)
        print(f"makespan, 16 x 0.25 GPU x 1 s on 2 GPUs, 4 pinned engines per GPU: median "
              f"{statistics.median(spans):.2f} s of {', '.join(f'{s:.2f}' for s in spans)} "
              f"(bound 2.0 s, goal <= 2.1 s)")


if __name__ == "__main__":
    main()
