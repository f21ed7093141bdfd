"""Local tasks: results, errors, cancelling, cells in the namespace, gangs, current_task()."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
from concurrent.futures import CancelledError

import pytest

import jupyter_sched
from jupyter_sched.executors.context import current_task
from jupyter_sched.executors.local import executor, running

pytestmark = [pytest.mark.timeout(60), pytest.mark.scheduler("GPU=2")]

WAIT = 10


def hold(gate: threading.Event) -> None:
    """Wait for ``gate`` in short steps, so that an interrupt can land (it cannot inside one
    long blocking C call)."""
    deadline = time.monotonic() + WAIT
    while not gate.wait(0.005) and time.monotonic() < deadline:
        pass


def free_gpus(sched) -> list[float]:
    (node,) = sched.snapshot(fresh=True).nodes
    return [1.0 - d.allocated for d in node.devices]


# -- outcomes ---------------------------------------------------------------------------------


def test_result_and_times(sched):
    h = sched.submit(lambda a, b=0: a + b, 40, kwargs={"b": 2}, resources="GPU=0.5")
    assert h.result(WAIT) == 42
    assert h.state == "done" and h.node == "local" and h.devices == {"GPU": {0: 0.5}}
    assert h.submitted <= h.started <= h.ended and h.duration >= 0
    assert h.exception() is None
    assert sched.task(h.id) is h and sched.task("<lambda>") is h
    assert h in sched.history


def test_exception_with_traceback(sched):
    def inner():
        raise ZeroDivisionError("no share left")

    def outer():
        inner()

    h = sched.submit(outer)
    with pytest.raises(ZeroDivisionError, match="no share left"):
        h.result(WAIT)
    assert h.state == "failed"
    assert h.error == "ZeroDivisionError: no share left"
    assert "in outer" in h.traceback and "in inner" in h.traceback
    for own in (executor.__file__, running.__file__):  # the executor's frames are left out
        assert own not in h.traceback
    assert h.reason == "ZeroDivisionError: no share left"


def test_cancel_a_queued_task(sched):
    gate = threading.Event()
    holders = [sched.submit(hold, gate, resources="GPU=1") for _ in range(2)]
    ran = threading.Event()
    queued = sched.submit(ran.set, resources="GPU=1")
    assert queued.state == "queued"
    assert queued.cancel() is True
    with pytest.raises(CancelledError):
        queued.result(WAIT)
    assert queued.state == "cancelled" and queued.cancelled()
    assert queued.cancel() is False
    gate.set()
    sched.wait(holders, timeout=WAIT)
    assert not ran.is_set()


def test_cancel_a_running_task_interrupts_it_and_frees_its_gpu(sched):
    started, landed = threading.Event(), threading.Event()

    def spin():
        started.set()
        try:
            while True:
                time.sleep(0.005)
        except KeyboardInterrupt:
            landed.set()
            raise

    h = sched.submit(spin, resources="GPU=1")
    assert started.wait(WAIT)
    assert free_gpus(sched) == [0.0, 1.0]
    assert h.cancel() is True
    with pytest.raises(CancelledError):
        h.result(WAIT)
    assert landed.is_set()
    assert h.state == "cancelled" and h.reason == "cancelled by the user"
    assert free_gpus(sched) == [1.0, 1.0]
    # the worker that was interrupted runs the next task cleanly
    after = [sched.submit(time.sleep, 0.02, resources="GPU=1") for _ in range(4)]
    assert [x.result(WAIT) for x in after] == [None] * 4


def test_a_task_that_ignores_the_interrupt_is_reported_when_it_really_ends(sched):
    started, interrupted, go_on = threading.Event(), threading.Event(), threading.Event()

    def stubborn():
        started.set()
        try:
            while True:
                time.sleep(0.005)
        except KeyboardInterrupt:
            interrupted.set()
            go_on.wait(WAIT)  # still running, still holding its GPU
        return "late"

    h = sched.submit(stubborn, resources="GPU=1")
    assert started.wait(WAIT)
    h.cancel()
    assert interrupted.wait(WAIT)  # the interrupt landed: an end said then would be in by
    sched.snapshot(fresh=True)  # the step after this one
    assert h.state == "stopping" and free_gpus(sched) == [0.0, 1.0]  # its GPU still held
    go_on.set()
    with pytest.raises(CancelledError):
        h.result(WAIT)
    assert free_gpus(sched) == [1.0, 1.0]


def test_cancel_by_id_and_name_and_cancel_all(sched):
    gate = threading.Event()
    a = sched.submit(hold, gate, name="a", resources="GPU=1")
    b = sched.submit(hold, gate, name="b", resources="GPU=1")
    c = sched.submit(hold, gate, name="c", resources="GPU=1")
    assert sched.cancel("c") is True
    assert sched.cancel(a.id) is True
    assert sched.cancel_all() == 1
    for h in (a, b, c):
        with pytest.raises(CancelledError):
            h.result(WAIT)


# -- cells and namespaces ---------------------------------------------------------------------


def test_code_runs_in_the_namespace_and_returns_its_last_expression(sched):
    ns = {"x": 20}
    h = sched.submit(code="y = x + 1\nimport math\nmath.floor(y * 2.0)", namespace=ns)
    assert h.result(WAIT) == 42
    assert ns["y"] == 21
    assert sched.submit(code="z = 1", namespace=ns).result(WAIT) is None
    assert ns["z"] == 1


def test_code_errors_point_at_the_cell_line(sched):
    h = sched.submit(code="a = 1\nb = a / 0\n", namespace={})
    with pytest.raises(ZeroDivisionError):
        h.result(WAIT)
    assert "<task " in h.traceback and "b = a / 0" in h.traceback


def test_top_level_await_and_coroutine_functions(sched):
    h = sched.submit(code="import asyncio\nawait asyncio.sleep(0)\n'awaited'", namespace={})
    assert h.result(WAIT) == "awaited"

    async def coro(v):
        await asyncio.sleep(0)
        return v

    assert sched.submit(coro, 5).result(WAIT) == 5


# -- context, gangs, await --------------------------------------------------------------------


def test_current_task_is_none_outside_a_task():
    assert current_task() is None
    assert jupyter_sched.current_task() is None


def test_current_task_inside_a_task(sched):
    h = sched.submit(lambda: current_task(), resources="GPU=0.5", name="ctx")
    ctx = h.result(WAIT)
    assert ctx.id == h.id and ctx.name == "ctx"
    assert ctx.gpus == [0] and ctx.devices == {"GPU": {0: 0.5}}
    assert ctx.env["CUDA_VISIBLE_DEVICES"] == "0" and ctx.env["JUPYTER_SCHED_TASK"] == h.id
    assert ctx.rank is None and ctx.jax_device() is None
    assert current_task() is None


def test_gang_members_see_consistent_ranks(sched):
    together = threading.Barrier(2, timeout=WAIT)

    def member():
        together.wait()  # both members run at the same time
        t = current_task()
        return t.rank, t.world_size, t.env["MASTER_ADDR"], t.env["MASTER_PORT"], t.gang

    g = sched.submit(member, gang="ddp:2", resources="GPU=1")
    results = g.result(WAIT)
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert len({r[2:] for r in results}) == 1  # one master address and port
    assert results[0][4] == "ddp"
    assert [m.rank for m in g.members] == [0, 1] and g.state == "done"
    assert sorted(tuple(m.devices["GPU"].items()) for m in g.members) == [((0, 1.0),), ((1, 1.0),)]


def test_gang_members_running_one_cell_each_keep_their_own_names(sched):
    notebook = {"together": threading.Barrier(2, timeout=WAIT), "jupyter_sched": jupyter_sched,
                "kept": "notebook's"}
    cell = ("rank = jupyter_sched.current_task().rank\n"
            "together.wait()  # both members have set rank before either reads it\n"
            "kept = rank\n"
            "(rank, kept)")
    g = sched.submit(code=cell, namespace=notebook, gang="ddp:2", resources="GPU=1")
    assert g.result(WAIT) == [(0, 0), (1, 1)]
    assert notebook["kept"] == "notebook's" and "rank" not in notebook


def test_a_failing_gang_member_fails_the_gang(sched):
    def member():
        if current_task().rank == 1:
            raise RuntimeError("rank 1 broke")
        while True:
            time.sleep(0.005)

    g = sched.submit(member, gang="ddp:2", resources="GPU=0.5")
    with pytest.raises(RuntimeError, match="rank 1 broke"):
        g.result(WAIT)
    assert sorted(m.state for m in g.members) == ["cancelled", "failed"]


def test_handles_are_awaitable(sched):
    async def main():
        a = sched.submit(lambda: 1, resources="GPU=0.5")
        g = sched.submit(lambda: 2, gang="pair:2", resources="GPU=0.5")
        return await a, await g

    assert asyncio.run(main()) == (1, [2, 2])


def test_torch_device_is_selected_when_torch_is_imported(sched, monkeypatch):
    calls = []
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,
                                 set_device=lambda i: calls.append((threading.get_ident(), i)))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    together = threading.Barrier(2, timeout=WAIT)

    def task():
        together.wait()  # both at once, so on two threads and two GPUs
        return threading.get_ident(), current_task().gpus[0]

    handles = [sched.submit(task, resources="GPU=1") for _ in range(2)]
    assert sorted(calls, key=lambda c: c[1]) == [h.result(WAIT) for h in handles]
    assert sorted(c[1] for c in calls) == [0, 1]


# -- output outside a kernel ------------------------------------------------------------------


def test_output_is_captured_per_task_and_other_threads_pass_through(sched, capsys):
    def speak(word):
        print(word)
        print("warn", word, file=sys.stderr)
        return word

    a = sched.submit(speak, "alpha")
    b = sched.submit(speak, "beta")
    assert a.result(WAIT) == "alpha" and b.result(WAIT) == "beta"
    assert a.stdout == "alpha\n" and a.stderr == "warn alpha\n"
    assert b.stdout == "beta\n"
    print("from the main thread")
    out = capsys.readouterr().out
    assert "from the main thread" in out and "alpha" not in out


def test_run_code_without_a_shell_uses_plain_exec():
    ns = {}
    assert running.run_code("q = 3\nq * 2", ns, "<t>") == 6 and ns["q"] == 3
