"""ipyparallel behind one door (``executors/ipp/internals.py``): every internal the executor
relies on is there, with the shape it expects, in the installed ipyparallel; without one, the
executor goes through ipyparallel's public API, says so once, and tasks still run. And nothing
of a task is left in the executor's tables (or the client's) once it has ended."""

from __future__ import annotations

import os
import warnings

import ipyparallel
import pytest
from conftest_ipp import scheduler_with_engines
from waiting import wait_for

from jupyter_sched.executors.ipp import connection as connection_module
from jupyter_sched.executors.ipp import internals
from jupyter_sched.executors.ipp.connection import Connection, FastConnection, open_connection


def test_every_internal_relied_on_is_there_as_expected():
    assert internals.check() == []
    assert internals.hub_problems() == []
    assert internals.version() == ipyparallel.__version__


def test_the_hubs_answer_for_an_unknown_request_is_told_apart_by_its_type_and_words():
    from ipyparallel import error

    try:
        raise KeyError("No such message: abc_1_1")
    except KeyError:
        unknown = error.unwrap_exception(error.wrap_exception())
    assert internals.unknown_request(unknown)
    try:
        raise KeyError("something else")
    except KeyError:
        other = error.unwrap_exception(error.wrap_exception())
    assert not internals.unknown_request(other)
    assert not internals.unknown_request(KeyError("No such message: abc_1_1"))  # not remote


def test_a_missing_internal_is_named():
    class Client:  # a client whose tables are not what the fast path keeps up
        _futures: dict = {}

    problems = internals.check(Client())
    assert "Client._output_futures is missing, not a dict" in problems
    assert "Client._io_loop has no add_callback and call_later" in problems


# -- on a real cluster ---------------------------------------------------------------------------


def task(x: int) -> tuple[int, int]:
    print(f"task {x}")
    return x * 2, os.getpid()


def tiny(x: int) -> int:
    return x + 1


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_without_an_internal_tasks_go_through_the_public_api_and_it_is_said_once(monkeypatch):
    monkeypatch.delattr(ipyparallel.serialize, "PrePickled")  # (the client imported its own)
    monkeypatch.setattr(connection_module, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with scheduler_with_engines(engines=2) as (sched, executor):
            assert type(executor.connection) is Connection  # the public one
            said = [w for w in caught if "jupyter_sched: ipyparallel" in str(w.message)]
            assert len(said) == 1 and said[0].category is RuntimeWarning
            text = str(said[0].message)
            assert "PrePickled" in text and ipyparallel.__version__ in text
            # tasks run on the engines, with their output
            handles = [sched.submit(task, k, target="engines") for k in range(6)]
            results = [h.result(timeout=60) for h in handles]
            assert [r for r, _ in results] == [0, 2, 4, 6, 8, 10]
            pids = {pid for _, pid in results}
            assert pids <= {e.pid for e in executor.engines.values()}
            wait_for(lambda: "task 5" in handles[5].stdout, 20, "the task's output")
            # a stop lands through the public API too
            slow = sched.submit(code="import time; time.sleep(30)", namespace={},
                                target="engines")
            wait_for(lambda: slow.state == "running", 30, "the slow task to run")
            sched.cancel(slow)
            wait_for(lambda: slow.state == "cancelled", 30, "the slow task to stop")
            assert sched.submit(tiny, 1, target="engines").result(timeout=60) == 2
            # said once: connecting again says nothing more
            assert type(open_connection(executor.client)) is Connection
    said = [w for w in caught if "jupyter_sched: ipyparallel" in str(w.message)]
    assert len(said) == 1


def per_task_entries(executor) -> dict[str, int]:
    """What the executor's parts (and the client, for the fast path's requests) hold per task:
    each should be empty once every task has ended."""
    parts = executor._pipeline, executor._bundles, executor._gangs, executor._leases
    client = executor.client
    with executor._guard.lock:
        return {
            "runs": len(parts[0]._runs),
            "lines": sum(len(line) for line in parts[0]._lines.values()),
            "bundled": sum(len(held) for held in parts[1]._held.values()),
            "gangs": len(parts[2]._gangs),
            "held elsewhere": len(parts[3].told),
            "reads": len(parts[3]._reading),
            "client futures": len(client._futures),
            "client output futures": len(client._output_futures),
            "client results": len(client.results),
            "client metadata": len(client.metadata),
            "client outstanding": len(client.outstanding),
        }


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_thousands_of_tiny_tasks_leave_nothing_behind():
    with scheduler_with_engines(engines=2) as (sched, executor):
        assert isinstance(executor.connection, FastConnection)
        sched.pipeline = 5.0  # tasks sent ahead to busy engines, in bundles
        handles = [sched.submit(tiny, k, target="engines",
                                resources={"GPU": 0.25} if k % 4 == 0 else None)
                   for k in range(2000)]
        assert [h.result(timeout=240) for h in handles] == [k + 1 for k in range(2000)]
        empty = dict.fromkeys(per_task_entries(executor), 0)
        wait_for(lambda: per_task_entries(executor) == empty, 30,
                 f"the tables to empty: {per_task_entries(executor)}")
        assert len(executor.engines) == 2 and all(e.task is None
                                                  for e in executor.engines.values())
