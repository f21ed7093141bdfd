"""Many kernels on one host: what each costs idle and waiting, and how fast they drain two GPUs.

    python benchmarks/many_kernels.py [--kernels 24] [--idle 30] [--wait 30]

Real IPython kernels (``jupyter_client``), each with the extension loaded and the same two
declared GPUs (``%sched local --gpus 2``), sharing one ledger in a fresh directory, as the
notebooks of a GPU box do. Each kernel process's CPU time is read with psutil.

1. **Idle** (goal: <= 0.1% of a core each): every kernel loaded and doing nothing, ``--idle``
   seconds.
2. **Waiting** (goal: <= 0.1% of a core each): two kernels hold both GPUs with a task
   (``GPU=1``) that waits on an event; every other kernel has a task of 1 s at ``GPU=1`` waiting
   behind them, ``--wait`` seconds.
3. **Drain** (goal: >= 0.95 of the ideal; never more than 2 at once): the two holders' events
   are set; every kernel's task then runs 1 s on a GPU: ideal ``kernels / 2`` seconds from the
   release to the last end. The tasks' own start and end times (the host's clock) give the
   most that ever ran at once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from jupyter_client import KernelManager

ROOT = Path(__file__).resolve().parent.parent

SETUP = """\
%load_ext jupyter_sched
%sched local --gpus 2 --cpus 4
import threading, time, jupyter_sched
sched = jupyter_sched.get_scheduler()
gate = threading.Event()
def work(gate):
    gate.wait()
    t0 = time.time()
    time.sleep(1.0)
    return (t0, time.time())
"""


class Kernel:
    """One real kernel over Unix sockets in a directory of its own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.sockets = tempfile.mkdtemp(prefix="jsched-bench-")
        self.km = KernelManager(kernel_name="python3", transport="ipc",
                                ip=os.path.join(self.sockets, "k"))
        self.km.start_kernel(env=env, cwd=str(ROOT))
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.process = psutil.Process(self.km.provisioner.process.pid)

    def run(self, code: str) -> str:
        out: list[str] = []

        def hook(msg: dict) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = self.kc.execute_interactive(code, timeout=180, output_hook=hook)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"{code!r} failed: {''.join(out)}")
        return "".join(out)

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(self.sockets, ignore_errors=True)


def cpu_percent(kernels: list[Kernel], seconds: float) -> list[float]:
    before = [k.cpu() for k in kernels]
    t0 = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - t0
    return [100.0 * (k.cpu() - b) / took for k, b in zip(kernels, before, strict=True)]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(t0, 1) for t0, _ in intervals] + [(t1, -1) for _, t1 in intervals])
    now = most = 0
    for _, step in edges:  # (an end sorts before a start at the same moment)
        now += step
        most = max(most, now)
    return most


def line(name: str, values: list[float], goal: str) -> None:
    print(f"   {name:<9} median {statistics.median(values):.3f}%  max {max(values):.3f}%"
          f"  (goal {goal})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=24)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--wait", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.kernels < 3:
        parser.error(f"--kernels {args.kernels}: at least 3 (two hold the GPUs, one waits)")
    directory = tempfile.mkdtemp(prefix="jsched-kernels-")
    env = dict(os.environ, JUPYTER_SCHED_LEASES=os.path.join(directory, "leases.db"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    kernels: list[Kernel] = []
    try:
        started = time.monotonic()
        for _ in range(args.kernels):
            kernels.append(Kernel(env))
            kernels[-1].run(SETUP)
        print(f"{args.kernels} kernels loaded in {time.monotonic() - started:.0f} s "
              f"(load average {os.getloadavg()[0]:.1f})")
        time.sleep(5.0)  # (the loads' own work done)
        print("CPU of each kernel process, % of a core")
        line("idle", cpu_percent(kernels, args.idle), "<= 0.1%")
        holders, waiters = kernels[:2], kernels[2:]
        for k in holders:
            k.run("h = sched.submit(work, gate, resources={'GPU': 1})")
        for k in holders:
            k.run("while h.state != 'running': time.sleep(0.01)")
        for k in waiters:
            k.run("gate.set(); h = sched.submit(work, gate, resources={'GPU': 1})")
        time.sleep(3.0)  # (each waiter's wait recorded)
        queued = [k.run("print(h.state)").strip() for k in waiters]
        line("waiting", cpu_percent(waiters, args.wait), "<= 0.1%")
        released = time.time()
        for k in holders:
            k.run("gate.set()")
        intervals = [eval(k.run("print(repr(h.result(300)))")) for k in kernels]
        ideal = args.kernels / 2
        took = max(t1 for _, t1 in intervals) - released
        print(f"drain of {args.kernels} x 1 s tasks on 2 GPUs: {took:.2f} s, ideal {ideal:.0f} s:"
              f" {ideal / took:.3f} of the ideal (goal >= 0.95); most at once"
              f" {most_at_once(intervals)} (goal <= 2); waiting before the release:"
              f" {queued.count('queued')} of {len(waiters)} queued")
    finally:
        for k in kernels:
            k.close()
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
