"""What the lab extension's tests read as the kernel's output, made by the kernel.

``python tests/lab_fixtures.py`` writes ``labextension/test/fixtures/bundles.json`` (the MIME
bundles of ``%sched``, ``nodes()``, ``queue()``, ``%sched queues``, ``%sched history``, tasks,
a gang and a live status line) and ``labextension/test/fixtures/snapshot.json`` (a comm
snapshot, docs/comm.md); ``tests/test_lab_fixtures.py`` fails while the committed files differ
from what this makes now.

A real :class:`Scheduler` on two declared GPUs is brought to one state, step by step, each step
waited for: tasks done, failed and cancelled (the history, and the timeline's ended holdings),
two running on halves of GPU 0 (one of them stopping: cancelled while its thread sits in a
call Python cannot interrupt), one on a quarter of GPU 1 beside another kernel's half (a lease
taken in the host's ledger for a live child process), one queued for what that kernel holds,
one held, one infeasible whose name is markup, a queue that runs one task at a time with one
waiting, a gang of two, and a notice (the ledger was deleted under the scheduler). Its snapshot
is then shown through the real display code (``jupyter_sched.views.display``, the status line
of ``jupyter_sched.notebook.statusline``) and the comm's (``status_data`` and ``fit`` of
``jupyter_sched.notebook.comm_messages``).

Only what differs from run to run is fixed, in the snapshot before it is shown: times on the
scheduler's clock become the number of the stage of the build they fall in (1, 2, 3 …: each
stage ends when what it waited for was seen, so how the scheduler's steps fell within a stage,
which varies with the machine's load, changes nothing), wall-clock times
(another kernel's ``since``, a notice's ``time``) fixed ones, and the child's pid, the host's
name and the ledger's path fixed values; wherever the kernel wrote them into a reason or a
notice too. Times of day are written in UTC.
"""

from __future__ import annotations

import bisect
import calendar
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "labextension" / "test" / "fixtures"
HOSTILE = "<img src=x onerror=alert(1)>"
PID = 4242                                  # the other kernel's pid, as shown
SINCE = float(calendar.timegm((2026, 11, 26, 12, 3, 4)))  # when it took its share
NOTICE_AT = SINCE + 60.0                   # when the notice was said
HOST = "gpu-host"
LEDGER = "/run/user/1000/jupyter_sched/leases.db"
WAIT = 20.0


def wait_until(what: str, predicate: Callable[[], Any], timeout: float = WAIT) -> Any:
    return wait_for(predicate, timeout, what)


class Fixed:
    """What varies from run to run, and what it is written as instead."""

    def __init__(self, pid: int, ledger: str) -> None:
        self.marks: list[float] = []
        self.words = [(re.compile(rf"\bpid {pid}\b"), f"pid {PID}"),
                      (re.compile(re.escape(ledger)), LEDGER),
                      (re.compile(r"\b(since|at) \d\d:\d\d:\d\d\b"),
                       rf"\1 {time.strftime('%H:%M:%S', time.gmtime(SINCE))}")]

    def clock(self, marks: list[float]) -> None:
        """Scheduler times become the number of the stage they fall in (``marks``: the
        scheduler's time at the end of each stage), from 1."""
        self.marks = marks

    def time(self, t: float | None) -> float | None:
        return None if t is None else float(bisect.bisect_left(self.marks, t) + 1)

    def text(self, text: str) -> str:
        for pattern, fixed in self.words:
            text = pattern.sub(fixed, text)
        return text

    def task(self, view: Any) -> Any:
        return dataclasses.replace(
            view, reason=self.text(view.reason), submitted=self.time(view.submitted),
            started=self.time(view.started), ended=self.time(view.ended),
            stopping_since=self.time(view.stopping_since))

    def snapshot(self, snap: Any) -> Any:
        nodes = []
        for node in snap.nodes:
            devices = tuple(dataclasses.replace(d, others=tuple(
                dataclasses.replace(o, pid=PID, since=SINCE) for o in d.others))
                for d in node.devices)
            labels = {k: HOST if k == "host" else v for k, v in node.labels.items()}
            nodes.append(dataclasses.replace(node, devices=devices, labels=labels))
        return dataclasses.replace(
            snap, time=self.time(snap.time), nodes=tuple(nodes),
            running=tuple(map(self.task, snap.running)),
            waiting=tuple(map(self.task, snap.waiting)),
            history=tuple(map(self.task, snap.history)),
            notices=tuple((seq, NOTICE_AT, self.text(text)) for seq, _, text in snap.notices))


