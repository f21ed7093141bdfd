"""Host-wide leases: what a take, a give, a liveness check and a heal cost, with 100 holders.

    python benchmarks/leases.py [--n 5000] [--holders 100] [--dir DIR] [--json]

``--holders`` other processes each hold 0.01 of one device (the *crowded* device: 100 holders
fill it) and so have a holder file each beside the ledger, as the kernels of a busy shared
host would. On a ledger in a fresh directory (default: a temporary one; ``--dir`` measures
another filesystem), one process then measures, ``n`` times each:

* take+give of 0.25 of a free device, with the 100 holders' leases in the ledger (what a
  scheduler's step pays; goal: median < 1 ms);
* a refused take of the crowded device: the 100 holders are looked at first (each a lock
  check) before the refusal says who holds what;
* ``version()``, the poll a scheduler makes to notice another kernel's change;
* one liveness check of a live holder (its file opened, its lock tested), and of one whose
  file is missing;
* a heal of the ledger from the 100 holder files (after a deletion: every lease made again);
* SQLite's check of every page, through a connection of its own, that each holding process
  makes every ``DEEP_LOOK`` s (2 s; longer when it is slow: it takes at most 0.5% of a core).
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
from jupyter_sched.host.ledger.damage import deep_damage
from jupyter_sched.host.ledger.holders import Owner

WARMUP = 200
DEVICE = "GPU-00000000-bench-4000-8000-000000000000"
CROWDED = "GPU-11111111-bench-4000-8000-111111111111"
_HOLDER = """
import sys
sys.path.insert(0, sys.argv[3])
from jupyter_sched.host.ledger import Ledger
assert Ledger(sys.argv[1], label="neighbour.ipynb").take(sys.argv[2], 100)
print("ready", flush=True)
sys.stdin.read()
"""


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1e3,
            "p99_ms": ordered[int(len(ordered) * 0.99)] * 1e3, "n": len(ordered)}


def _timed(fn, n: int) -> list[float]:
    perf, out = time.perf_counter, []
    for i in range(n + WARMUP):
        t0 = perf()
        fn(i)
        if i >= WARMUP:
            out.append(perf() - t0)
    return out


def measure(path: Path, n: int) -> dict[str, dict[str, float]]:
    with Ledger(path, label="bench.ipynb") as ledger:
        pair = _timed(lambda i: ledger.give(ledger.take(DEVICE, 2_500, task=str(i))), n)
        refused = _timed(lambda i: ledger.take(CROWDED, 2_500), max(n // 10, 50))
        polls = _timed(lambda i: ledger.version(), n)
        live = ledger.held(CROWDED)[0].owner
        liveness = ledger.liveness
        alive = _timed(lambda i: liveness.alive(live), n)
        gone = Owner(live.uid, live.user, live.pid, live.started, live.host, live.pidns,
                     holder="0" * 32, ticks=live.ticks)
        missing = _timed(lambda i: liveness.alive(gone), n)
        pages = _timed(lambda i: deep_damage(path), max(n // 10, 50))
        heals = []
        for _ in range(20):
            path.unlink()
            t0 = time.perf_counter()
            ledger.look_after()
            heals.append(time.perf_counter() - t0)
        assert len(ledger.held(CROWDED)) == len(ledger.held()), "a heal lost a holder's lease"
    return {"take+give": _stats(pair), "refused take (100 holders)": _stats(refused),
            "version": _stats(polls), "liveness (live holder)": _stats(alive),
            "liveness (file missing)": _stats(missing), "page check": _stats(pages),
            "heal (100 holders)": _stats(heals)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000)
    parser.add_argument("--holders", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = Path(directory) / "leases.db"
        root = str(Path(__file__).resolve().parent.parent)
        neighbours = []
        try:
            for _ in range(args.holders):
                neighbours.append(subprocess.Popen(
                    [sys.executable, "-c", _HOLDER, str(path), CROWDED, root],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            for neighbour in neighbours:
                assert neighbour.stdout.readline().strip() == "ready"
            results = measure(path, args.n)
        finally:
            for neighbour in neighbours:
                neighbour.stdin.close()
                neighbour.wait(30)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"ledger on {path.parent} ({args.n} rounds; {args.holders} holder processes)")
    for name, figures in results.items():
        print(f"{name:<28} median {figures['median_ms']:.3f} ms   p99 "
              f"{figures['p99_ms']:.3f} ms")


if __name__ == "__main__":
    main()
