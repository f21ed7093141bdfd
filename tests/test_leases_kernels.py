"""Two real kernels on one host share its GPUs through the lease ledger: no device is ever
held beyond a whole one across both, a killed holder's lease frees up, a damaged ledger is
made again and loses no task, and one that cannot be made holds GPU work with the reason.

Each kernel declares two logical GPUs (``%sched local --gpus 2``); declared GPU ``i`` has the
same device key in every process of the host, so the two kernels contend for the same devices.
Each test gives its kernels a ledger of its own through ``$JUPYTER_SCHED_LEASES``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest
from kernel_client import Kernel

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SETUP = "%load_ext jupyter_sched\n%sched local --gpus {gpus} --cpus 4 --mem 8GiB"
WORK = '''
import json, time, jupyter_sched
def work(i, log={log!r}, kernel={name!r}, seconds={seconds!r}):
    task = jupyter_sched.current_task()
    ((device, share),) = task.devices["GPU"].items()
    start = time.time()
    time.sleep(seconds)
    end = time.time()
    with open(log, "a") as f:
        f.write(json.dumps(dict(kernel=kernel, i=i, device=device, share=share,
                                start=start, end=end)) + "\\n")
    return device
'''


@contextlib.contextmanager
def kernels(monkeypatch, ledger, count, gpus=2):
    monkeypatch.setenv("JUPYTER_SCHED_LEASES", str(ledger))
    started = []
    try:
        for _ in range(count):
            k = Kernel()
            started.append(k)
            run = k.run(SETUP.format(gpus=gpus) + "\nimport jupyter_sched")
            assert run.error is None and "UsageError" not in run.stderr, (run.error, run.stderr)
        yield started
    finally:
        for k in started:
            with contextlib.suppress(Exception):
                k.close()


def most_held(records) -> dict[int, float]:
    """The largest total share each device had at any moment, across every record."""
    most: dict[int, float] = {}
    for r in records:
        t = r["start"]
        total = sum(o["share"] for o in records
                    if o["device"] == r["device"] and o["start"] <= t < o["end"])
        most[r["device"]] = max(most.get(r["device"], 0.0), total)
    return most


def test_two_kernels_never_hold_a_device_beyond_one(monkeypatch, tmp_path):
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, tmp_path / "leases.db", 2) as (a, b):
        ids = []
        for name, k in (("a", a), ("b", b)):
            assert k.run(WORK.format(log=str(log), name=name, seconds=1.0)).error is None
            ids.append(k.start("hs = [jupyter_sched.submit(work, i, resources={'GPU': 0.5}) "
                               "for i in range(4)]"))
        for k in (a, b):
            assert sorted(k.value("[h.result(120) in (0, 1) for h in hs]")) == [True] * 4
        for k in (a, b):  # (once both kernels' tasks ended: one's may outlast the other's)
            run = k.run("%sched leases")
            assert "no leases" in run.stdout, run.stdout
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted((r["kernel"], r["i"]) for r in records) == [
        (k, i) for k in "ab" for i in range(4)]
    assert max(most_held(records).values()) <= 1.0 + 1e-9, records
    # four 0.5 tasks of one kernel alone fill both devices: the other's had to wait for them
    first = min(r["end"] for r in records)
    assert len([r for r in records if r["start"] < first]) == 4, records


def until_value(k, expression, want, timeout=30.0):
    deadline = time.monotonic() + timeout
    while (got := k.value(expression)) != want:
        assert time.monotonic() < deadline, f"{expression} is {got!r}, not {want!r}"
        time.sleep(0.2)


def test_a_killed_holders_lease_frees_up(monkeypatch, tmp_path):
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, tmp_path / "leases.db", 2, gpus=1) as (a, b):
        for name, k, seconds in (("a", a, 600), ("b", b, 0.1)):
            assert k.run(WORK.format(log=str(log), name=name, seconds=seconds)).error is None
            k.run("h = jupyter_sched.submit(work, 0, resources={'GPU': 1})")
            if k is a:
                until_value(a, "h.state", "running")
        # b's scheduler read the ledger and placed what it could: h waits for a's lease
        until_value(b, "'held by another kernel' in jupyter_sched.get_scheduler()"
                       ".record(h.id).reason", True)
        assert b.value("h.state") == "queued"
        reason = b.value("jupyter_sched.get_scheduler().record(h.id).reason")
        pid = a.value("__import__('os').getpid()")
        assert f"1 of GPU 0 is held by another kernel (pid {pid}" in reason, reason
        listing = b.run("%sched leases").stdout
        assert "declared GPU 0" in listing and f" {pid} " in listing, listing
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        assert b.value("h.result(30)") == 0
        (record,) = [json.loads(line) for line in log.read_text().splitlines()]
        assert record["kernel"] == "b" and record["start"] - killed < 10.0, record


def test_a_damaged_ledger_is_made_again_and_loses_no_task(monkeypatch, tmp_path):
    ledger = tmp_path / "leases.db"
    ledger.write_bytes(b"not a database at all " * 200)
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, ledger, 1) as (k,):
        said = "".join(run_stderr(k, msg_id) for msg_id in list(k.messages))
        assert said.count("lease ledger") == 1, said  # told once, under the cell
        assert "it was healed by this kernel at" in said, said
        assert k.run(WORK.format(log=str(log), name="k", seconds=0.1)).error is None
        k.run("hs = [jupyter_sched.submit(work, i, resources={'GPU': 0.5}) for i in range(6)]")
        assert set(k.value("[h.result(60) for h in hs]")) <= {0, 1}
        assert len(log.read_text().splitlines()) == 6
        assert max(most_held([json.loads(x) for x in log.read_text().splitlines()]).values()) \
            <= 1.0 + 1e-9
        assert "this kernel takes leases" in k.run("%sched leases").stdout


def test_a_ledger_that_cannot_be_made_holds_gpu_work_and_says_why(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    ledger = blocker / "leases.db"  # under a file: it can be neither made nor opened
    with kernels(monkeypatch, ledger, 1) as (k,):
        said = "".join(run_stderr(k, msg_id) for msg_id in list(k.messages))
        assert said.count("lease ledger cannot be used") == 1, said
        assert "host_leases = False" in said, said
        k.run("g = jupyter_sched.submit(lambda: 'gpu', resources={'GPU': 0.5})\n"
              "c = jupyter_sched.submit(lambda: 'cpu', resources={'CPU': 1})")
        assert k.value("c.result(30)") == "cpu"  # (submitted after g: g was placed first,
        until_value(k, "'cannot be used' in g.reason", True)  # or kept waiting, and said why)
        assert k.value("g.state") == "queued"
        assert "GPU work waits" in k.run("%sched leases").stdout
        k.run("%config Scheduler.host_leases = False")


def run_stderr(kernel, msg_id) -> str:
    return "".join(m["content"]["text"] for m in kernel.messages[msg_id]
                   if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
