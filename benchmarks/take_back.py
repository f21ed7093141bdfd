"""How soon a kernel has the work of the kernel before it back, from a kept cluster.

    python benchmarks/take_back.py [--rounds 5] [--entries 1000000]

Each round, on one kept cluster of two local engines:

1. a scheduler submits two engine tasks (one ends in 0.2 s, one runs 3 s) and stops as a
   kernel restart would stop it (``shutdown()``: the kept cluster and its work go on);
2. 1 s later a new scheduler connects (``connect(cluster_id=...)``): the first task ended while
   no kernel was there, the second still runs;
3. measured: from the start of ``connect`` to its return; to the first taken-back result (the
   ended task's, fetched from the controller); and, for the running task, from its end on the
   engine (the time it wrote) to its result in the new scheduler.
4. The peer, in the same round: ipyparallel's own way back to a result, a fresh ``Client``
   of the cluster asking the controller with ``get_result(msg_id)`` for the ended task (the
   request id the journal kept), from ``Client()`` to the value.

The take-back's extra cost over the peer is the scheduler's: the journal read, the node of
the taken-back work, a submission, and the controller's answer once the engine is free.

Then, once: a kernel stopped with two tasks running and a cell waiting on a journal that holds
``--entries`` lines in all (the rest: work that ended, as a long-lived kernel leaves it,
``testing.ended_work``), and a new scheduler connects. Measured: ``connect``'s time, the
growth of the process's resident memory while it ran (sampled every 5 ms), and what it took
back. Goal (the journal's issue): 1,000,000 entries in under 1 s and 100 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time

import psutil

CELL_ENDED = "import time\ntime.sleep(0.2)\n'ended'"
CELL_RUNNING = "import time\ntime.sleep(3)\ntime.time()"


def one_round(cluster_id: str) -> dict[str, float]:
    import ipyparallel as ipp

    from jupyter_sched import Scheduler
    from jupyter_sched.executors.ipp import kept

    first = Scheduler(local_resources="GPU=2")
    executor = first.connect(cluster_id=cluster_id)  # (the kept cluster, taken as ours)
    del executor
    first.submit(code=CELL_ENDED, target="engines", name="ended")
    first.submit(code=CELL_RUNNING, target="engines", name="running")
    sent = _sent(cluster_id, 2)
    request = next(run.request for run in sent if run.name == "ended")
    first.shutdown()
    time.sleep(1.0)

    second = Scheduler(local_resources="GPU=2")
    began = time.perf_counter()
    second.connect(cluster_id=cluster_id)
    connected = time.perf_counter() - began
    handles = {h.name: h for h in second.kept.reattached()}
    assert set(handles) == {"ended", "running"}, handles
    assert handles["ended"].result(timeout=30) == "ended"
    first_result = time.perf_counter() - began
    ended_on_engine = handles["running"].result(timeout=30)
    lag = time.time() - ended_on_engine  # (an upper bound: measured once the result is here)
    second.shutdown()

    record = kept.KeptCluster.load(cluster_id)
    began = time.perf_counter()
    client = ipp.Cluster.from_file(cluster_file=record.cluster_file).connect_client_sync()
    reply = client.get_result(request).get(30)
    peer = time.perf_counter() - began
    client.close()
    assert reply is not None
    return {"connect": connected, "first result": first_result, "end to result": lag,
            "peer get_result": peer}


def _sent(cluster_id: str, n: int) -> list:
    """The runs the kept cluster's journal says were sent and not ended, once there are
    ``n``."""
    from jupyter_sched.executors.ipp import kept

    deadline = time.monotonic() + 30
    while len(sent := kept.read_journal(kept.journal_path(cluster_id)).running) < n:
        assert time.monotonic() < deadline, "the tasks were not sent"
        time.sleep(0.05)
    return sent


def journal_round(cluster_id: str, entries: int) -> dict[str, float]:
    """Connect over a journal of ``entries`` lines, two runs and a cell of them live."""
    from jupyter_sched import Scheduler
    from jupyter_sched.executors.ipp import kept
    from jupyter_sched.testing import ended_work

    first = Scheduler(local_resources="GPU=2")
    first.connect(cluster_id=cluster_id)
    for name in ("a", "b"):
        first.submit(code=CELL_RUNNING, target="engines", name=name)
    waiting = first.submit(code="'c'", target="engines", name="c")
    first.kept.keep_queued(waiting, "--on engines --name c", "'c'")
    _sent(cluster_id, 2)
    first.shutdown()
    path = kept.journal_path(cluster_id)
    live = path.read_bytes()
    filler = entries - live.count(b"\n")
    with open(path, "wb") as f:  # the live lines in the middle of the work that ended
        for k, line in enumerate(ended_work(filler)):
            f.write(line)
            if k == filler // 2:
                f.write(live)
    size = path.stat().st_size

    second = Scheduler(local_resources="GPU=2")
    second.snapshot(fresh=True)  # (started: its own memory is not counted)
    proc = psutil.Process()
    base = peak = proc.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, proc.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    began = time.perf_counter()
    second.connect(cluster_id=cluster_id)
    took = time.perf_counter() - began
    done.set()
    sampler.join()
    peak = max(peak, proc.memory_info().rss)
    taken = sorted(h.name for h in second.kept.reattached())
    _, cells = second.kept.waiting_cells()
    after = path.stat().st_size
    second.stop_cluster()
    assert taken == ["a", "b"] and [c.name for c in cells] == ["c"], (taken, cells)
    return {"entries": entries, "bytes": size, "connect": took,
            "memory": (peak - base) / 2**20, "after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--entries", type=int, default=1_000_000)
    args = parser.parse_args()
    import os

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="jsched-bench-"))
    from jupyter_sched import Scheduler
    from jupyter_sched.executors.ipp import kept

    starter = Scheduler(local_resources="GPU=2")
    cluster_id = starter.start_cluster(engines=2, keep=True).kept_id
    starter.shutdown()  # (the cluster is kept: it goes on)
    try:
        rounds = [one_round(cluster_id) for _ in range(args.rounds)]
    finally:
        kept.stop(cluster_id)
    print(f"{args.rounds} rounds, kept cluster of 2 local engines; seconds, median (min-max):")
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        print(f"  {key:<16} {statistics.median(values):7.3f}  "
              f"({min(values):.3f}-{max(values):.3f})")
    ratio = statistics.median(r["first result"] / r["peer get_result"] for r in rounds)
    print(f"  first taken-back result / ipyparallel's own get_result: {ratio:.1f}x")
    starter = Scheduler(local_resources="GPU=2")
    cluster_id = starter.start_cluster(engines=2, keep=True).kept_id
    starter.shutdown()
    try:
        big = journal_round(cluster_id, args.entries)
    finally:
        with contextlib.suppress(kept.KeptError):
            kept.stop(cluster_id)
    print(f"connect over a journal of {big['entries']:,} entries ({big['bytes'] / 2**20:.0f} "
          f"MiB; 2 runs and a cell live): {big['connect']:.2f} s, resident memory "
          f"+{big['memory']:.0f} MiB; the journal left compacted: {big['after']:,} bytes")


if __name__ == "__main__":
    main()
