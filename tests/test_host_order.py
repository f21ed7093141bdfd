"""One host, several kernels: the host-wide order among waiting work, with real kernels.

Kernel A keeps a backlog of half-GPU tasks on two declared GPUs; kernel B then asks for the
whole host, a whole GPU or a half: B starts within seconds, not after A's backlog. Every task
writes down where and when it ran, and no device is ever held beyond 1.0 across both kernels.
Another test shows B's wait where its user looks: the reason in ``%sched queue`` and in the
status line names who holds what and B's place on the host.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from test_leases_kernels import kernels, most_held

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SOON = 10.0  # seconds B may wait behind A's backlog at most (the bar)
WORK = '''
import json, time, jupyter_sched
def work(i, log={log!r}, kernel={name!r}, seconds={seconds!r}):
    task = jupyter_sched.current_task()
    start = time.time()
    time.sleep(seconds)
    end = time.time()
    with open(log, "a") as f:  # one line per device it held
        for device, share in task.devices["GPU"].items():
            f.write(json.dumps(dict(kernel=kernel, i=i, device=device, share=share,
                                    start=start, end=end)) + "\\n")
    return 0
'''


def records(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def started_within(b, log, gpus: float, budget: float) -> float:
    """Submit ``gpus`` in kernel B; return how long it waited to start."""
    b.run(f"import time\nasked = time.time()\nhb = jupyter_sched.submit(work, 'b', "
          f"resources={{'GPU': {gpus}}})")
    assert b.value(f"hb.result({budget + 60}) in (0, 1)")
    asked = b.value("asked")
    mine = [r for r in records(log) if r["kernel"] == "b" and r["start"] >= asked]
    assert mine
    return mine[0]["start"] - asked


@pytest.mark.parametrize("want", [2])
def test_a_whole_host_demand_starts_within_seconds_behind_a_backlog_of_halves(
        monkeypatch, tmp_path, want):
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, tmp_path / "leases.db", 2) as (a, b):
        for name, k, seconds in (("a", a, 1.0), ("b", b, 0.2)):
            assert k.run(WORK.format(log=str(log), name=name, seconds=seconds)).error is None
        a.run("hs = [jupyter_sched.submit(work, i, resources={'GPU': 0.5}) for i in range(200)]")
        deadline = time.monotonic() + 30
        while len([r for r in records(log)] if log.exists() else []) < 4:
            assert time.monotonic() < deadline, "kernel A's backlog never started"
            time.sleep(0.2)
        waited = started_within(b, log, want, SOON)
        assert waited < SOON, f"B waited {waited:.1f} s behind A's backlog"
        a.run("jupyter_sched.get_scheduler().cancel_all()")
        a.value("jupyter_sched.get_scheduler().wait(timeout=60) and 0")
    assert max(most_held(records(log)).values()) <= 1.0 + 1e-9


def test_whole_and_half_gpus_start_within_seconds_beside_a_stream_of_short_tasks(
        monkeypatch, tmp_path):
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, tmp_path / "leases.db", 2) as (a, b):
        for name, k, seconds in (("a", a, 0.1), ("b", b, 0.2)):
            assert k.run(WORK.format(log=str(log), name=name, seconds=seconds)).error is None
        a.run("hs = [jupyter_sched.submit(work, i, resources={'GPU': 0.5}) "
              "for i in range(3000)]")
        deadline = time.monotonic() + 30
        while len(records(log) if log.exists() else []) < 20:
            assert time.monotonic() < deadline, "kernel A's stream never started"
            time.sleep(0.2)
        for want in (1, 0.5):
            waited = started_within(b, log, want, SOON)
            assert waited < SOON, f"B's GPU={want} waited {waited:.1f} s beside A's stream"
        ran = len([r for r in records(log) if r["kernel"] == "a"])
        assert ran > 20  # A went on meanwhile
        a.run("jupyter_sched.get_scheduler().cancel_all()")
        a.value("jupyter_sched.get_scheduler().wait(timeout=60) and 0")
    assert max(most_held(records(log)).values()) <= 1.0 + 1e-9


def test_a_waiting_task_says_who_holds_what_and_its_place_on_the_host(monkeypatch, tmp_path):
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, tmp_path / "leases.db", 2, gpus=1) as (a, b):
        for name, k, seconds in (("a", a, 600), ("b", b, 0.1)):
            assert k.run(WORK.format(log=str(log), name=name, seconds=seconds)).error is None
        a.run("h = jupyter_sched.submit(work, 0, resources={'GPU': 1})")
        deadline = time.monotonic() + 30
        while a.value("h.state") != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        pid = a.value("__import__('os').getpid()")
        run = b.run("%%sched --gpus 1 --name needs-all --out w\nwork(1)")
        deadline = time.monotonic() + 30
        while "this kernel is 1st on this host for GPU 0" not in b.value("w.reason"):
            assert time.monotonic() < deadline, b.value("w.reason")
            time.sleep(0.2)
        reason = b.value("w.reason")
        assert f"1 of GPU 0 is held by another kernel (pid {pid}" in reason, reason
        assert "since " in reason
        queue = b.run("%sched queue").stdout + "".join(b.run("%sched queue").texts())
        assert f"pid {pid}" in queue and "1st on this host for GPU 0" in queue, queue
        lines = b.run("w").texts()
        assert lines and "queued" in lines[0]
        status = b.until(run.msg_id, lambda r: any(
            f"pid {pid}" in x and "1st on this host for GPU 0" in x for x in r.status_lines()),
            timeout=30)  # the live line under the cell says it too
        assert status.status_lines()[-1].startswith("[sched] t")
        os.kill(pid, signal.SIGKILL)  # (its task sleeps in one call: a cancel waits for it)
        b.value("w.result(60)")
        assert b.value("w.state") == "done"
