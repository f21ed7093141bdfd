"""The module-level API on the kernel-wide scheduler, and the package's lazy exports."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import CancelledError
from pathlib import Path

import pytest

import jupyter_sched as js

pytestmark = [pytest.mark.timeout(60), pytest.mark.scheduler("GPU=2", kernel_wide=True)]

ROOT = Path(__file__).resolve().parent.parent
WAIT = 10


def test_get_scheduler_is_one_started_instance(sched):
    assert sched.started
    assert js.get_scheduler() is sched
    assert sched.local_resources == "GPU=2"
    (node,) = js.nodes()
    assert node.name == "local" and len(node.devices) == 2


def test_get_scheduler_starts_a_new_one_after_shutdown(sched):
    sched.shutdown()
    again = js.get_scheduler(local_resources="GPU=1")
    try:
        assert again is not sched and again.started
    finally:
        again.shutdown()


def test_submit_wait_and_cancel(sched):
    h = js.submit(lambda x: x + 1, 1, resources="GPU=0.5")
    assert js.wait([h], timeout=WAIT) == [h]
    assert h.result() == 2
    gate = threading.Event()

    def hold():
        while not gate.wait(0.005):
            pass

    blockers = [js.submit(hold, resources="GPU=1") for _ in range(2)]
    queued = js.submit(hold, resources="GPU=1", name="third")
    assert [t.id for t in js.queue()] == [*(b.id for b in blockers), queued.id]
    assert js.cancel("third") is True
    with pytest.raises(CancelledError):
        queued.result(WAIT)
    gate.set()
    assert all(h.done() for h in js.wait(timeout=WAIT))


def test_wait_times_out_with_a_count(sched):
    gate = threading.Event()
    h = js.submit(gate.wait, WAIT)
    with pytest.raises(TimeoutError, match="1 of 1"):
        js.wait(h, timeout=0.05)
    gate.set()
    assert js.wait(h.id, timeout=WAIT) == [h]


def test_map_is_one_submission(sched):
    handles = js.map(lambda v: v * v, range(20), resources="GPU=0.25")
    assert [h.result(WAIT) for h in handles] == [v * v for v in range(20)]
    assert handles[3].name == "<lambda>[3]"
    with pytest.raises(ValueError, match=r"1\.5"):
        js.map(abs, [1, 2], resources="GPU=1.5")
    assert js.map(abs, []) == []


def test_current_task_is_exported():
    assert js.current_task() is None
    assert "submit" in dir(js) and "Scheduler" in js.__all__
    with pytest.raises(AttributeError):
        js.no_such_name  # noqa: B018


@pytest.mark.integration
def test_first_use_of_current_task_loads_no_runtime():
    code = ("import sys, jupyter_sched as js; js.current_task(); "
            "print(sorted(m for m in ('jupyter_sched.runtime.scheduler', 'traitlets', 'IPython') "
            "if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_handle_repr_and_display(sched):
    h = js.submit(lambda: 1, name="shown")
    h.result(WAIT)
    assert repr(h) == f"<TaskHandle {h.id} 'shown' done on local>"
    bundle = h._repr_mimebundle_()
    assert "shown" in bundle["text/plain"] and "text/html" in bundle
    g = js.submit(lambda: 2, gang="duo:2")
    assert g.result(WAIT) == [2, 2]
    assert "duo" in g._repr_mimebundle_()["text/plain"]
    assert repr(g) == "<GangHandle 'duo' 2 members done>"
