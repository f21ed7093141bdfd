"""Inside a provisioned kernel (jupyter_sched/runtime/kernel_lease.py): the scheduler reads
``$JUPYTER_SCHED_KERNEL_LEASE``; the local node's GPUs are the leased devices with the leased
share as their room, and its tasks take no lease of their own. A real kernel, given the
variables a provisioner gives (tests/test_provisioner.py checks that it gives them)."""

from __future__ import annotations

import json
import os

import pytest
from kernel_client import Kernel
from waiting import wait_for

from jupyter_sched.host.ledger import Ledger, default_ledger
from jupyter_sched.host.policy import policy_path
from jupyter_sched.provisioner.idle import tell
from jupyter_sched.runtime.kernel_lease import whole_kernel_lease


def test_the_variable_is_read_and_a_bad_one_ignored():
    lease = whole_kernel_lease({"JUPYTER_SCHED_KERNEL_LEASE": json.dumps(
        {"ledger": "/l.db", "held": "mps", "leases": [{"id": 3, "units": 5_000}]})})
    assert lease.text() == "0.5 of GPU 0 (mps)" and lease.ledger == "/l.db"
    for bad in ("{", "[]", '{"leases": []}', '{"leases": [{"units": 0}]}'):
        assert whole_kernel_lease({"JUPYTER_SCHED_KERNEL_LEASE": bad}) is None
    assert whole_kernel_lease({}) is None


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_provisioned_kernels_gpu_is_its_share_and_its_tasks_take_no_lease():
    lease = json.dumps({"ledger": str(default_ledger()), "held": "logical", "kernel": "k1",
                        "leases": [{"id": 1, "device": "declared:h:0", "units": 5_000}]})
    k = Kernel(JUPYTER_SCHED_KERNEL_LEASE=lease, JUPYTER_SCHED_DECLARE="GPU=1",
               CUDA_VISIBLE_DEVICES="1")  # (the host's GPU 1, the kernel's GPU 0)
    try:
        run = k.run("%load_ext jupyter_sched\n%sched leases")
        assert run.error is None, run.error
        assert "this kernel holds 0.5 of GPU 0 (logical) for the whole kernel" in run.stdout
        run = k.run("%%sched --gpus 0.5 --wait --name fits\nimport os\n"
                    "print('sees', os.environ.get('CUDA_VISIBLE_DEVICES'))")
        assert run.error is None and "sees 1" in run.stdout, (run.error, run.stdout)
        run = k.run("%%sched --gpus 1 --name whole\npass")
        assert run.error is None
        reason = k.value("[t.reason for t in __import__('jupyter_sched').get_scheduler()"
                         ".snapshot(fresh=True).waiting if t.name == 'whole']")
        assert reason and "outside this kernel's GPU lease" in reason[0], reason
        with Ledger(default_ledger()) as ledger:
            assert ledger.held() == []  # (its tasks took none)
    finally:
        k.close()


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_what_the_server_tells_a_provisioned_kernel_shows_in_its_notebook(tmp_path):
    path = str(tmp_path / "k.notices")
    k = Kernel(JUPYTER_SCHED_KERNEL_NOTICES=path)
    try:
        assert k.run("%load_ext jupyter_sched.provisioner.notices").error is None
        wait_for(lambda: os.path.exists(path), 30, "the kernel's notice socket")
        assert tell(path, "jupyter-sched: this kernel's GPU has been idle for 30 min")

        def said() -> list[str]:  # (under the cell that ran last, as its stderr)
            k._pump(0.1)
            return [m["content"]["text"] for msgs in k.messages.values() for m in msgs
                    if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]

        assert wait_for(lambda: any("idle for 30 min" in text for text in said()), 30,
                        "the notice printed")
    finally:
        k.close()
    assert not tell(str(tmp_path / "none.notices"), "x")  # (no socket: not told, no error)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_task_beyond_the_users_limit_waits_saying_so():
    path = policy_path(default_ledger())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"max_shares_per_user": 1}))
    path.chmod(0o644)
    k = Kernel()
    try:
        run = k.run("%load_ext jupyter_sched\n%sched local --gpus 2\nimport threading\n"
                    "import jupyter_sched\ngate = threading.Event()\n"
                    "first = jupyter_sched.submit(gate.wait, resources={'GPU': 0.5})\n"
                    "second = jupyter_sched.submit(lambda: 'ran', resources={'GPU': 0.5})")
        assert run.error is None, run.error

        def reason() -> str:
            found = k.value("[t.reason for t in jupyter_sched.get_scheduler()"
                            ".snapshot(fresh=True).waiting]")
            return found[0] if found else ""

        said = wait_for(lambda: "of at most 1 GPU shares" in reason() and reason(), 30,
                        "the second task waiting for the limit")
        assert "holds 1 of at most 1 GPU shares on this host" in said, said
        assert k.value("second.done()") is False
        k.run("gate.set()")
        assert k.value("second.result(timeout=30)") == "ran"  # (once the first gave its back)
    finally:
        k.close()
