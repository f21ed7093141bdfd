"""The same workloads on jupyter_sched and on its peers, one after another in one run.

    python benchmarks/peers.py [--quick] [--results DIR] [--skip SYSTEM ...]

Peers: raw ipyparallel on the same engines, Dask distributed (a ``LocalCluster`` of 2 worker
processes) and Ray (a local instance); each runs only when it is installed
(``pip install '.[bench]'``), otherwise a line says it was skipped. Workloads, with
jupyter_sched's goals from DESIGN.md section 8:

1. no-op latency on one engine: ``view.apply_sync`` against ``submit(...).result()`` on the
   same engine, medians of alternating rounds (goal <= 1.1x raw); Dask and Ray for reference;
2. tiny-task throughput on 2 engines, all submitted at once: raw direct views (round robin)
   and a load-balanced view against ``submit``, medians of alternating rounds (goal >= 1.0x
   direct views, the median of the rounds' ratios); Dask, Ray;
3. ``map`` of 10,000 tiny items on 2 engines against Dask ``client.map`` on 2 workers (goal
   >= 1.5x Dask) and raw ``DirectView.map``;
4. tiny tasks/s in kernel threads, CPU 0.01 and GPU 0.25 on declared GPUs (goal >= 5,000/s);
5. fractional makespan, 16 tasks x 0.25 GPU x 1 s on 2 declared GPUs (bound 2.0 s, goal
   <= 2.1 s): kernel threads, 4 pinned engines per GPU, Dask abstract ``GPU`` resources, Ray
   logical GPUs, raw ipyparallel with one engine per GPU and no sharing.

Figures are printed as they come, then written to ``DIR/peers.md`` (a table) and
``DIR/peers.png`` (when matplotlib is installed). Every cluster and process started here is
stopped at the end, also after an error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
# engines and workers inherit the environment: let them import this checkout too
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                         os.environ.get("PYTHONPATH")]))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reporting home from a benchmark

from peers_report import Report, installed  # noqa: E402

from jupyter_sched.runtime.scheduler import Scheduler  # noqa: E402

SHARE, NAP, GANG_TASKS, GPUS = 0.25, 1.0, 16, 2


def noop():
    return None


def tiny(x):
    return x


def nap(seconds):
    import time

    time.sleep(seconds)
    return seconds


def timed_batch(run) -> float:
    """Seconds ``run()`` takes (it submits a batch and waits for all of it)."""
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


def sequential_latency(call, calls: int, warm: int = 20) -> list[float]:
    for _ in range(warm):
        call()
    samples = []
    for _ in range(calls):
        t = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t)
    return samples


# -- jupyter_sched and raw ipyparallel on the same two engines ----------------------------------


def engines_and_raw(report: Report, args: argparse.Namespace) -> None:
    """One engine for the latency (both paths on it), then a second one for the rest."""
    import ipyparallel as ipp

    t = time.perf_counter()
    cluster = ipp.Cluster(n=1, log_level=logging.ERROR)
    sched, client = Scheduler(), None
    try:
        client = cluster.start_and_connect_sync()
        client.wait_for_engines(1, timeout=120)
        executor = sched.connect(cluster)
        print(f"ipyparallel cluster of 1 engine ready in {time.perf_counter() - t:.1f}s")
        engine_latency(report, sched, client[client.ids[0]], args.calls)
        cluster.start_engines_sync(n=1)
        client.wait_for_engines(2, timeout=120)
        deadline = time.monotonic() + 60
        while len(executor.engines) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the scheduler sees {len(executor.engines)} engines, not 2")
            time.sleep(0.05)
        engine_throughput(report, sched, client, args.tasks, 3 * args.rounds)
        engine_map(report, sched, client, args.items)
        raw_makespan(report, client)
    finally:
        sched.shutdown()
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        cluster.stop_cluster_sync()


def engine_latency(report: Report, sched, view, calls: int, per_round: int = 10) -> None:
    """Raw ``apply_sync`` against submit-and-wait on the one engine there is, in short
    alternating rounds (each path goes first in every other round), so that the load of a
    shared machine, which changes by the second, weighs on both alike."""
    for _ in range(20):
        view.apply_sync(noop)
        sched.submit(noop, target="engines").result()
    raw, ours = [], []
    for r in range(max(1, calls // per_round)):
        paths = [(raw, lambda: view.apply_sync(noop)),
                 (ours, lambda: sched.submit(noop, target="engines").result())]
        for samples, call in paths if r % 2 == 0 else paths[::-1]:
            for _ in range(per_round):
                t = time.perf_counter()
                call()
                samples.append(time.perf_counter() - t)
    report.latency("raw ipyparallel apply_sync", raw)
    report.latency("jupyter_sched submit().result()", ours)
    report.goal("latency: jupyter_sched / raw apply_sync", statistics.median(ours)
                / statistics.median(raw), "<=", 1.1, "x")


def engine_throughput(report: Report, sched, client, tasks: int, rounds: int) -> None:
    """Alternating rounds of raw direct views, a load-balanced view and submit (each path goes
    first in turn), so that the load of a shared machine weighs on all alike: the median rate
    of each, and the median of the rounds' ratios of submit to direct views."""
    views = [client[e] for e in sorted(client.ids)[:2]]
    balanced = client.load_balanced_view(targets=sorted(client.ids)[:2])

    def direct():
        results = [views[i % 2].apply_async(tiny, i) for i in range(tasks)]
        assert [ar.get() for ar in results] == list(range(tasks))

    def lbview():
        results = [balanced.apply_async(tiny, i) for i in range(tasks)]
        assert [ar.get() for ar in results] == list(range(tasks))

    def ours():
        handles = [sched.submit(tiny, i, target="engines") for i in range(tasks)]
        assert [h.result() for h in handles] == list(range(tasks))

    paths = [("direct", direct), ("lb", lbview), ("ours", ours)]
    rates: dict[str, list[float]] = {key: [] for key, _ in paths}
    for r in range(rounds):
        for key, run in paths[r % 3:] + paths[:r % 3]:
            rates[key].append(tasks / timed_batch(run))
    report.rate("throughput", "raw ipyparallel direct views", statistics.median(rates["direct"]))
    report.rate("throughput", "raw ipyparallel load-balanced view", statistics.median(rates["lb"]))
    report.rate("throughput", "jupyter_sched submit", statistics.median(rates["ours"]))
    ratios = [o / d for o, d in zip(rates["ours"], rates["direct"], strict=True)]
    report.goal("throughput: jupyter_sched / raw direct views", statistics.median(ratios),
                ">=", 1.0, "x")