def _other_kernel(path: Path, device: str, units: int, child: subprocess.Popen) -> None:
    """Another kernel's lease: bob's notebook train.ipynb holds ``units`` of ``device``."""
    from jupyter_sched.host.ledger import Ledger
    from jupyter_sched.host.ledger.holders import Owner

    me = Owner.current()
    owner = Owner(me.uid, "bob", child.pid, psutil.Process(child.pid).create_time(), me.host,
                  me.pidns, "notebook train.ipynb")
    with Ledger(path, owner=owner) as ledger:
        ledger.take(device, units, task="t31")


def build(sched: Any, path: Path, child: subprocess.Popen) -> tuple[Any, dict[str, Any]]:
    """Bring ``sched`` to the fixture's state; its snapshot and the handles by name."""
    from jupyter_sched.host.discovery import GpuInfo
    from jupyter_sched.host.ledger import device_key

    gates = [threading.Event() for _ in range(5)]
    marks: list[float] = []  # the scheduler's time at the end of each stage
    h: dict[str, Any] = {"gates": gates, "marks": marks}

    def wait_for(what: str, predicate: Callable[[], Any]) -> Any:
        seen = wait_until(what, predicate)
        marks.append(sched.inspect_core(lambda core: core.now))
        return seen

    sched.set_queue("research", weight=2, max_running=1)
    h["prep"] = sched.submit(lambda: "ready", resources="CPU=1", name="prep")
    wait_for("prep done", lambda: h["prep"].result(WAIT) == "ready")
    h["warmup"] = sched.submit(lambda: "warm", resources="GPU=0.5", name="warmup")
    wait_for("warmup done", lambda: h["warmup"].result(WAIT) == "warm")
    h["broken"] = sched.submit(lambda: 1 / 0, resources="CPU=1", name="broken")
    wait_for("broken failed", lambda: h["broken"].done())
    h["train-a"] = sched.submit(gates[0].wait, resources="GPU=0.5", name="train-a")
    wait_for("train-a running", lambda: h["train-a"].state == "running")

    path.unlink()  # the ledger is deleted under the scheduler: it takes back what it holds
    wait_for("the notice", lambda: any("was deleted" in n[2] for n in sched.notices()))
    # a ledger made again counts every GPU as held until its grace is over
    wait_for("the grace's end",
             lambda: sched.snapshot(fresh=True).nodes[0].devices[1].allocated == 0)

    h["train-b"] = sched.submit(gates[1].wait, resources="GPU=0.5", name="train-b")
    wait_for("train-b running", lambda: h["train-b"].state == "running")
    gpu1 = GpuInfo(1, None, "", "declared", None, declared=True)
    _other_kernel(path, device_key(gpu1, sched.local_host.key), 5000, child)
    wait_for("the other kernel's lease",
             lambda: sched.snapshot(fresh=True).nodes[0].devices[1].others)
    h["eval"] = sched.submit(gates[2].wait, resources="GPU=0.25", name="eval")
    wait_for("eval running", lambda: h["eval"].state == "running")
    h["train-c"] = sched.submit(lambda: "late", resources="GPU=0.5", name="train-c")
    wait_for("train-c waiting for the other kernel",
             lambda: "another kernel" in (sched.record(h["train-c"].id).reason or ""))
    h["sweep"] = sched.submit(lambda: "swept", resources="GPU=0.5", name="sweep")
    wait_for("sweep queued", lambda: h["sweep"].state == "queued")
    sched.hold(h["sweep"])
    h["abandoned"] = sched.submit(lambda: "never", resources="GPU=0.5", name="abandoned")
    wait_for("abandoned queued", lambda: h["abandoned"].state == "queued")
    sched.cancel(h["abandoned"], reason="cancelled by the user")
    wait_for("abandoned cancelled", lambda: h["abandoned"].done())
    h["hostile"] = sched.submit(lambda: None, resources="GPU=4", name=HOSTILE)
    wait_for("the markup infeasible", lambda: h["hostile"].state == "infeasible")
    h["ablation"] = sched.submit(gates[3].wait, resources="CPU=1", name="ablation",
                                 queue="research")
    wait_for("ablation running", lambda: h["ablation"].state == "running")
    h["ablation-2"] = sched.submit(lambda: "second", resources="CPU=1", name="ablation-2",
                                   queue="research")
    wait_for("ablation-2 queued", lambda: h["ablation-2"].state == "queued")
    h["ddp"] = sched.submit(gates[4].wait, resources="CPU=1", gang=("ddp", 2))
    wait_for("ddp running", lambda: all(m.state == "running" for m in h["ddp"].members))
    # stopped while its thread waits in a call Python cannot interrupt: stopping until it ends
    sched.cancel(h["train-b"], reason="cancelled from the Scheduler sidebar")
    wait_for("train-b stopping", lambda: any(
        v.state == "stopping" for v in sched.snapshot(fresh=True).running))
    snap = sched.snapshot(fresh=True)
    marks.append(snap.time)  # (the last stage: what happened since, and the snapshot)
    return snap, h


