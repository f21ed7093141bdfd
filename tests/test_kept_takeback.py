"""Work taken back from a kept cluster (``executors/ipp/kept/takeback.py``) against a fake
controller: a run that ended while no kernel was there, one still running (nothing is asked
until a request behind it on its engine answers), one the controller never got, one whose
engine is gone, a bundle's part, a stop, a close; each task ends once, its run struck in the
journal. The tests wait for what they expect to happen, never for time to pass."""

from __future__ import annotations

import concurrent.futures
import signal
import threading
import time

import pytest
from conftest_ipp import FakeRuntime
from ipyparallel import error
from test_ipp_unit import reply

from jupyter_sched.core import events as ev
from jupyter_sched.executors.base import LeftRunning, TaskRecord, Work
from jupyter_sched.executors.ipp.kept import Journal, Sent, open_compacted, read_journal
from jupyter_sched.executors.ipp.kept.takeback import AFTER, BEHIND, KEY, TakeBack, taken_back
from jupyter_sched.model.specs import TaskSpec

RUNS = [Sent("old.1/t1#1", "first", 0, "req-1"), Sent("old.1/t2#1", "second", 1, "req-2"),
        Sent("old.1/t3#1", "bundled", 1, "req-3", index=1)]


class Outcome:
    """What ``Client.get_result(request, block=False)`` gives: the controller's record."""

    def __init__(self, hub: Hub, request: str) -> None:
        self.hub, self.request = hub, request
        self.stdout, self.stderr = hub.printed.get(request, ("", ""))

    def wait(self, timeout: float) -> bool:
        self.hub.asked.append((self.request, timeout))
        answer = self.hub.answers.get(self.request)
        if isinstance(answer, BaseException):
            raise answer
        return answer is not None

    def get(self, timeout: float) -> object:
        return self.hub.answers[self.request]


