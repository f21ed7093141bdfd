"""The ipyparallel executor against a fake client and a fake runtime: what it sends, what it
reports (no engines; the wrappers that run on engines are called here directly)."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
from concurrent.futures import Future

import pytest
from conftest_ipp import FakeRuntime
from ipyparallel import error

from jupyter_sched.core import events as ev
from jupyter_sched.executors import context
from jupyter_sched.executors.base import TaskRecord, Work
from jupyter_sched.executors.ipp.carry import Packer, unpack
from jupyter_sched.executors.ipp.connection import Connection
from jupyter_sched.executors.ipp.dispatch import _may_send
from jupyter_sched.executors.ipp.engines import probe
from jupyter_sched.executors.ipp.executor import EngineLost, IppExecutor, RemoteTaskError
from jupyter_sched.executors.ipp.faults import exit_text, remote_traceback
from jupyter_sched.executors.ipp.leases import HOST_CALL
from jupyter_sched.executors.ipp.on_engine import (
    ARGUMENTS,
    CALL,
    CELL,
    ERROR,
    FREE_PORT,
    FUNCTION,
    PROBE,
    RESULT,
    engine_call,
    engine_cell,
)
from jupyter_sched.host.discovery import discover_host
from jupyter_sched.model.cluster import SlotSpec
from jupyter_sched.model.tasks import TaskSpec

# -- the wrappers, as an engine runs them ---------------------------------------------------------


def meta(task="t1", env=None, gpus=()):
    return (task, "name", dict(env or {"JUPYTER_SCHED_TASK": task}), gpus, None, None, None,
            "local")


def call(m, fn, *args, **kwargs):
    """``engine_call`` as the kernel sends it: the function and arguments in one stream."""
    packed = Packer(discover=_may_send).pack([(FUNCTION, fn), (ARGUMENTS, (args, kwargs))])
    return engine_call(m, packed.data, *packed.buffers)


def cell(m, code, pull=None, explicit=False, **values):
    packed = Packer(discover=_may_send).pack(values.items())
    return engine_cell(m, code, pull, explicit, packed.data, *packed.buffers)


def read(reply):
    """(status, head, entries) of a reply."""
    status, head, data, *buffers = reply
    return status, head, unpack(data, buffers, {})[0]


SEEN: dict = {}


def task(x, *, y):  # by reference: it fills this module's SEEN
    SEEN.update(rank=os.environ.get("RANK"), task=os.environ["JUPYTER_SCHED_TASK"],
                current=context.current_task())
    return x + y


def test_engine_call_sets_the_environment_for_the_call_only(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("JUPYTER_SCHED_TASK", "before")
    seen = SEEN
    out = call(meta(env={"JUPYTER_SCHED_TASK": "t1", "RANK": "1"}, gpus=((0, 0.5),)),
               task, 1, y=2)
    status, head, entries = read(out)
    assert 0 < head.pop("seconds") < 60  # how long the call took (bundles are sized by it)
    assert (status, head, entries) == ("ok", {"notes": [], "printed": False}, {RESULT: 3})
    assert seen["rank"] == "1" and seen["task"] == "t1"
    assert seen["current"].id == "t1" and seen["current"].devices == {"GPU": {0: 0.5}}
    assert "RANK" not in os.environ and os.environ["JUPYTER_SCHED_TASK"] == "before"
    assert context.current_task() is None


def test_engine_call_says_whether_the_call_printed(capsys):
    assert read(call(meta(), print, "hello"))[1]["printed"] is True
    assert capsys.readouterr().out == "hello\n"
    assert "write" not in getattr(sys.stdout, "__dict__", {})  # the stream is as it was
    assert read(call(meta(), len, ()))[1]["printed"] is False


def test_engine_call_keeps_cuda_visible_devices(monkeypatch):
    # setenv first: monkeypatch then restores the variable's absence, and the binding the call
    # makes for good does not leak into the tests (and engines) that come after
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    call(meta(env={"CUDA_VISIBLE_DEVICES": "GPU-1"}), len, ())
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-1"  # bound for good


def test_engine_call_sends_exceptions_back_pickled():
    def boom():
        raise KeyError("k")

    status, head, _ = read(call(meta(), boom))
    assert status == "error" and head["summary"] == "KeyError: 'k'"
    error = unpack(head["error"], (), {})[0][ERROR]
    assert isinstance(error, KeyError)
    assert "boom" in head["traceback"] and "engine_call" not in head["traceback"]


def test_an_exception_that_cannot_travel_is_sent_as_text():
    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("no")

    def boom():
        raise Unpicklable("x")

    status, head, _ = read(call(meta(), boom))
    assert (status, head["error"]) == ("error", None)
    assert head["summary"].endswith("Unpicklable: x")


def test_a_result_that_cannot_travel_fails_the_call():
    status, head, entries = read(call(meta(), threading.Lock))
    assert status == "error" and entries == {}
    assert head["summary"] == ("the result cannot be sent (TypeError: cannot pickle "
                               "'_thread.lock' object)")


def test_engine_call_gives_notebook_functions_their_globals():
    g = {"__name__": "__main__", "SCALE": 21}
    exec("def f():\n    return SCALE * 2\n", g)
    assert read(call(meta(), g["f"]))[2] == {RESULT: 42}


def test_engine_cell_returns_result_and_pulled_names():
    status, head, entries = read(cell(meta(), "import math\ny = x + 1\ny * 2", x=1))
    assert (status, head) == ("ok", {"notes": []})
    assert entries == {RESULT: 4, "math": math, "y": 2}


def test_engine_cell_pulls_back_what_a_failing_cell_set_and_notes_what_cannot_come():
    status, head, entries = read(cell(meta(), "import threading\nw = 5\n"
                                              "lock = threading.Lock()\n1 / 0"))
    assert status == "error" and head["summary"] == "ZeroDivisionError: division by zero"
    assert "run_cell" not in head["traceback"] and "<task t1>" in head["traceback"]
    assert entries == {"w": 5, "threading": threading}
    assert head["notes"] == ["'lock' was not pulled back (TypeError: cannot pickle "
                             "'_thread.lock' object)"]


def test_engine_cell_explicit_pull_of_a_name_not_set_fails():
    status, head, _ = read(cell(meta(), "a = 1", ("a", "b"), True))
    assert status == "error" and "pull: the cell did not set 'b'" in head["summary"]


# -- the executor, with a fake client -----------------------------------------------------------


class FakeFuture(Future):
    def __init__(self, msg_id, output=None):
        super().__init__()
        self.msg_id = msg_id
        self.relay = output  # what the request's output goes to
        self.output = Future()


class FakeClient(Connection):
    """A connection to no cluster (the parts' only view of ipyparallel): records requests,
    aborts and signals; the test answers them, and registers and unregisters engines."""

    def __init__(self):
        super().__init__(self)
        self.engine_ids = []
        self.watching = None  # (joined, left) while the executor listens
        self.sent = []  # (engine id, function, args, kwargs, future)
        self.aborted = []
        self.abort_replies = []  # a future per abort: the engine took it
        self.signals = []
        self.closed = False

    def apply(self, eid, fn, args, hook, output=None, sent=None):
        future = FakeFuture(f"m{len(self.sent)}", output)
        hook(future)
        self.sent.append((eid, fn, list(args), {}, future))
        if sent is not None:
            sent(future)
        return future

    def abort(self, request, eid):
        self.aborted.append(request)
        self.abort_replies.append(Future())
        return self.abort_replies[-1]

    def signal(self, eid, signum):
        self.signals.append((signum, [eid]))

    @property
    def ids(self):
        return list(self.engine_ids)

    def knows_engine(self, eid):
        return eid in self.engine_ids

    def watch(self, joined, left):
        self.watching = (joined, left)

    def unwatch(self):
        self.watching = None

    def controller_address(self):
        return "127.0.0.1"

    def close(self):
        self.closed = True

    # the test's side

    def register(self, eid, report):
        self.engine_ids.append(eid)
        if self.watching is not None:
            self.watching[0](eid)
        _, f, _, _, future = self.sent[-1]
        assert f is PROBE
        future.set_result(report)

    def unregister(self, eid):
        self.engine_ids.remove(eid)
        if self.watching is not None:
            self.watching[1](eid)


LOCAL = discover_host(declare="GPU=2")


def report(visible=None, pid=2**31 - 2, host=LOCAL):  # (no such process)
    data = probe()
    data.update(host=host.to_json(), pid=pid, cuda_visible_devices=visible)
    return data


@pytest.fixture
def setup():
    runtime = FakeRuntime(LOCAL)
    client = FakeClient()
    executor = IppExecutor(runtime, client, stop_grace=60, connection=client)
    yield runtime, client, executor
    executor.close()


def record(task_id="t1", fn=None, code=None, namespace=None, gang=None, gang_id=None):
    """The runtime's record of a task (output kept on the work only: none here)."""
    work = Work(fn=fn, code=code, namespace=namespace)
    return TaskRecord(task_id, TaskSpec(task_id), work, gang=gang, gang_id=gang_id)


def start(task_id="t1", slot="e0", gpus=None, **gang):
    devices = {"GPU": {i: 5000 for i in gpus}} if gpus else {}
    return ev.Start(task_id, "local", slot, devices, **gang)


def test_registered_engines_become_slots(setup):
    runtime, client, executor = setup
    client.register(0, report("1"))
    client.register(1, report())
    assert runtime.events == [
        ev.SlotAdded("local", SlotSpec("e0", frozenset({1}))),
        ev.SlotAdded("local", SlotSpec("e1", None)),
    ]
    assert set(runtime.slots) == {("local", "e0"), ("local", "e1")}
    assert executor.engines[0].visible == (1,) and executor.engines[1].visible is None
    client.unregister(1)
    assert runtime.events[-1] == ev.SlotRemoved(
        "local", "e1", "engine 1 on host " + LOCAL.hostname + " unregistered "
        "(exit status unknown)")


def test_a_probe_that_fails_leaves_the_engine_out(setup, caplog):
    runtime, client, _ = setup
    client.register(0, error.RemoteError("ModuleNotFoundError", "no jupyter_sched", ""))
    assert runtime.events == []
    assert "cannot run tasks" in caplog.text


def reply(status="ok", result=None, *, error=None, notes=(), traceback="tb", summary="",
          **pulled):
    """An engine's reply, as :func:`engine_call`/:func:`engine_cell` make it."""
    head: dict = {"notes": list(notes)}
    entries = [(RESULT, result)] if status == "ok" else []
    if status != "ok":
        stream = None if error is None else Packer().pack([(ERROR, error)]).data
        head.update(error=stream, traceback=traceback, summary=summary)
    packed = Packer().pack([*entries, *pulled.items()])
    return (status, head, packed.data, *packed.buffers)


def sent_entries(args):
    """What a request sent: the entries of its stream (its last arguments)."""
    index = next(i for i, a in enumerate(args) if isinstance(a, bytes))
    return unpack(args[index], args[index + 1:], {})[0]


def test_a_task_runs_and_finishes(setup):
    runtime, client, executor = setup
    client.register(0, report())
    rec = record(fn=len)
    executor.start(start(gpus=[1]), rec)
    _, f, args, _, future = client.sent[-1]
    # a fraction of a GPU goes through the host wrapper, which sets MPS variables where MPS
    # runs (a local engine: no lease, this kernel's runtime took it)
    assert f is HOST_CALL and args[0]["shares"] == {} and args[0]["mps"] == [(0, 5000, None)]
    assert args[0]["torch"] == [(0, 5000)] and not args[0]["load_torch"]  # if torch is there
    # no MPS found by its probe: nothing caps it, as far as the kernel can tell
    assert executor.enforcement(start(gpus=[1])) == "logical"
    f, args = args[1], args[2:]
    assert f is CALL and sent_entries(args) == {FUNCTION: len, ARGUMENTS: ((), {})}
    env = args[0][2]
    assert env == {"JUPYTER_SCHED_TASK": "t1", "CUDA_VISIBLE_DEVICES": "1"} == rec.env
    assert args[0][3] == ((0, 0.5),)  # the task's GPU as the engine's device 0
    assert executor.engines[0].visible == (1,)  # bound by its first GPU task
    future.set_result(reply("ok", 7))
    assert runtime.outcomes["t1"] == {"result": 7, "attempt": 1}
    assert runtime.events[-1] == ev.Finished("t1", attempt=1)


def test_an_engine_says_how_a_share_was_held_and_the_cap_its_first_cuda_task_fixed(setup):
    runtime, client, executor = setup
    client.register(0, report())
    rec = record(fn=len)
    executor.start(start(gpus=[1]), rec)
    answer = reply("ok", 7)
    answer[1].update(enforced="mps", cap=5_000)  # as the engine's wrapper adds them
    client.sent[-1][4].set_result(answer)
    assert rec.enforced == "mps"
    slot = executor.engines[0].slot
    assert runtime.events[-2:] == [ev.SlotCapped("local", slot, 5_000),
                                   ev.Finished("t1", attempt=1)]


def test_a_failed_task_reports_its_own_exception(setup):
    runtime, client, executor = setup
    client.register(0, report())
    executor.start(start(), record(fn=len))
    client.sent[-1][4].set_result(reply("error", error=KeyError("k"), summary="KeyError: 'k'"))
    assert isinstance(runtime.outcomes["t1"]["error"], KeyError)
    assert runtime.outcomes["t1"]["traceback_text"] == "tb"
    assert runtime.events[-1] == ev.Failed("t1", "KeyError: 'k'", attempt=1)
    executor.start(start("t2"), record("t2", fn=len))
    client.sent[-1][4].set_result(reply("error", summary="Local: x"))
    assert isinstance(runtime.outcomes["t2"]["error"], RemoteTaskError)


def test_a_cell_pushes_what_it_reads_and_pulls_what_it_sets(setup):
    runtime, client, executor = setup
    client.register(0, report())
    ns = {"x": 1, "other": 2}
    executor.start(start(), record(code="y = x + 1", namespace=ns))
    _, f, args, _, future = client.sent[-1]
    assert f is CELL and args[1] == "y = x + 1" and sent_entries(args) == {"x": 1}
    future.output.set_result(None)  # the engine's idle status: a cell waits for it
    with pytest.warns(RuntimeWarning, match="'lock' was not pulled back"):  # no output here
        future.set_result(reply("ok", notes=["'lock' was not pulled back"], y=2))
    assert ns["y"] == 2
    assert runtime.events[-1] == ev.Finished("t1", attempt=1)


def test_a_missing_push_fails_the_task_before_it_is_sent(setup):
    runtime, client, executor = setup
    client.register(0, report())
    sent = len(client.sent)
    rec = record(code="y = 1", namespace={})
    rec.work.push = ("nope",)
    executor.start(start(), rec)
    assert len(client.sent) == sent
    assert isinstance(runtime.outcomes["t1"]["error"], ValueError)
    assert "'nope'" in runtime.events[-1].error


def test_a_start_on_a_gone_slot_fails_as_lost(setup):
    runtime, _, executor = setup
    executor.start(start(slot="e9"), record())
    assert runtime.events[-1] == ev.Failed(
        "t1", "engine slot 'e9' on 'local' went away before the task started", lost=True, attempt=1)
    assert isinstance(runtime.outcomes["t1"]["error"], EngineLost)


def test_an_engine_dying_removes_its_slot_which_fails_its_task_as_lost(setup):
    runtime, client, executor = setup
    client.register(0, report())
    executor.start(start(), record(fn=len))
    died = error.RemoteError("EngineError", "Engine 0 died while running task m1", "")
    client.sent[-1][4].set_result(died)
    reason = f"engine 0 on host {LOCAL.hostname} died (exit status unknown)"
    # one event: no moment when the core sees the task ended and the dead slot free
    assert runtime.events[-1] == ev.SlotRemoved("local", "e0", reason)
    assert not any(isinstance(e, ev.Failed) for e in runtime.events)
    assert isinstance(runtime.outcomes["t1"]["error"], EngineLost)
    client.unregister(0)  # the same death, told again: nothing more
    assert runtime.events[-1] == ev.SlotRemoved("local", "e0", reason)


def test_a_success_is_reported_before_its_engine_is_said_gone(setup):
    """The Finished is queued under the executor's lock: an engine's death told meanwhile
    waits for it, so the core never loses a task whose result came back (its handle may
    already hold that result)."""
    runtime, client, executor = setup
    client.register(0, report())
    executor.start(start(), record(fn=len))
    inside, release = threading.Event(), threading.Event()
    plain = runtime.report

    def report_slowly(event):
        if isinstance(event, ev.Finished):
            inside.set()
            release.wait(10)
        plain(event)

    runtime.report = report_slowly
    answer = threading.Thread(target=client.sent[-1][4].set_result, args=(reply("ok", 7),))
    answer.start()
    assert inside.wait(10)
    gone = threading.Thread(target=client.unregister, args=(0,))
    gone.start()
    gone.join(0.2)  # it waits for the lock
    release.set()
    answer.join(10)
    gone.join(10)
    assert [type(e).__name__ for e in runtime.events[-2:]] == ["Finished", "SlotRemoved"]


def test_stop_interrupts_once_the_engine_took_the_abort_and_reports_stopped(setup):
    """The signal waits for the engine to take the abort: on the engine, a SIGINT interrupts
    only a request that was aborted (a task queued behind is safe from it)."""
    runtime, client, executor = setup
    client.register(0, report(host=dataclasses.replace(LOCAL, boot_id="elsewhere")))
    executor.start(start(), record(fn=len))
    future = client.sent[-1][4]
    executor.stop("t1", "cancelled by the user")
    assert client.aborted == ["m1"] and client.signals == []
    client.abort_replies[-1].set_result({"content": {"status": "ok"}})
    assert len(client.signals) == 1 and client.signals[0][1] == [0]  # through the nanny
    future.set_result(reply("error", summary="KeyboardInterrupt"))
    assert runtime.events[-1] == ev.Stopped("t1", attempt=1)
    assert "t1" not in runtime.outcomes


def test_an_abort_taken_after_the_task_ended_signals_nothing(setup):
    runtime, client, executor = setup
    client.register(0, report(host=dataclasses.replace(LOCAL, boot_id="elsewhere")))
    executor.start(start(), record(fn=len))
    executor.stop("t1", "cancelled by the user")
    client.sent[-1][4].set_result(reply("ok", 3))  # it ended before the abort reached it
    client.abort_replies[-1].set_result({"content": {"status": "ok"}})
    assert client.signals == []
    assert runtime.events[-1] == ev.Finished("t1", attempt=1)  # a success is a success


def test_a_stopped_task_still_running_a_moment_later_is_interrupted_once_more(setup,
                                                                             monkeypatch):
    """An engine ignores SIGINT until its kernel's handler hook for the request has run: an
    interrupt that lands before is lost, so it goes once more (also when the engine never
    said it took the abort)."""
    from jupyter_sched.executors.ipp import faults

    monkeypatch.setattr(faults, "_RESIGNAL", 0.05)
    runtime, client, executor = setup
    client.register(0, report(host=dataclasses.replace(LOCAL, boot_id="elsewhere")))
    executor.start(start("t1"), record("t1", fn=len))
    executor.stop("t1", "cancelled by the user")
    client.abort_replies[-1].set_result({"content": {"status": "ok"}})
    time.sleep(0.3)
    assert len(client.signals) == 2
    client.sent[-1][4].set_result(reply("error", summary="KeyboardInterrupt"))
    assert runtime.events[-1] == ev.Stopped("t1", attempt=1)
    client.signals.clear()
    time.sleep(0.3)  # (the engine's quiet time after a signal)
    executor.start(start("t3"), record("t3", fn=len))
    executor.stop("t3", "cancelled by the user")  # its abort is never answered
    time.sleep(0.3)
    assert len(client.signals) == 1


def test_a_gang_is_sent_once_rank_0s_host_named_a_port(setup):
    _, client, executor = setup
    client.register(0, report())
    client.register(1, report())
    gang = dict(gang="ddp", world_size=2, master_node="local")
    executor.start(start("t1", "e0", rank=0, **gang), record("t1", fn=len, gang="ddp",
                                                              gang_id="t1"))
    executor.start(start("t2", "e1", rank=1, **gang), record("t2", fn=len, gang="ddp",
                                                              gang_id="t1"))
    _, f, _, _, port_future = client.sent[-1]
    assert f is FREE_PORT
    sent = len(client.sent)
    port_future.set_result(29500)
    members = client.sent[sent:]
    assert [m[1] for m in members] == [CALL, CALL]
    envs = [m[2][0][2] for m in members]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert {e["MASTER_PORT"] for e in envs} == {"29500"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert all(e["WORLD_SIZE"] == "2" and e["JUPYTER_SCHED_GANG"] == "ddp" for e in envs)


def test_a_gang_member_stopped_while_waiting_for_the_port(setup):
    runtime, client, executor = setup
    client.register(0, report())
    client.register(1, report())
    gang = dict(gang="ddp", world_size=2, master_node="local")
    executor.start(start("t1", "e0", rank=0, **gang), record("t1", fn=len, gang_id="t1"))
    executor.start(start("t2", "e1", rank=1, **gang), record("t2", fn=len, gang_id="t1"))
    executor.stop("t2", "gang 'ddp': t1 failed")
    assert runtime.events[-1] == ev.Stopped("t2", attempt=1)
    sent = len(client.sent)
    client.sent[-1][4].set_result(29500)
    assert [m[2][0][0] for m in client.sent[sent:]] == ["t1"]


def test_a_gang_member_whose_rank_0_is_not_here_fails_unsent(setup):
    runtime, client, executor = setup
    client.register(1, report())
    gang = dict(gang="ddp", world_size=2, master_node="local")
    executor.start(start("t1", "e0", rank=0, **gang), record("t1", fn=len, gang_id="t1"))
    assert runtime.events[-1].lost  # rank 0's engine went away before it started
    sent = len(client.sent)
    executor.start(start("t2", "e1", rank=1, **gang), record("t2", fn=len, gang_id="t1"))
    assert len(client.sent) == sent
    assert runtime.events[-1] == ev.Failed(
        "t2", "gang 'ddp': its rank 0 is not on these engines (it could not start, or runs on "
        "other engines)", attempt=1)
    assert executor.engines[1].task is None


def test_close_fails_what_runs_and_removes_the_slots(setup):
    runtime, client, executor = setup
    client.register(0, report())
    executor.start(start(), record(fn=len))
    executor.close()
    assert runtime.events[-2:] == [
        ev.Failed("t1", "engine 0 was closed", lost=True, attempt=1),
        ev.SlotRemoved("local", "e0", "the engines were closed"),
    ]
    assert client.aborted == ["m1"] and client.signals == []
    client.abort_replies[-1].set_result({"content": {"status": "ok"}})  # the engine took it:
    assert len(client.signals) == 1  # its task is interrupted
    assert client.closed is False  # not its client
    assert client.watching is None


def test_exit_text_and_tracebacks():
    assert exit_text(-9) == "killed by SIGKILL"
    assert exit_text(1) == "exit code 1"
    assert exit_text(None) == "exit status unknown"
    err = error.RemoteError("KeyError", "k", "\x1b[31mTraceback\x1b[0m\nKeyError: 'k'")
    assert remote_traceback(err) == "[Engine Exception]\nTraceback\nKeyError: 'k'"


def test_engines_per_gpu_counts_gpus_declared_after_the_start():
    from jupyter_sched.executors.ipp.engine_sets import engine_sets

    # as after %sched local --gpus 2: local_resources was never set, the host says it
    host = discover_host(declare="GPU=2,gpu_memory=16GiB,CPU=3")
    sets = engine_sets(host, None, 1, None, None)
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in sets] == ["0", "1"]
    assert {env["JUPYTER_SCHED_DECLARE"] for _, env in sets} == {"GPU=2,gpu_memory=17179869184"}
    with pytest.raises(ValueError, match="this host has no GPUs; declare some"):
        engine_sets(discover_host(declare="GPU=0"), None, 1, None, None)
    # a runtime that has no host yet: the local_resources setting says what is declared
    sets = engine_sets(None, None, 1, None, None, "GPU=2")
    assert {env["JUPYTER_SCHED_DECLARE"] for _, env in sets} == {"GPU=2"}


def test_a_second_clusters_slots_are_named_apart():
    from types import SimpleNamespace as Executor

    from jupyter_sched.executors.ipp.cluster import slot_prefix

    assert slot_prefix([]) == ""
    assert slot_prefix([Executor(prefix="")]) == "c2."
    assert slot_prefix([Executor(prefix=""), Executor(prefix="c2.")]) == "c3."
    assert slot_prefix([Executor(prefix="c2.")]) == ""