def render(sched: Any, snap: Any, h: dict[str, Any], fixed: Fixed) -> dict[str, Any]:
    """The bundles and the comm snapshot of ``snap``, with what varies fixed."""
    from jupyter_sched.notebook import comm, comm_messages, statusline
    from jupyter_sched.views import display, history
    from jupyter_sched.views.timeline import WINDOW, GpuRun

    real_runs = comm._runs_of(sched)
    views = [*snap.running, *snap.waiting, *snap.history]
    runs = {v.id: real_runs(v.id) or [] for v in views}
    fixed.clock(h["marks"])
    shown = fixed.snapshot(snap)

    def runs_of(task_id: str) -> list[GpuRun]:
        return [GpuRun(r.node, r.gpus, fixed.time(r.start), fixed.time(r.end))
                for r in runs.get(task_id, [])]

    by_id = {v.id: v for v in (*shown.running, *shown.waiting, *shown.history)}
    view = {name: by_id[handle.id] for name, handle in h.items()
            if name not in ("gates", "marks", "ddp")}
    members = [by_id[m.id] for m in h["ddp"].members]
    broken = statusline.error_text(h["broken"])
    line = statusline.render_line([view["train-a"]], now=shown.time)
    bundles = {
        "status": display.status_bundle(shown),
        "nodes": display.nodes_bundle(shown),
        "queue": display.queue_bundle(shown),
        "queues": display.queues_bundle(shown),
        "history": history.history_bundle(shown),
        "task": display.task_bundle(view["train-a"], now=shown.time),
        "infeasible": display.task_bundle(view["hostile"], now=shown.time),
        "failed": display.task_bundle(view["broken"], broken, now=shown.time),
        "gang": display.gang_bundle("ddp", members, now=shown.time),
        "line": line,
    }
    data, _ = comm_messages.fit(comm_messages.status_data(shown, WINDOW, runs_of))
    snapshot = {"v": comm_messages.VERSION, "kind": "snapshot", "seq": 1, "data": data}
    return {"bundles.json": bundles, "snapshot.json": snapshot}


@contextlib.contextmanager
def utc() -> Iterator[None]:
    """Times of day in UTC (reasons, holder lines), and the time zone as it was after."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def make() -> dict[str, str]:
    """The fixture files' names and their text, made now."""
    from jupyter_sched.runtime.scheduler import Scheduler

    with utc(), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "leases.db"
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        sched = Scheduler(local_resources="GPU=2,gpu_memory=16GiB,CPU=4,memory=8GiB",
                          ledger_path=str(path), update_interval=0.02)
        h: dict[str, Any] = {"gates": []}
        try:
            sched.start()
            snap, h = build(sched, path, child)
            files = render(sched, snap, h, Fixed(child.pid, str(path)))
        finally:
            for gate in h["gates"]:
                gate.set()
            sched.shutdown()
            child.kill()
            child.wait()
    return {name: json.dumps(value, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
            for name, value in files.items()}


def main() -> None:
    for name, text in make().items():
        (FIXTURES / name).write_text(text)
        print(f"wrote {(FIXTURES / name).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