class Hub:
    """A fake client of the kept cluster's controller: the answers it has (None: pending), the
    requests sent behind an engine's work (their futures), the signals sent."""

    def __init__(self) -> None:
        self.answers: dict[str, object] = {}
        self.printed: dict[str, tuple[str, str]] = {}
        self.asked: list[tuple[str, float]] = []
        self.behind: dict[int, concurrent.futures.Future] = {}
        self.gone: set[int] = set()
        self.signals: list[tuple[int, list[int]]] = []
        self.sent_behind = threading.Event()
        self.closed = False

    def get_result(self, request: str, block: bool = False) -> Outcome:
        assert block is False
        return Outcome(self, request)

    def __getitem__(self, engine: int) -> Hub:
        if engine in self.gone:
            raise IndexError(f"No such engine: {engine}")
        self._engine = engine
        return self

    def apply_async(self, fn) -> concurrent.futures.Future:
        assert fn is BEHIND
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.behind[self._engine] = future
        self.sent_behind.set()
        return future

    def send_signal(self, sig: int, targets: list[int], block: bool) -> None:
        self.signals.append((sig, targets))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def journal(tmp_path):
    """A journal whose live lines are RUNS, as a kernel that connects finds it."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    path = folder / "kept-c1.journal"
    first = Journal(path)
    for run in RUNS:
        first.append(run)
    first.close()
    journal, view = open_compacted(path)
    assert view.running == RUNS
    yield journal
    journal.close()


@pytest.fixture
def setup(journal):
    runtime, hub = FakeRuntime(), Hub()
    back = TakeBack(runtime, hub, "c1", RUNS, journal)
    back.announce()
    yield runtime, hub, back, journal
    back.close()


def follow(back: TakeBack, task: str, run: Sent, attempt: int = 1) -> TaskRecord:
    record = TaskRecord(task, TaskSpec(task, name=run.name),
                        Work(fn=taken_back, kwargs={KEY: run.id}))
    back.start(ev.Start(task, back.node, back.slots[0], {}, attempt=attempt), record)
    return record


def remote(exception: BaseException) -> error.RemoteError:
    """``exception`` raised on an engine, as the controller gives it back."""
    try:
        raise exception
    except BaseException:
        return error.unwrap_exception(error.wrap_exception())


def reported(runtime: FakeRuntime, count: int, timeout: float = 30.0) -> list:
    """The events reported, once there are ``count`` (the node's announcement included)."""
    deadline = time.monotonic() + timeout
    while len(runtime.events) < count:
        assert time.monotonic() < deadline, runtime.events
        time.sleep(0.005)
    return runtime.events


def live(journal: Journal) -> list[str]:
    return [run.name for run in read_journal(journal.path).running]


def test_a_run_that_ended_while_no_kernel_was_there_comes_back_at_once(setup):
    runtime, hub, back, journal = setup
    hub.answers["req-1"] = reply(result=42, x=7)
    hub.printed["req-1"] = ("printed there\n", "")
    follow(back, "t5", RUNS[0], attempt=2)
    node, finished = reported(runtime, 2)
    assert isinstance(node, ev.NodeAdded) and node.labels["pinned-only"] == "true"
    assert finished == ev.Finished("t5", attempt=2)
    assert runtime.outcomes["t5"] == {"result": 42, "attempt": 2}
    assert back.names_of("t5") == {"x": 7}
    assert hub.asked == [("req-1", 0)] and hub.behind == {}  # asked once, nothing sent
    assert live(journal) == ["second", "bundled"]  # its line is struck


def test_a_run_still_running_is_answered_once_its_engine_is_free(setup):
    runtime, hub, back, journal = setup
    hub.answers["req-2"] = None  # pending
    follow(back, "t6", RUNS[1])
    assert hub.sent_behind.wait(30)
    assert runtime.events[1:] == [] and hub.asked == [("req-2", 0)]  # nothing asked since
    hub.answers["req-2"] = reply(result="done")
    hub.behind[1].set_result(None)  # the engine ran what it had, then this
    assert reported(runtime, 2)[1:] == [ev.Finished("t6", attempt=1)]
    assert hub.asked == [("req-2", 0), ("req-2", AFTER)]
    assert live(journal) == ["first", "bundled"]


def test_the_runs_waiting_for_one_engine_share_one_request_behind_its_work(setup):
    runtime, hub, back, journal = setup
    follow(back, "t6", RUNS[1])
    assert hub.sent_behind.wait(30)
    follow(back, "t7", RUNS[2])
    deadline = time.monotonic() + 30
    while ("req-3", 0) not in hub.asked:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert list(hub.behind) == [1]
    hub.answers["req-2"] = reply(result="two")
    hub.answers["req-3"] = (reply(result="not this one"), reply(result="part"))
    hub.behind[1].set_result(None)
    events = reported(runtime, 3)
    assert set(events[1:3]) == {ev.Finished("t6", attempt=1), ev.Finished("t7", attempt=1)}
    assert runtime.outcomes["t7"]["result"] == "part"  # its part of the bundle's reply
    assert live(journal) == ["first"]


def test_a_request_the_controller_never_got_fails_in_words(setup):
    runtime, hub, back, journal = setup
    hub.answers["req-1"] = remote(KeyError("No such message: req-1"))
    follow(back, "t5", RUNS[0])
    (failed,) = reported(runtime, 2)[1:]
    assert failed == ev.Failed("t5", "kept cluster c1's controller has no record of first's "
                               "request: it never reached the controller (the kernel that sent "
                               "it ended first) or the controller has lost its records; "
                               "whether it ran is not known, and it is not run again",
                               attempt=1)
    assert type(runtime.outcomes["t5"]["error"]) is RuntimeError
    assert live(journal) == ["second", "bundled"]  # not taken back again


def test_a_run_whose_engine_is_gone_and_not_recorded_ended_is_lost_in_words(setup):
    runtime, hub, back, _ = setup
    hub.gone.add(0)
    follow(back, "t5", RUNS[0])
    (failed,) = reported(runtime, 2)[1:]
    assert failed.error == ("kept cluster c1's controller has no outcome for first, and its "
                             "engine 0 is gone: it did not end as a task ends (its engine may "
                             "have died while it ran); it is not run again")
    assert hub.asked == [("req-1", 0), ("req-1", AFTER)]


def test_its_own_error_comes_back_as_itself(setup):
    runtime, hub, back, _ = setup
    hub.answers["req-1"] = remote(ZeroDivisionError("division by zero"))
    follow(back, "t5", RUNS[0])
    (failed,) = reported(runtime, 2)[1:]
    assert failed.error.startswith("the outcome of first cannot be had from kept cluster c1: "
                                    "RemoteError: ")
    assert isinstance(runtime.outcomes["t5"]["error"], error.RemoteError)


def test_each_run_is_followed_once_and_nothing_else_runs_there(setup):
    runtime, hub, back, _ = setup
    hub.answers["req-2"] = None
    follow(back, "t6", RUNS[1])
    follow(back, "t7", RUNS[1])  # the same run again
    record = TaskRecord("t8", TaskSpec("t8"), Work(fn=len, args=([],)))
    back.start(ev.Start("t8", back.node, back.slots[0], {}), record)
    events = reported(runtime, 3)[1:]
    assert [(e.task, type(e)) for e in events] == [("t7", ev.Failed), ("t8", ev.Failed)]
    assert events[0].error == ("node kept-c1 runs only the tasks taken back from kept "
                                "cluster c1, each once")


def test_a_stopped_task_interrupts_its_engine_and_ends_stopped(setup):
    runtime, hub, back, _ = setup
    hub.answers["req-2"] = None
    follow(back, "t6", RUNS[1])
    assert hub.sent_behind.wait(30)
    back.stop("t6", "cancelled by the user")
    deadline = time.monotonic() + 30
    while not hub.signals:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert hub.signals == [(signal.SIGINT, [1])]
    hub.answers["req-2"] = remote(KeyboardInterrupt())
    hub.behind[1].set_result(None)
    assert reported(runtime, 2)[1:] == [ev.Stopped("t6", attempt=1)]


def test_closing_fails_what_is_followed_once_and_a_late_answer_changes_nothing(setup):
    runtime, hub, back, journal = setup
    hub.answers["req-2"] = None
    follow(back, "t6", RUNS[1])
    assert hub.sent_behind.wait(30)
    back.close()
    (failed,) = runtime.events[1:]
    assert failed == ev.Failed("t6", "the scheduler stopped following it; it goes on on kept "
                               "cluster c1", lost=True, attempt=1)
    assert isinstance(runtime.outcomes["t6"]["error"], LeftRunning) and hub.closed
    hub.answers["req-2"] = reply(result="late")
    hub.behind[1].set_result(None)  # (its thread has ended: nobody asks any more)
    assert runtime.events[1:] == [failed]
    assert "second" in live(journal)  # a later kernel takes it back


def test_the_node_goes_once_the_last_run_taken_back_has_ended(setup):
    runtime, hub, back, journal = setup
    for k, run in enumerate(RUNS):
        hub.answers[run.request] = reply(result=k)
    hub.answers["req-3"] = (reply(result=-1), reply(result=2))
    for k, run in enumerate(RUNS):
        follow(back, f"t{k + 5}", run)
    events = reported(runtime, 5)
    assert [type(e) for e in events] == [ev.NodeAdded, ev.Finished, ev.Finished, ev.Finished,
                                         ev.NodeRemoved]
    assert live(journal) == []
