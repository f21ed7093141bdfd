"""How soon a kernel waiting for its GPU starts once another kernel is shut down.

    python benchmarks/provisioned_start.py [--rounds 3] [--json]

Each round runs a real Jupyter server from this environment (tests/lab_server.py) on two
declared GPUs, with a kernelspec at 0.5 GPU written by ``jupyter-sched kernelspec install``;
six kernels are started through ``POST api/kernels`` (four start, two wait), then the first two
are shut down one after the other (``DELETE api/kernels/ID``). The latency of each handover is
the ledger's stamp of the waiting kernel's new lease (``taken``) less the moment the DELETE was
sent: it includes the shutdown of the kernel that held the share (goal: under 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "tests"))

from lab_server import Install, LabServer  # noqa: E402
from test_provisioner_server import Starts, run  # noqa: E402


def one_round(work: Path) -> list[float]:
    import subprocess

    os.environ["JUPYTER_SCHED_DECLARE"] = "GPU=2"
    root = work / "root"
    root.mkdir(parents=True)
    server = LabServer(Install(Path(sys.prefix), Path(sys.executable), Path(), ""), root, work)
    try:
        server.wait_ready()
        subprocess.run(["jupyter-sched", "kernelspec", "install", "--gpus", "0.5", "--name",
                        "half", "--user"], env=server.env, check=True, capture_output=True)
        seen = run(server, Starts(server))
        for kernel in server.kernels():
            server.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        return seen["latency"]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for k in range(args.rounds):
            latencies += one_round(Path(folder) / f"round{k}")
    result = {"handovers": len(latencies), "median_s": statistics.median(latencies),
              "max_s": max(latencies), "load": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"handovers {result['handovers']}: median {result['median_s'] * 1000:.0f} ms, "
              f"max {result['max_s'] * 1000:.0f} ms (goal < 1000 ms; load {result['load']:.2f})")


if __name__ == "__main__":
    main()