def engine_map(report: Report, sched, client, items: int) -> None:
    def ours():
        handles = sched.map(tiny, range(items), target="engines")
        sched.wait(handles)
        assert handles[-1].result() == items - 1

    def raw():
        assert client[:].map_sync(tiny, range(items))[-1] == items - 1

    report.rate("map", "jupyter_sched map", items / timed_batch(ours))
    report.rate("map", "raw ipyparallel DirectView.map", items / timed_batch(raw),
                "one chunk per engine: 2 messages")


def raw_makespan(report: Report, client) -> None:
    """No sharing: each of the two engines stands for one GPU and runs one task at a time."""
    balanced = client.load_balanced_view(targets=sorted(client.ids)[:2])
    balanced.map_sync(nap, [0.0] * 4)

    def run():
        results = [balanced.apply_async(nap, NAP) for _ in range(GANG_TASKS)]
        for ar in results:
            ar.get()

    report.makespan("raw ipyparallel, 1 engine per GPU, no sharing", [timed_batch(run)])


# -- jupyter_sched in kernel threads; on pinned engines -----------------------------------------


def local(report: Report, args: argparse.Namespace) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sched = Scheduler(local_resources=f"GPU={GPUS}").start()
    try:
        for label, resources in (("CPU 0.01", {"CPU": 0.01}), ("GPU 0.25", {"GPU": SHARE})):
            def run(n=args.local, resources=resources):
                sched.wait(sched.map(tiny, range(n), resources=resources, target="local"))

            run(200)
            rate = max(args.local / timed_batch(run) for _ in range(args.rounds))
            report.rate("local", f"jupyter_sched map, {label}", rate)
            report.goal(f"kernel threads, {label}: tasks/s", rate, ">=", 5000, "/s")
        with ThreadPoolExecutor(max_workers=8) as pool:
            rate = max(args.local / timed_batch(lambda: list(pool.map(tiny, range(args.local))))
                       for _ in range(args.rounds))
        report.rate("local", "concurrent.futures ThreadPoolExecutor(8).map", rate, "no resources")

        def run_nap():
            sched.wait([sched.submit(nap, NAP, resources={"GPU": SHARE}, target="local")
                        for _ in range(GANG_TASKS)])

        spans = [timed_batch(run_nap) for _ in range(args.rounds)]
        report.makespan("jupyter_sched, kernel threads", spans)
        report.goal("makespan, kernel threads", statistics.median(spans), "<=", 2.1, "s")
    finally:
        sched.shutdown()


