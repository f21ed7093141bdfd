"""The server extension's look at the host (jupyter_sched/server/look.py) on real ledgers: no
ledger yet, one made later, one replaced, one a writer opens after the look did; who holds
what each wait waits for; GPUs from the fake NVML and the devices leases name; the metrics of
a look."""

from __future__ import annotations

import os

import pytest
from ledger_peer import Peer
from prometheus_client.parser import text_string_to_metric_families

from jupyter_sched.host.ledger import Ledger, WaitSpec
from jupyter_sched.host.ledger.fairness import GpuDemand
from jupyter_sched.server.look import HostLook
from jupyter_sched.server.metrics import metrics_text
from jupyter_sched.testing import FakeNvml

NVML = FakeNvml([("A100", "80GiB"), ("T4", "16GiB")])
A, B = (d.uuid for d in NVML.devices)


def test_no_ledger_then_one_made_then_one_replaced(tmp_path):
    path = tmp_path / "leases.db"
    look = HostLook(path, NVML, 900.0)
    try:
        host = look.look()
        assert (host["found"], host["leases"]) == (False, [])
        assert [g["key"] for g in host["gpus"]] == [A, B]
        with Ledger(path) as ledger:
            assert ledger.take(A, 5_000, task="t1")
            assert [row["task"] for row in look.look()["leases"]] == ["t1"]
        # the writer closed (its -wal gone): the look opens it again and still reads it
        assert [row["task"] for row in look.look()["leases"]] == ["t1"]
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        with Ledger(other / "leases.db") as ledger:  # (another ledger, put in its place)
            assert ledger.take(B, 10_000, task="t2")
        for end in ("-wal", "-shm"):  # (moved aside with the old file, as a heal does)
            (tmp_path / f"leases.db{end}").unlink(missing_ok=True)
        os.replace(other / "leases.db", path)
        assert [row["task"] for row in look.look()["leases"]] == ["t2"]
    finally:
        look.close()


def test_a_ledger_read_before_any_writer_shows_later_writes(tmp_path):
    path = tmp_path / "leases.db"
    Ledger(path).close()  # (a ledger no process has open: read immutable)
    look = HostLook(path, None, 900.0)
    try:
        assert look.look()["leases"] == []
        with Ledger(path) as ledger:
            assert ledger.take("declared:h:0", 2_500, task="t1")
            host = look.look()
            assert [row["task"] for row in host["leases"]] == ["t1"]
            (gpu,) = host["gpus"]
            assert gpu == {"key": "declared:h:0", "name": "declared GPU 0", "index": None,
                           "declared": True, "memory_total": None, "memory_used": None,
                           "utilization": None, "held": 0.25}
    finally:
        look.close()


def test_each_wait_says_who_holds_what_it_waits_for(tmp_path):
    path = tmp_path / "leases.db"
    look = HostLook(path, NVML, 900.0)
    with Ledger(path) as ledger:
        assert ledger.take(A, 5_000, task="t1") and ledger.take(B, 2_500, task="t2")
        ledger.set_waits([WaitSpec("t3", GpuDemand(10_000, 1, (A,)), 0, 0.0),
                          WaitSpec("t4", GpuDemand(10_000, 2, ()), 0, 0.0)])
        host = look.look()
    look.close()
    me = host["leases"][0]["user"]
    by_task = {wait["task"]: wait["held_by"] for wait in host["waits"]}
    assert by_task == {"t3": [{"user": me, "share": 0.5}], "t4": [{"user": me, "share": 0.75}]}


def test_the_metrics_of_a_look(tmp_path):
    NVML.set_utilization(0, 80)
    NVML.set_memory_used(0, 2**30)
    path = tmp_path / "leases.db"
    look = HostLook(path, NVML, 900.0)
    with Ledger(path) as ledger:
        assert ledger.take(A, 5_000, task="t1")
        host = look.look()
    look.close()
    me = host["leases"][0]["user"]
    families = {f.name: f for f in text_string_to_metric_families(metrics_text(host).decode())}
    samples = {(name, tuple(sorted(s.labels.items()))): s.value
               for name, f in families.items() for s in f.samples}
    assert samples[("jupyter_sched_shares_held", (("gpu", A), ("user", me)))] == 0.5
    assert samples[("jupyter_sched_idle_shares", (("gpu", A), ("user", me)))] == 0.0
    assert samples[("jupyter_sched_gpu_utilization_percent", (("gpu", A), ("name", "A100")))] \
        == 80
    assert samples[("jupyter_sched_gpu_memory_used_bytes", (("gpu", A), ("name", "A100")))] \
        == 2**30
    # a reading NVML does not give is left out, not reported as 0
    assert ("jupyter_sched_gpu_utilization_percent", (("gpu", B), ("name", "T4"))) not in samples
    assert samples[("jupyter_sched_gpu_held", (("gpu", B), ("name", "T4")))] == 0.0


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_two_processes_of_one_kernel_are_asked_whether_they_live_each(tmp_path):
    # (a kernel's leases may be taken by the kernel and by a process that started it: the
    # one that ended is named ended, the other not, though both hold for the same kernel)
    path = tmp_path / "leases.db"
    starter, kernel = Peer(path, "a.ipynb", kernel="k1"), Peer(path, "a.ipynb", kernel="k1")
    look = HostLook(path, None, 900.0, recheck=0.0)
    try:
        assert isinstance(starter("take", "declared:h:0", 5_000, ""), int)
        assert isinstance(kernel("take", "declared:h:0", 5_000, "t1"), int)
        starter.kill()
        alive = {row["task"]: row["alive"] for row in look.look()["leases"]}
        assert alive == {"": False, "t1": True}
    finally:
        look.close()
        starter.close()
        kernel.close()


def test_a_file_that_is_no_ledger_is_said_and_the_gpus_still_shown(tmp_path):
    path = tmp_path / "leases.db"
    path.write_bytes(b"not a ledger at all" * 100)
    look = HostLook(path, NVML, 900.0)
    host = look.look()
    look.close()
    assert host["found"] is False and str(path) in host["error"]
    assert [g["key"] for g in host["gpus"]] == [A, B]
