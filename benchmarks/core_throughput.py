"""How fast the scheduling core places work, and how much memory waiting work costs.

    python benchmarks/core_throughput.py [--quick]

1. Clusters of 100, 1,000 and 10,000 nodes, 8 GPUs and 64 CPUs each.
2. A mixed workload sized to fill about 90% of the GPUs: 40% quarter/half-GPU tasks, 25% whole
   GPUs (1 or 2), 20% CPU-only, 15% members of 4-member gangs (one GPU each).
3. Placements per second = tasks started / CPU seconds spent in ``Core.handle`` for the batch that
   submits them; then a steady state: 10% of the running tasks finish and the freed room is
   filled from a waiting backlog, timed the same way.
4. Steady state, work arriving over time: on the filled cluster, each call to ``Core.handle``
   brings one to three ``Finished`` of random running tasks and as many new tasks of the same
   mix, each task or gang one ``Submit`` (held back while running and waiting work passes 90% of
   the GPUs), so
   the cluster stays about 90% busy, for 20,000 and 50,000 (100,000 without ``--quick``) tasks
   passed through. Placements per second = tasks started / seconds inside ``Core.handle``, CPU
   time and wall time, per tenth of the run: the first and last tenth show whether cost grows
   with the work that passed through. Ended tasks are forgotten as the shell does (it keeps the
   last 1,000); the garbage collector is off while timing (it runs between calls, untimed), and
   on in a second run ("gc on").
   A waiting backlog must not slow a cycle down: the steady state is run again with 1 and with
   10,000 gangs that wait all along (each a whole node's GPUs twice, while one GPU of every node
   stays taken; gangs of one shape are one class, tried once a cycle): the two rates match.
5. The memory of 100,000 queued tasks (tracemalloc) on a cluster that is full.

Goals (docs/architecture.md): >= 50,000 placements/s at 1,000 nodes in the steady state (the
line "steady state at 1,000 nodes" prints it against the goal; the batch is printed beside it,
for comparison, not as the goal); cost per placement grows
sub-linearly with nodes and stays flat in the length of the queue and in the work passed
through; < 200 MB for 100,000 queued tasks. What a snapshot costs with 100,000 queued:
``benchmarks/snapshot_cost.py``.

Measured on a shared two-core machine (CPU time, runs alternating with the previous code):
steady state at 1,000 nodes went from 19,000-26,000 to 23,000-29,000 placements/s, at 10,000
nodes from 15,600 to 23,300; with 2,000 gangs waiting all along, from 64 to about 12,000
placements/s. Then, with ``Start`` and ``Allocation`` plain slotted classes and leaner hot paths,
the steady state at 1,000 nodes (20,000 through, four alternating pairs) went from 20,900-25,200
to 26,500-27,300 placements/s, and the instructions per placement (cachegrind, same events, two
runs each) from 195,000-199,000 to 172,500-174,000; at 10,000 nodes from 20,200-22,500 to
21,700-22,800 (within the machine's noise). Batch into an empty cluster: 62,000-70,000 at
1,000 and 10,000 nodes. Last tenth / first tenth: 0.7-1.5 from run to run, old and new alike,
with no trend in the work passed through; with ended tasks never forgotten and the garbage
collector on it is about 0.5, before and after (the collector walks the growing heap). The
goal of 50,000 in the steady state is not reached: its cost is spread over what each task
needs once (submit, admit, place with its ``Start``, finish, and a node index re-filing at
each start and each end), not over work repeated per cycle. Then, with arrivals placed at once
when nothing waits (not filed in class FIFOs and taken out again, nor counted as waiting work
and taken out of it), an allocation's amounts shared with its demand and a node not re-filed
when no key moved: at 1,000 nodes (20,000 through, six alternating pairs, CPU time) from
27,683 / 27,510 / 30,367 / 28,234 / 28,728 / 28,455 to 32,594 / 33,240 / 30,911 / 32,643 /
30,935 / 33,051 placements/s (means 28,500 and 32,200, +13%); instructions per placement
(cachegrind, a recorded stream of 6,003 placements replayed into ``handle`` alone, two hash
seeds) from 184,300 / 184,100 to 167,400 / 167,400 (-9%); at 10,000 nodes (three pairs) from
21,900 / 24,400 / 24,600 to 26,700 / 27,300 / 27,600; the batch (128,600 to 127,200
instructions per placement), the refill and the backlog of 10,000 gangs (which takes the usual
path) unchanged within the noise. Still short of 50,000: what is left is spread over some 55
calls a task (admit, place, start, finish and two re-filings, each through the transition
table and the queue and node books), none of them above a seventh of the time. With gangs
back on allocate's path (arrivals placed at once are single tasks only), four seeds at 1,000
nodes gave 30,460 / 30,864 / 31,086 / 31,085 placements/s, last tenth against first 0.93-1.10.
Then, with gangs that start whole placed at once too, a gang's statement re-filing each node
once instead of once per member, and releases that give back exactly what was taken when the
node owes nothing, the instructions per placement (cachegrind, a recorded stream of 10,027
placements at 1,000 nodes replayed into ``handle`` alone) went from 168,400 to 157,500
(-6.5%); eight alternating rounds of that code on another, slower machine (20,000 through, CPU
time) gave a median of 29,465 placements/s against 25,841 before (x1.14; single rounds
20,900-29,300 before and 25,000-36,600 after: the machine's noise is larger than the change).
Fewer calls on a task's finish took it to 155,400, and the transition table looked up by row
to 154,600; a success's release and a queue's end of use then went back through their shared
helpers (one copy of each, for 0.5%): 155,400 (-7.7% in all). Still short of 50,000.
Then the core was compiled with mypyc (docs/architecture.md, "A compiled core"), and every
event's fields checked for their types before a handler reads one (core/intake.py, +2.8% as
plain Python): the same recorded stream costs 159,800 instructions per placement as plain
Python and 113,300 compiled (-29%). On the shared machine, CPU time, steady state at 1,000
nodes (20,000 through), four alternating pairs: plain 35,300 / 32,700 / 28,300 / 27,900,
compiled 42,400 / 27,800 / 40,200 / 32,100 placements/s; two full runs of this benchmark,
compiled: 38,100 and 42,600 at 1,000 nodes, 58,300 and 51,300 at 100 nodes; the batch
90,300 and 87,700 at 1,000 nodes. Still short of 50,000 at 1,000 nodes: what is left is
CPython's own work under the compiled code (dict lookups on resource names, attribute reads
on the specs and demands that stay interpreted, allocations), no function of ours above a
seventh of it. Then the compiled modules were made to keep to what compiled code needs
(docs/architecture.md, "A compiled core"): every function typed (untyped parameters were read
by name), module constants Final (they were looked up in the module's dict at each use),
allocations' amounts typed as dicts, the node index walked by a compiled generator, the hot
spec fields copied onto the Task, Start compiled; and a gang's kinds tried by target instead
of copying its spec, with no search for a member after one found no room. The recorded stream
went from 113,300 to 78,800-79,100 instructions per placement (-30%; the count moves by 0.4%
from run to run); the same at 1,000 nodes with one gang waiting all along, from 145,700 to
94,400 (94,800 with 10,000 gangs: flat in the backlog).
Three alternating rounds against the code before (CPU time, 1,000 nodes, 20,000 through,
median of seeds 0, 1 and 2): before 48,400 / 42,000 / 50,800, after 58,300 / 57,200 / 56,400
placements/s. A task pinned to each of 10,000 nodes: 7.5 s to 0.21 s (it walked the index).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import statistics
import time
import tracemalloc

from jupyter_sched.core import events as ev
from jupyter_sched.core import state
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec

U = SCALE
HISTORY = 1_000  # ended tasks the shell keeps before it has the core forget them
SHAPES = [
    (0.20, Demand.of({"GPU": 2500, "CPU": U})),
    (0.20, Demand.of({"GPU": 5000, "CPU": U})),
    (0.15, Demand.of({"GPU": U, "CPU": 2 * U})),
    (0.10, Demand.of({"GPU": 2 * U, "CPU": 4 * U})),
    (0.20, Demand.of({"CPU": 2 * U})),
]
GANG_SHARE = 0.15
GANG = Demand.of({"GPU": U, "CPU": U})
WHOLE_NODE = Demand.of({"GPU": 8 * U, "CPU": U})


def make_core(nodes: int) -> Core:
    core = Core(policy="binpack")
    core.handle(*(ev.NodeAdded(f"n{i}", NodeResources({"CPU": 64 * U, "GPU": 8 * U}))
                  for i in range(nodes)))
    return core


def workload(rng: random.Random, gpus: float, start: int) -> list[ev.Submit]:
    """Submissions whose GPU demand adds up to about ``gpus``."""
    out: list[ev.Submit] = []
    used = 0.0
    n = start
    weights = [w for w, _ in SHAPES] + [GANG_SHARE]
    while used < gpus:
        pick = rng.choices(range(len(weights)), weights)[0]
        if pick == len(SHAPES):
            specs = tuple(TaskSpec(f"t{n + k}", GANG) for k in range(4))
            out.append(ev.Submit(specs, GangSpec(f"g{n}", 4)))
            n += 4
            used += 4
        else:
            demand = SHAPES[pick][1]
            out.append(ev.Submit((TaskSpec(f"t{n}", demand),)))
            n += 1
            used += demand.get("GPU") / U
    return out


def timed(core: Core, events: list) -> tuple[int, float]:
    """Tasks started, and the CPU seconds ``handle`` took (the machine may be shared: wall
    time would count other people's work)."""
    gc.disable()
    t0 = time.process_time()
    out = core.handle(*events)
    elapsed = time.process_time() - t0
    gc.enable()
    return sum(isinstance(i, ev.Start) for i in out), elapsed


def measure(nodes: int, seed: int = 0, repeat: int = 3) -> dict[str, float]:
    """Best of ``repeat`` runs (the machine may be busy with other work)."""
    best = None
    for _ in range(repeat):
        row = _measure_once(nodes, seed)
        if best is None or row["rate"] > best["rate"]:
            best = row
    return best


def _measure_once(nodes: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    core = make_core(nodes)
    fill = workload(rng, nodes * 8 * 0.9, 0)
    placed, seconds = timed(core, fill)
    # steady state: 10% of running work ends, a backlog refills it
    running = list(core.running)
    rng.shuffle(running)
    ending = running[: len(running) // 10]
    backlog = workload(rng, len(ending) * 0.8, 10**8)
    core.handle(*backlog[: len(backlog) // 2])
    refill, refill_seconds = timed(
        core, [ev.Finished(t) for t in ending] + backlog[len(backlog) // 2:])
    core.validate()
    return {
        "nodes": nodes,
        "placed": placed,
        "rate": placed / seconds,
        "us_per": seconds / placed * 1e6,
        "refill": refill,
        "refill_rate": refill / refill_seconds if refill else 0.0,
    }


def steady(nodes: int, through: int, seed: int = 0, windows: int = 10,
           collect: bool = False, forget: bool = True, backlog: int = 0) -> dict[str, float]:
    """Tasks arriving and ending one call at a time; rates per window of ``through / windows``
    starts (see the module's docstring). ``collect``: leave the garbage collector on;
    ``forget``: have the core forget ended tasks, as the shell does; ``backlog``: gangs that
    wait all along (two members of 8 GPUs, while one GPU of every node stays taken)."""
    rng = random.Random(seed)
    core = make_core(nodes)
    gpus_per_node = _hold_back(core, nodes, backlog) if backlog else 8
    fill = workload(rng, nodes * gpus_per_node * 0.9, 0)
    demand_of = {s.id: s.demand.get("GPU") for sub in fill for s in sub.tasks}
    running = [i.task for i in core.handle(*fill) if isinstance(i, ev.Start)]
    target = nodes * gpus_per_node * U * 0.9
    gpus = [sum(demand_of.values())]  # GPU units of the running and waiting tasks
    size = through // windows
    cpu = [0.0] * windows
    wall = [0.0] * windows
    started = 0
    n = 10**8
    calls = 0
    ended: list[str] = []
    gc.collect()
    if not collect:
        gc.disable()
    try:
        while started < through:
            events, n = _next_call(rng, running, ended, demand_of, gpus, target, n)
            calls += 1
            if not collect and calls % 1_000 == 0:
                gc.collect()  # untimed: garbage (gangs are cycles) must not pile up meanwhile
            w = min(started // size, windows - 1)
            c0, t0 = time.process_time(), time.perf_counter()
            out = core.handle(*events)
            cpu[w] += time.process_time() - c0
            wall[w] += time.perf_counter() - t0
            for i in out:
                if isinstance(i, ev.Start):
                    running.append(i.task)
                    started += 1
            if forget and len(ended) > HISTORY:  # as the shell does: it keeps the last 1,000
                core.handle(ev.Forget(tuple(ended[:-HISTORY])))
                del ended[:-HISTORY]
    finally:
        if not collect:
            gc.enable()
    core.validate()
    first, last = size / cpu[0], size / cpu[-1]
    return {"nodes": nodes, "through": through, "cpu_rate": through / sum(cpu),
            "wall_rate": through / sum(wall), "first": first, "last": last,
            "ratio": last / first, "busy": _gpu_busy(core)}


def _next_call(rng: random.Random, running: list[str], ended: list[str],
               demand_of: dict[str, int], gpus: list[int], target: float, n: int
               ) -> tuple[list, int]:
    """One call's events: one to three random running tasks end, and as many tasks arrive
    while the running and waiting work (``gpus``) stays near 90% (``target``); and the next
    task number."""
    events: list = []
    for _ in range(min(len(running), rng.randint(1, 3))):
        k = rng.randrange(len(running))
        running[k], running[-1] = running[-1], running[k]
        task = running.pop()
        gpus[0] -= demand_of.pop(task)
        events.append(ev.Finished(task))
        ended.append(task)
    for _ in range(len(events)):
        if gpus[0] >= target:
            break
        sub = _one_submission(rng, n, demand_of)
        n += len(sub.tasks)
        gpus[0] += sum(demand_of[spec.id] for spec in sub.tasks)
        events.append(sub)
    return events, n


def _hold_back(core: Core, nodes: int, backlog: int) -> int:
    """One GPU of every node taken for good, and ``backlog`` gangs of two whole nodes' GPUs
    waiting behind it; the GPUs per node left for the steady state."""
    core.handle(*(ev.Submit((TaskSpec(f"b{i}", GANG, node=f"n{i}"),)) for i in range(nodes)))
    core.handle(*(ev.Submit(tuple(TaskSpec(f"w{k}.{j}", WHOLE_NODE) for j in range(2)),
                            GangSpec(f"w{k}", 2)) for k in range(backlog)))
    return 7


def _one_submission(rng: random.Random, n: int, demand_of: dict[str, int]) -> ev.Submit:
    weights = [w for w, _ in SHAPES] + [GANG_SHARE]
    pick = rng.choices(range(len(weights)), weights)[0]
    if pick == len(SHAPES):
        sub = ev.Submit(tuple(TaskSpec(f"t{n + k}", GANG) for k in range(4)),
                        GangSpec(f"g{n}", 4))
    else:
        sub = ev.Submit((TaskSpec(f"t{n}", SHAPES[pick][1]),))
    for spec in sub.tasks:
        demand_of[spec.id] = spec.demand.get("GPU")
    return sub


def _gpu_busy(core: Core) -> float:
    total = sum(node.resources.total.get("GPU", 0) for node in core.cluster.nodes.values())
    free = sum(node.resources.available.get("GPU", 0) for node in core.cluster.nodes.values())
    return 1 - free / total


def queued_memory(count: int = 100_000) -> float:
    """MB held by the core for ``count`` queued tasks on a full one-node cluster."""
    gc.collect()
    tracemalloc.start()
    core = make_core(1)
    base = tracemalloc.get_traced_memory()[0]
    blocker = ev.Submit((TaskSpec("block", Demand.of({"GPU": 8 * U, "CPU": 64 * U})),))
    demands = [d for _, d in SHAPES]
    core.handle(blocker, *(ev.Submit((TaskSpec(f"q{k}", demands[k % len(demands)]),))
                           for k in range(count)))
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    waiting = sum(1 for t in core.tasks.values() if t.state == "queued")
    assert waiting == count, waiting
    return used / 2**20


GOAL = 50_000  # placements/s at 1,000 nodes, in the steady state (issue 13)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 10,000-node cluster")
    args = parser.parse_args()
    print("core:", "plain Python (built with JUPYTER_SCHED_PURE=1)"
          if state.__file__.endswith(".py") else "compiled with mypyc")
    sizes = [100, 1_000] if args.quick else [100, 1_000, 10_000]
    _print_batches([measure(n, repeat=1 if n >= 10_000 else 3) for n in sizes])
    throughs = [20_000, 50_000] if args.quick else [20_000, 50_000, 100_000]
    _print_steady(sizes, throughs)
    for backlog in (1, 10_000):
        r = steady(1_000, 20_000, backlog=backlog)
        print(f"  1,000 nodes, 20,000 through, {backlog:,} gangs waiting all along: "
              f"{r['cpu_rate']:,.0f}/s")
    r = steady(1_000, 50_000, collect=True, forget=False)
    print(f"  1,000 nodes, 50,000 through, gc on, ended tasks never forgotten: "
          f"{r['cpu_rate']:,.0f}/s, first {r['first']:,.0f}, last {r['last']:,.0f} "
          f"(last/first {r['ratio']:.2f})")
    for nodes in sizes:
        print(f"  {nodes:,} tasks pinned one to each of {nodes:,} nodes (node=), in one batch: "
              f"{pinned(nodes):,.0f} placements/s")
    mb = queued_memory()
    print(f"memory of 100,000 queued tasks: {mb:.1f} MB (goal < 200 MB: {200 / mb:.2f}x headroom)")


def pinned(nodes: int) -> float:
    """Placements/s (CPU time) of one task pinned to each node: a pinned task goes straight
    to its node, so this does not grow with the cluster (it once walked the node index)."""
    core = make_core(nodes)
    batch = [ev.Submit((TaskSpec(f"p{i}", GANG, node=f"n{i}"),)) for i in range(nodes)]
    start = time.process_time()
    out = core.handle(*batch)
    spent = time.process_time() - start
    placed = sum(1 for i in out if isinstance(i, ev.Start))
    assert placed == nodes, f"{placed} of {nodes} pinned tasks started"
    return placed / spent


def _print_batches(rows: list[dict]) -> None:
    print("batch submitted at once into an empty cluster:")
    print(f"{'nodes':>7} {'placed':>8} {'placements/s':>13} {'us/placement':>13} "
          f"{'refill/s':>10}")
    for r in rows:
        print(f"{r['nodes']:>7,} {r['placed']:>8,} {r['rate']:>13,.0f} {r['us_per']:>13.1f} "
              f"{r['refill_rate']:>10,.0f}")
    at_1k = next(r for r in rows if r["nodes"] == 1_000)
    print(f"batch at 1,000 nodes: {at_1k['rate']:,.0f}/s ({at_1k['rate'] / GOAL:.2f}x of "
          f"{GOAL:,}; the goal is for the steady state, below)")
    for a, b in itertools.pairwise(rows):
        growth = b["us_per"] / a["us_per"]
        scale = b["nodes"] / a["nodes"]
        print(f"cost per placement {a['nodes']:,} -> {b['nodes']:,} nodes: x{growth:.2f} "
              f"for x{scale:.0f} nodes (sub-linear: {growth < scale})")


def _print_steady(sizes: list[int], throughs: list[int]) -> None:
    print("\nsteady state (placements/s by CPU time; first and last tenth of the run):")
    print(f"{'nodes':>7} {'through':>8} {'cpu/s':>9} {'wall/s':>9} {'first':>9} {'last':>9} "
          f"{'last/first':>10} {'GPU busy':>9}")
    rates: dict[int, float] = {}
    for nodes in sizes:
        for through in throughs:
            for collect in (False, True):
                r = steady(nodes, through, collect=collect)
                if through == throughs[0] and not collect:
                    rates[nodes] = r["cpu_rate"]
                print(f"{nodes:>7,} {through:>8,} {r['cpu_rate']:>9,.0f} "
                      f"{r['wall_rate']:>9,.0f} {r['first']:>9,.0f} {r['last']:>9,.0f} "
                      f"{r['ratio']:>10.2f} {r['busy']:>9.0%}{'  gc on' if collect else ''}")
    seeds = [rates[1_000]] + [steady(1_000, throughs[0], seed=s)["cpu_rate"] for s in (1, 2)]
    rate = statistics.median(seeds)
    print(f"steady state at 1,000 nodes, {throughs[0]:,} through, median of seeds 0, 1, 2 "
          f"({' / '.join(f'{r:,.0f}' for r in seeds)}): {rate:,.0f}/s "
          f"(goal >= {GOAL:,}: {rate / GOAL:.2f}x, {'met' if rate >= GOAL else 'not met'})")
    for a, b in itertools.pairwise(sizes):
        growth = rates[a] / rates[b]
        print(f"steady cost per placement {a:,} -> {b:,} nodes: x{growth:.2f} for "
              f"x{b / a:.0f} nodes (sub-linear: {growth < b / a})")


if __name__ == "__main__":
    main()
