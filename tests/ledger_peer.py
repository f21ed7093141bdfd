"""Another process using a lease ledger, driven line by line from a test (JSON in, JSON out).

    python tests/ledger_peer.py LEDGER [LABEL] [-f kernel-ID.json]

(:class:`Peer` starts and drives it from a test.)

Each line on stdin is ``[verb, *args]``; the answer is one JSON line: ``{"ok": value}`` or
``{"error": "Kind: text"}``. Verbs: ``take DEVICE UNITS [TASK]`` (the lease's id, or the
refusal's text), ``give ID``, ``sweep`` (how many were taken back), ``held`` (``[[user,
device, units, task, id], ...]``), ``step SECONDS`` (this process's wall clock),
``look`` (what :meth:`Ledger.look_after` tells), ``wait DEVICE UNITS TASK`` (this
process's one wait), ``waits`` (the host's, in order), ``pid``, ``token``, ``exit``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jupyter_sched.host.ledger import Ledger, WaitSpec
    from jupyter_sched.host.ledger.fairness import GpuDemand
    from jupyter_sched.host.ledger.holders import token
    from jupyter_sched.testing import step_wall_clock

    ledger = Ledger(sys.argv[1], label=sys.argv[2] if len(sys.argv) > 2 else "peer.ipynb",
                    timeout=float(os.environ.get("PEER_TIMEOUT", "10")))

    def held() -> list:
        return [[lease.owner.user, lease.device, lease.units, lease.task, lease.id]
                for lease in ledger.held()]

    verbs = {
        "take": lambda device, units, task="": (
            lambda got: got.id if got else str(got))(ledger.take(device, int(units), task=task)),
        "give": lambda lease_id: ledger.give(int(lease_id)),
        "sweep": lambda: len(ledger.sweep()),
        "held": held,
        "step": lambda seconds: step_wall_clock(float(seconds)),
        "wait": lambda device, units, task: ledger.set_waits(
            [WaitSpec(task, GpuDemand(int(units), 1, (device,)), 0, 0.0)]),
        "waits": lambda: [[w.user, w.pid, w.task, w.holder] for w in ledger.view()[1].waits],
        "look": lambda: [healing.text(ledger.path) for healing in ledger.look_after()],
        "pid": os.getpid,
        "token": token,
    }
    print(json.dumps({"ok": "ready"}), flush=True)
    for line in sys.stdin:
        verb, *args = json.loads(line)
        if verb == "exit":
            break
        try:
            answer = {"ok": verbs[verb](*args)}
        except Exception as err:  # (told to the test, which decides)
            answer = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(answer), flush=True)


class Peer:
    """This script run as another process using the ledger at ``path``, driven from a test
    (``prefix``: run it under, e.g., ``unshare`` or ``runuser``; ``kernel``: the Jupyter
    kernel id it holds for)."""

    def __init__(self, path: Path, label: str = "peer.ipynb", prefix: tuple = (),
                 timeout: float = 10.0, kernel: str = "") -> None:
        env = {**os.environ, "PEER_TIMEOUT": str(timeout)}
        # (a kernel's id is read from its connection file's name, as Jupyter starts kernels)
        named = ["-f", f"kernel-{kernel}.json"] if kernel else []
        self.process = subprocess.Popen([*prefix, sys.executable, __file__, str(path), label,
                                         *named],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)
        assert self._answer() == {"ok": "ready"}

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        assert line, f"the peer ended (exit code {self.process.poll()})"
        return json.loads(line)

    def ask(self, verb: str, *args) -> dict:
        self.process.stdin.write(json.dumps([verb, *args]) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def __call__(self, verb: str, *args):
        answer = self.ask(verb, *args)
        assert "ok" in answer, answer
        return answer["ok"]

    @property
    def pid(self) -> int:
        """The pid of the process that holds (in this namespace)."""
        process = psutil.Process(self.process.pid)
        children = process.children(recursive=True)
        return children[-1].pid if children else process.pid

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


if __name__ == "__main__":
    main()
