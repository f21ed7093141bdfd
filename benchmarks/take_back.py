"""How soon a kernel has the work of the kernel before it back, from a kept cluster.

    python benchmarks/take_back.py [--rounds 5]

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
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
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


if __name__ == "__main__":
    main()
