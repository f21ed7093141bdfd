"""Host-wide leases: how long a take and a give cost.

    python benchmarks/leases.py [--n 5000] [--dir DIR] [--json]

One process takes 0.25 of a device and gives it back, ``n`` times, on a ledger in a fresh
directory (default: a temporary one; give ``--dir`` to measure another filesystem). Three other
processes' leases sit on the same device, so every take checks holders and sums shares as it
would on a shared workstation. Reported: take, give, take+give (median and p99), and
``version()``, the poll a scheduler makes to notice another kernel's change. Goal: take+give
median < 1 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jupyter_sched.host.ledger import Ledger

WARMUP = 200
DEVICE = "GPU-00000000-bench-4000-8000-000000000000"
_HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[3])
from jupyter_sched.host.ledger import Ledger
assert Ledger(sys.argv[1], label="neighbour.ipynb").take(sys.argv[2], 1_000)
print("ready", flush=True)
sys.stdin.read()
"""


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1e3,
            "p99_ms": ordered[int(len(ordered) * 0.99)] * 1e3, "n": len(ordered)}


def measure(path: Path, n: int) -> dict[str, dict[str, float]]:
    perf = time.perf_counter
    takes, gives, pairs, polls = [], [], [], []
    with Ledger(path, label="bench.ipynb") as ledger:
        for i in range(n + WARMUP):
            t0 = perf()
            lease = ledger.take(DEVICE, 2_500, task=str(i))
            t1 = perf()
            ledger.give(lease)
            t2 = perf()
            ledger.version()
            t3 = perf()
            if i >= WARMUP:
                takes.append(t1 - t0)
                gives.append(t2 - t1)
                pairs.append(t2 - t0)
                polls.append(t3 - t2)
    return {"take": _stats(takes), "give": _stats(gives), "take+give": _stats(pairs),
            "version": _stats(polls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = Path(directory) / "leases.db"
        root = str(Path(__file__).resolve().parent.parent)
        neighbours = [subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), DEVICE, root],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                      for _ in range(3)]
        try:
            for neighbour in neighbours:
                assert neighbour.stdout.readline().strip() == "ready"
            results = measure(path, args.n)
        finally:
            for neighbour in neighbours:
                neighbour.stdin.close()
                neighbour.wait(10)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"ledger on {path.parent} ({args.n} rounds, 3 neighbours' leases on the device)")
    for name, figures in results.items():
        print(f"{name:<10} median {figures['median_ms']:.3f} ms   p99 {figures['p99_ms']:.3f} ms")


if __name__ == "__main__":
    main()
