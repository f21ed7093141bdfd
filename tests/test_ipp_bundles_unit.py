"""Bundles against a fake client (``executors/ipp/bundles.py``): which tasks sent ahead are held
for one request, in which order requests leave, how a bundle's reply ends each task, and how
one of its tasks is stopped. The wrapper that runs a bundle on an engine is called here
directly."""

from __future__ import annotations

import pickle

import pytest
from conftest_ipp import FakeRuntime
from ipyparallel import error
from ipyparallel.serialize import PrePickled
from test_ipp_unit import LOCAL, FakeClient, reply, report

from jupyter_sched.core import events as ev
from jupyter_sched.executors.base import TaskRecord, Work
from jupyter_sched.executors.ipp.bundles import BUNDLE_SECONDS
from jupyter_sched.executors.ipp.executor import EngineLost, IppExecutor
from jupyter_sched.executors.ipp.on_engine import BUNDLE, CALL, CELL, engine_bundle
from jupyter_sched.model.specs import TaskSpec


@pytest.fixture
def fake():
    runtime, client = FakeRuntime(LOCAL), FakeClient()
    executor = IppExecutor(runtime, client, stop_grace=60, connection=client)
    yield runtime, client, executor
    executor.close()


def record(task_id, family="f", code=None):
    work = Work(fn=None if code else len, args=() if code else ([1, 2],), code=code)
    return TaskRecord(task_id, TaskSpec(task_id, family=family), work)


def ahead(task_id, after):
    return ev.Start(task_id, "local", "e0", {}, after=after)


def running(executor, client, seconds=0.001):
    """Engine 0 runs t0, of family ``f``, whose last run took ``seconds``."""
    client.register(0, report())
    executor.start(ev.Start("t0", "local", "e0", {}), record("t0"))
    executor._timings.seconds["f"] = seconds


def functions(client):
    return [sent[1] for sent in client.sent[1:]]  # (the first is the probe)


def test_the_tasks_sent_ahead_in_a_step_go_as_one_request_in_order(fake):
    _, client, executor = fake
    running(executor, client)
    for k in (1, 2, 3):
        executor.start(ahead(f"t{k}", f"t{k - 1}"), record(f"t{k}"))
    assert functions(client) == [CALL]  # held until the step ends
    executor.end_step()
    assert functions(client) == [CALL, BUNDLE]
    (calls,) = client.sent[-1][2]
    assert [request for request, _, _ in calls] == [f"jupyter_sched:t{k}:1" for k in (1, 2, 3)]
    assert [meta[0] for _, meta, _ in calls] == ["t1", "t2", "t3"]
    assert executor._pipeline.line(0) == ["t0", "t1", "t2", "t3"]  # t0 runs, the rest wait


def test_what_cannot_go_in_a_bundle_is_sent_after_the_bundle_before_it(fake):
    """A cell, a family never timed or timed long, and a task of no family go alone; the
    tasks held before one of them leave first, so the engine runs all in the order they
    were started."""
    _, client, executor = fake
    running(executor, client)
    executor._timings.seconds["slow"] = BUNDLE_SECONDS
    starts = [("t1", record("t1")), ("t2", record("t2")), ("t3", record("t3", code="x = 1")),
              ("t4", record("t4")), ("t5", record("t5", family="new")),
              ("t6", record("t6", family="slow")), ("t7", record("t7", family=""))]
    after = "t0"
    for task_id, rec in starts:
        executor.start(ahead(task_id, after), rec)
        after = task_id
    executor.end_step()
    assert functions(client) == [CALL, BUNDLE, CELL, CALL, CALL, CALL, CALL]
    assert [meta[0] for _, meta, _ in client.sent[2][2][0]] == ["t1", "t2"]
    assert executor._pipeline.line(0) == [f"t{k}" for k in range(8)]


def test_a_bundle_holds_at_most_its_seconds_of_work_by_the_familys_last_run(fake):
    _, client, executor = fake
    running(executor, client, seconds=BUNDLE_SECONDS / 2.5)  # two fit, three do not
    for k in range(1, 6):
        executor.start(ahead(f"t{k}", f"t{k - 1}"), record(f"t{k}"))
    executor.end_step()
    sizes = [len(args[0]) if f == BUNDLE else 1 for _, f, args, _, _ in client.sent[2:]]
    assert sizes == [2, 2, 1]


