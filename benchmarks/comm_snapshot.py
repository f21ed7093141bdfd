"""The comm's snapshots with 100,000 queued tasks: message size, update rate, encode time.

    python benchmarks/comm_snapshot.py [--tasks N] [--seconds S]

A ``Scheduler`` with two declared GPUs, each held by a task waiting on a gate, and N more
tasks queued behind them (``map``, one whole GPU each). The comm hub follows it with one
stand-in comm that records what it is sent, encoded as the kernel's session encodes it. For
``--seconds`` the queue keeps changing (a queued task cancelled every 10 ms, far more changes
than the comm may send); measured:

* the size of every snapshot message (the JSON of its envelope) and the largest;
* how many snapshots a second reach the comm while everything changes (at most 4 by design),
  and how many in the quiet second after;
* the time to build and encode one message on the sender thread (status payload, timeline,
  fitting under 64 KiB, and the session's own JSON encoding), and, for scale, the time the
  runtime thread takes to make the snapshot it is built from.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

from jupyter_sched.notebook.comm import CommHub
from jupyter_sched.notebook.comm_messages import MAX_OUT, fit, status_data
from jupyter_sched.runtime.scheduler import Scheduler
from jupyter_sched.views.timeline import WINDOW


def noop(i: int) -> int:
    return i


class Recorder:
    """Stands in for a comm: keeps (time, bytes) of each snapshot it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, int, dict]] = []

    def send(self, data: dict) -> None:
        if data.get("kind") != "snapshot":
            return  # the reply to the opening subscribe
        size = len(json.dumps(data, ensure_ascii=False, allow_nan=False).encode())
        self.sent.append((time.monotonic(), size, data))

    def on_msg(self, callback) -> None:
        pass

    def on_close(self, callback) -> None:
        pass

    def close(self) -> None:
        pass


def per_call(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def churn(sched: Scheduler, handles: list, comm: Recorder,
          seconds: float) -> tuple[int, float, int, int]:
    """Cancel a queued task every 10 ms for ``seconds``: (cancelled, seconds it took,
    snapshots sent meanwhile, snapshots sent in a quiet second after)."""
    start = time.monotonic()
    first = len(comm.sent)
    cancelled = 0
    while time.monotonic() - start < seconds:
        sched.cancel(handles[-1 - cancelled])
        cancelled += 1
        time.sleep(0.01)
    busy = time.monotonic() - start
    during = len(comm.sent) - first
    time.sleep(1.0)  # the last change goes out, then nothing
    settled = len(comm.sent)
    time.sleep(1.0)
    return cancelled, busy, during, len(comm.sent) - settled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    gate = threading.Event()
    sched = Scheduler(local_resources="GPU=2").start()
    for _ in range(2):
        sched.submit(gate.wait, 600, resources={"GPU": 1})
    handles = sched.map(noop, range(args.tasks), resources={"GPU": 1})
    while sched.snapshot(fresh=True).counts["queued"] < args.tasks:
        time.sleep(0.05)
    hub = CommHub(lambda: sched)
    comm = Recorder()
    # opened as the sidebar opens it, at the fastest rate it may ask for
    hub._on_open(comm, {"content": {"data": {"v": 1, "kind": "command", "id": "c1",
                                             "command": "subscribe", "interval": 0.25}}})
    while not comm.sent:
        time.sleep(0.01)

    cancelled, busy, during, quiet = churn(sched, handles, comm, args.seconds)
    snap = sched.snapshot(fresh=True)
    take = per_call(lambda: sched.snapshot(fresh=True), 5)
    # the sender thread's work for one message, short of handing it to the comm
    encode = per_call(lambda: hub._encode(sched, snap, WINDOW), 50)
    data, _ = fit(status_data(snap))
    envelope = {"v": 1, "kind": "snapshot", "seq": 1, "data": data}
    session = per_call(lambda: json.dumps(envelope, ensure_ascii=False, allow_nan=False), 50)
    sizes = [size for _, size, _ in comm.sent]
    last = comm.sent[-1][2]["data"]

    hub.close()
    sched.cancel_all()
    gate.set()
    sched.shutdown()

    ms = 1000
    print(f"{args.tasks:,} queued behind 2 running; {cancelled:,} cancelled one by one "
          f"over {busy:.1f} s")
    print(f"  snapshot messages: {len(sizes)}, largest {max(sizes):,} bytes, median "
          f"{statistics.median(sizes):,.0f} (limit {MAX_OUT:,}); truncated: "
          f"{any(s[2]['data']['truncated'] for s in comm.sent)}")
    print(f"  rate while changing: {during / busy:.2f} a second ({during} in {busy:.1f} s; "
          f"at most 4 by design); in a quiet second after: {quiet}")
    print(f"  last message: queued {last['counts']['queued']:,}, cancelled "
          f"{last['counts']['cancelled']:,}, waiting rows {len(last['waiting'])}, timeline "
          f"rows {len(last['timeline'])}")
    print(f"  sender thread, one message: build + fit {statistics.median(encode) * ms:.2f} ms, "
          f"session encoding {statistics.median(session) * ms:.2f} ms (medians)")
    print(f"  runtime thread, one snapshot of {args.tasks:,} queued (for scale, not the comm's): "
          f"{statistics.median(take) * ms:.0f} ms")


if __name__ == "__main__":
    main()