def pinned_engines(report: Report, args: argparse.Namespace) -> None:
    sched = Scheduler(local_resources=f"GPU={GPUS}")
    try:
        t = time.perf_counter()
        sched.start_cluster(engines_per_gpu=4)
        print(f"8 pinned engines ready in {time.perf_counter() - t:.1f}s")
        sched.wait([sched.submit(nap, 0.0, resources={"GPU": SHARE}, target="engines")
                    for _ in range(8)])

        def run():
            handles = [sched.submit(nap, NAP, resources={"GPU": SHARE}, target="engines")
                       for _ in range(GANG_TASKS)]
            sched.wait(handles)
            failed = [h for h in handles if h.state != "done"]
            if failed:
                raise RuntimeError(f"{len(failed)} tasks did not finish: {failed[0].reason}")

        spans = [timed_batch(run) for _ in range(args.rounds)]
        report.makespan("jupyter_sched, 4 pinned engines per GPU", spans)
        report.goal("makespan, pinned engines", statistics.median(spans), "<=", 2.1, "s")
    finally:
        sched.shutdown()


# -- Dask -------------------------------------------------------------------------------------


def dask(report: Report, args: argparse.Namespace) -> None:
    from dask.distributed import Client, LocalCluster

    t = time.perf_counter()
    # 4 threads a worker so that four 0.25 GPU tasks can share a worker's GPU=1
    with LocalCluster(n_workers=2, threads_per_worker=4, processes=True,
                      dashboard_address=None, resources={"GPU": 1},
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        print(f"Dask cluster of 2 worker processes ready in {time.perf_counter() - t:.1f}s")
        report.latency("Dask client.submit().result()", sequential_latency(
            lambda: client.submit(noop, pure=False).result(), args.calls))

        def batch():
            futures = [client.submit(tiny, i, pure=False) for i in range(args.tasks)]
            assert client.gather(futures) == list(range(args.tasks))

        rate = max(args.tasks / timed_batch(batch) for _ in range(args.rounds))
        report.rate("throughput", "Dask client.submit", rate)

        def mapped():
            assert client.gather(client.map(tiny, range(args.items)))[-1] == args.items - 1

        report.rate("map", "Dask client.map", args.items / timed_batch(mapped))
        ours = report.value("map", "jupyter_sched map")
        if ours is not None:
            report.goal("map: jupyter_sched / Dask client.map", ours / report.value(
                "map", "Dask client.map"), ">=", 1.5, "x")
        client.gather([client.submit(nap, 0.0, resources={"GPU": SHARE}, pure=False)
                       for _ in range(8)])

        def run():
            client.gather([client.submit(nap, NAP, resources={"GPU": SHARE}, pure=False)
                           for _ in range(GANG_TASKS)])

        report.makespan("Dask, resources GPU=1 per worker, 0.25 a task",
                        [timed_batch(run) for _ in range(args.rounds)],
                        "4 threads a worker; abstract amounts: no device is assigned")


# -- Ray --------------------------------------------------------------------------------------


def ray(report: Report, args: argparse.Namespace) -> None:
    import ray as ray_

    t = time.perf_counter()
    try:
        start_ray(ray_, report)
        print(f"Ray ready in {time.perf_counter() - t:.1f}s")
        r_noop, r_tiny, r_nap = ray_.remote(noop), ray_.remote(tiny), ray_.remote(nap)
        report.latency("Ray ray.get(f.remote())", sequential_latency(
            lambda: ray_.get(r_noop.remote()), args.calls))

        def batch():
            assert ray_.get([r_tiny.remote(i) for i in range(args.tasks)]) == list(
                range(args.tasks))

        rate = max(args.tasks / timed_batch(batch) for _ in range(args.rounds))
        report.rate("throughput", "Ray f.remote()", rate)

        def run(cpus):
            ray_.get([r_nap.options(num_gpus=SHARE, num_cpus=cpus).remote(NAP)
                      for _ in range(GANG_TASKS)])

        if not args.quick:
            report.makespan("Ray num_gpus=0.25 (and the default num_cpus=1)",
                            [timed_batch(lambda: run(1))],
                            "each also takes the default 1 CPU: 2 at a time on 2 CPUs")
        cold = timed_batch(lambda: run(0))
        report.makespan("Ray num_gpus=0.25, num_cpus=0, first round", [cold],
                        "includes starting the worker processes")
        report.makespan("Ray num_gpus=0.25, num_cpus=0, later rounds",
                        [timed_batch(lambda: run(0)) for _ in range(args.rounds)],
                        "idle workers beyond num_cpus are not kept between rounds")
    finally:
        ray_.shutdown()


def start_ray(ray_, report: Report) -> None:
    """``ray.init`` on logical GPUs; once more if its node misses Ray's own 30 s start limit,
    which a busy 2-core machine can."""
    for attempt in (1, 2):
        try:
            ray_.init(num_cpus=2, num_gpus=GPUS, include_dashboard=False, log_to_driver=False,
                      logging_level=logging.ERROR, object_store_memory=200 * 2**20)
            return
        except Exception as err:
            ray_.shutdown()
            if attempt == 2 or "timed out during startup" not in str(err):
                raise
            report.note(f"ray: the first start timed out ({err}); started on the second try")


# -- the run ------------------------------------------------------------------------------------

SYSTEMS = {  # name: (function, the module it needs)
    "ipyparallel": (engines_and_raw, "ipyparallel"),
    "local": (local, None),
    "pinned": (pinned_engines, "ipyparallel"),
    "dask": (dask, "distributed"),
    "ray": (ray, "ray"),
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer tasks and rounds, no pinned-engine makespan (about 2 min)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results",
                        help="where peers.md and peers.png go")
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(SYSTEMS),
                        help="systems not to run")
    args = parser.parse_args(argv)
    sizes = ((200, 500, 2000, 2000, 1) if args.quick else (240, 1000, 10_000, 5000, 2))
    args.calls, args.tasks, args.items, args.local, args.rounds = sizes
    if args.quick and "pinned" not in args.skip:
        args.skip.append("pinned")
    return args


def main(argv: list[str] | None = None) -> Report:
    args = parse(argv)
    report = Report(args)
    started = time.perf_counter()
    for name, (run, module) in SYSTEMS.items():
        if name in args.skip:
            report.skipped(name, "--skip" if not args.quick or name != "pinned" else "--quick")
        elif module is not None and not installed(module):
            report.skipped(name, f"{module} is not installed (pip install '.[bench]')")
        else:
            t = time.perf_counter()
            try:
                run(report, args)
            except Exception as err:
                report.failed(name, err)
            print(f"-- {name} done in {time.perf_counter() - t:.0f}s")
    report.elapsed = time.perf_counter() - started
    print(f"whole run: {report.elapsed:.0f}s")
    report.write(args.results)
    return report


if __name__ == "__main__":
    main()