def test_a_bundles_reply_ends_each_task_as_its_own_reply_would(fake):
    runtime, client, executor = fake
    running(executor, client)
    for k in (1, 2, 3, 4):
        executor.start(ahead(f"t{k}", f"t{k - 1}"), record(f"t{k}"))
    executor.stop("t4", "cancelled by the user")  # aborted by its own id, not the bundle's
    executor.end_step()
    executor.stop("t3", "cancelled by the user")
    assert client.aborted == ["jupyter_sched:t3:1"]
    assert runtime.events[-1] == ev.Stopped("t4", attempt=1)  # held, never sent
    client.sent[1][4].set_result(reply("ok", 2))
    ok = reply("ok", 5)
    ok[1].update(output=[("stdout", "hi\n")], seconds=0.004)
    failed = reply("error", error=KeyError("k"), summary="KeyError: 'k'")
    client.sent[-1][4].set_result((ok, failed, ("aborted",)))
    assert runtime.events[-4:] == [ev.Finished("t0", attempt=1), ev.Finished("t1", attempt=1),
                                   ev.Failed("t2", "KeyError: 'k'", attempt=1),
                                   ev.Stopped("t3", attempt=1)]
    assert runtime.outcomes["t1"]["result"] == 5
    assert isinstance(runtime.outcomes["t2"]["error"], KeyError)
    assert executor._timings.seconds["f"] == 0.004
    assert executor._pipeline.line(0) == []


def test_a_bundle_answered_wrongly_or_lost_with_its_engine_fails_each_task_once(fake):
    runtime, client, executor = fake
    running(executor, client)
    for k in (1, 2):
        executor.start(ahead(f"t{k}", f"t{k - 1}"), record(f"t{k}"))
    executor.end_step()
    client.sent[-1][4].set_result(("just one",))
    failed = [e for e in runtime.events if isinstance(e, ev.Failed)]
    assert [e.task for e in failed] == ["t1", "t2"]
    assert "answered a bundle of 2 tasks with tuple" in failed[0].error
    for k in (5, 6):
        executor.start(ahead(f"t{k}", "t2" if k == 5 else "t5"), record(f"t{k}"))
    executor.end_step()
    client.sent[-1][4].set_result(("garbled", reply("ok", 6)))  # one part unreadable
    assert runtime.events[-2:] == [
        ev.Failed("t5", "RuntimeError: engine 0's answer for t5 cannot be read: "
                  "ValueError: not a task's reply: str", attempt=1),
        ev.Finished("t6", attempt=1)]
    for k in (3, 4):
        executor.start(ahead(f"t{k}", "t0" if k == 3 else "t3"), record(f"t{k}"))
    executor.end_step()
    client.sent[-1][4].set_result(error.RemoteError("EngineError", "Engine 0 died", ""))
    assert isinstance(runtime.events[-1], ev.SlotRemoved)  # (which fails what ran there)
    assert [isinstance(runtime.outcomes[t]["error"], EngineLost) for t in ("t0", "t3", "t4")] \
        == [True] * 3


def test_engine_bundle_runs_each_call_and_keeps_its_output_apart():
    from jupyter_sched.executors.ipp.carry import Packer

    def call(fn, *args):
        packed = Packer().pack([("the function", fn), ("the arguments", (args, {}))])
        meta = ("t", "t", {"JUPYTER_SCHED_TASK": "t"}, (), None, None, None, "local")
        return meta, packed.data

    def shout(text):
        print(text)
        return text.upper()

    calls = tuple((f"r{k}", *call(fn, *args)) for k, (fn, args) in
                  enumerate([(shout, ("a",)), (int, ("x",)), (shout, ("b",))]))
    out = engine_bundle(calls)
    replies = pickle.loads(out.buffers[0]) if isinstance(out, PrePickled) else out
    assert [r[0] for r in replies] == ["ok", "error", "ok"]
    assert replies[0][1]["output"] == [("stdout", "a\n")]
    assert replies[2][1]["output"] == [("stdout", "b\n")]
    assert replies[1][1]["summary"].startswith("ValueError")
    assert all(r[1]["seconds"] >= 0 for r in replies)
