"""The one door to ``concurrent.futures.Future``'s internals (runtime/futures.py): checked
against the Python in use, and a fallback to the public API that works and says so once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from concurrent.futures import Future

import pytest

import jupyter_sched.runtime.futures as futures
from jupyter_sched.runtime.handles import GangHandle, TaskHandle
from jupyter_sched.runtime.items import ItemHandle


def test_the_python_in_use_has_every_internal_the_light_handles_rely_on():
    assert futures.check() == []
    assert futures.PROBLEMS == []
    for handle in (TaskHandle, GangHandle, ItemHandle):
        assert futures.LightFuture in handle.__mro__ and futures.PlainFuture not in handle.__mro__


def test_a_missing_state_or_internal_is_named():
    base = types.SimpleNamespace(PENDING="PENDING", FINISHED="FINISHED", CANCELLED="CANCELLED")
    assert futures.check(base) == ["concurrent.futures._base.CANCELLED_AND_NOTIFIED"]

    class Reshaped(Future):
        def __init__(self):
            super().__init__()
            del self._waiters  # (kept under another name in some other version)

    assert futures.check(future=Reshaped) == ["Future()._waiters (a list)"]


FALLBACK = textwrap.dedent("""
    import concurrent.futures, warnings
    del concurrent.futures.Future.set_running_or_notify_cancel  # an internal gone
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        from jupyter_sched import Scheduler
        from jupyter_sched.runtime import futures
        from jupyter_sched.runtime.handles import TaskHandle
    said = [str(w.message) for w in said if "concurrent.futures.Future" in str(w.message)]
    assert len(said) == 1 and "set_running_or_notify_cancel" in said[0], said
    assert futures.PlainFuture in TaskHandle.__mro__
    import threading
    gate = threading.Event()
    sched = Scheduler(local_resources="CPU=1", host_leases=False)
    try:
        blocker = sched.submit(gate.wait, 30, resources="CPU=1")
        queued = sched.submit(print, "never", resources="CPU=1")
        done = []
        queued.add_done_callback(done.append)
        assert sched.cancel(queued) and queued.cancelled() and done == [queued]
        gate.set()
        assert blocker.result(timeout=30) is True
        assert sched.submit(lambda: 6 * 7).result(timeout=30) == 42
        failing = sched.submit(lambda: 1 / 0)
        assert isinstance(failing.exception(timeout=30), ZeroDivisionError)
        assert [h.result() for h in sched.map(abs, [-1, -2, -3])] == [1, 2, 3]
        print("fallback ok")
    finally:
        sched.shutdown()
""")


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_without_an_internal_handles_use_the_public_api_and_say_so_once():
    out = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("fallback ok")
