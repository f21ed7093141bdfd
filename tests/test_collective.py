"""jupyter_sched.collective: an all-reduce over sockets between gang members, checked with real
threads, real processes and a real gang in the scheduler."""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time

import pytest

from jupyter_sched.collective import CollectiveError, allreduce, rendezvous

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gang_env(rank: int, size: int, port: int, secret: str = "") -> dict[str, str]:
    env = {"RANK": str(rank), "WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    if secret:
        env["JUPYTER_SCHED_GANG_SECRET"] = secret
    return env


def in_threads(size: int, member, timeout: float = 20.0) -> list:
    """Run ``member(rank, env)`` in ``size`` threads; each one's result or exception."""
    port = free_port()
    results: list = [None] * size

    def run(rank: int) -> None:
        try:
            results[rank] = member(rank, gang_env(rank, size, port))
        except BaseException as err:
            results[rank] = err

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a member hangs"
    return results


def test_sum_of_lists_reaches_every_member():
    results = in_threads(3, lambda r, env: allreduce([r, 1.5 * r, [r, 1]], env=env))
    assert results == [[3, 4.5, [3, 3]]] * 3


@pytest.mark.parametrize(("op", "expected"), [
    ("sum", 6), ("mean", 2.0), ("min", 1), ("max", 3), ("prod", 6),
])
def test_each_op(op, expected):
    assert in_threads(3, lambda r, env: allreduce(r + 1, op=op, env=env)) == [expected] * 3


def test_float_sums_are_the_same_on_every_member_and_exact_for_integers():
    values = [0.1, 0.2, 0.3, 1e16, -1e16]
    results = in_threads(5, lambda r, env: allreduce(values[r], env=env))
    assert len(set(results)) == 1 and results[0] == pytest.approx(0.6)
    big = in_threads(2, lambda r, env: allreduce(2**70 + r, env=env))
    assert big == [2**71 + 1] * 2


def test_many_calls_in_a_row():
    def member(rank, env):
        return [allreduce(i * (rank + 1), env=env) for i in range(20)]

    results = in_threads(3, member)
    assert results == [[6 * i for i in range(20)]] * 3


def test_a_gang_of_one_needs_no_network():
    assert allreduce([1, 2], env=gang_env(0, 1, 1)) == [1, 2]


def _process_member(rank: int, size: int, port: int, out) -> None:
    os.environ.update(gang_env(rank, size, port))  # as on an engine: the real environment
    out.put((rank, allreduce([rank, 10 * rank], op="sum")))


@pytest.mark.integration
def test_between_processes_from_the_environment():
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_process_member, args=(r, 2, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(10)
    assert got == {0: [1, 10], 1: [1, 10]}
    assert all(p.exitcode == 0 for p in procs)


# -- errors -------------------------------------------------------------------------------------

def test_shapes_that_differ_fail_every_member_naming_the_rank():
    results = in_threads(2, lambda r, env: allreduce([1] * (r + 1), env=env))
    assert all(isinstance(e, CollectiveError) for e in results), results
    assert all("rank 1 sent a value of shape [None, None], rank 0 one of shape [None]"
               in str(e) for e in results), results


def test_ops_that_differ_fail():
    results = in_threads(2, lambda r, env: allreduce(1, op=("sum", "max")[r], env=env))
    assert all("rank 1 reduces with op='max', rank 0 with op='sum'" in str(e)
               for e in results), results


def test_a_member_that_never_comes_times_out_on_rank_0_naming_it():
    start = time.monotonic()
    results = in_threads(3, lambda r, env: allreduce(1, env=env, timeout=1.0) if r < 2 else 0)
    assert time.monotonic() - start < 10
    assert isinstance(results[0], TimeoutError)
    assert "rank 2 of 3 did not join within 1 s" in str(results[0])
    # the member that came is told why, instead of waiting for its own timeout
    assert isinstance(results[1], CollectiveError) and "rank 2 of 3" in str(results[1])


def test_without_rank_0_a_member_times_out_saying_where_it_looked():
    env = gang_env(1, 2, free_port())
    with pytest.raises(TimeoutError, match=r"rank 1 could not reach rank 0 at 127\.0\.0\.1:\d+ "
                                           r"within 0\.3 s"):
        allreduce(1, env=env, timeout=0.3)


def test_bad_values_and_options_are_named():
    env = gang_env(0, 1, 1)
    with pytest.raises(TypeError, match=r"value\[1\] 'x' must be a number or a list"):
        allreduce([1, "x"], env=env)
    with pytest.raises(TypeError, match="value True must be a number"):
        allreduce(True, env=env)
    with pytest.raises(ValueError, match="op 'avg' is not a reduction; use one of sum, mean"):
        allreduce(1, op="avg", env=env)
    with pytest.raises(ValueError, match="timeout 0 must be a positive number"):
        allreduce(1, env=env, timeout=0)


def test_the_rendezvous_is_checked():
    with pytest.raises(CollectiveError, match="MASTER_ADDR, MASTER_PORT not set"):
        rendezvous({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(CollectiveError, match="RANK=2 must be below WORLD_SIZE=2"):
        rendezvous(gang_env(2, 2, 5000))
    with pytest.raises(CollectiveError, match="WORLD_SIZE='two' must be a whole number"):
        rendezvous({**gang_env(0, 2, 5000), "WORLD_SIZE": "two"})
    with pytest.raises(CollectiveError, match="MASTER_PORT=70000 is not a TCP port"):
        rendezvous(gang_env(0, 2, 70000))
    assert rendezvous(gang_env(1, 4, 5000)) == (1, 4, "127.0.0.1", 5000)


def test_outside_a_task_the_process_environment_is_read(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CollectiveError, match="no gang rendezvous here"):
        allreduce(1)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    assert allreduce(7) == 7


# -- in a real gang -----------------------------------------------------------------------------

@pytest.fixture
def scheduler():
    from jupyter_sched.runtime.scheduler import Scheduler

    s = Scheduler(local_resources="GPU=2,CPU=4", update_interval=0.02).start()
    yield s
    s.shutdown()


def _member_sum() -> tuple:
    from jupyter_sched import current_task

    task = current_task()
    return task.rank, allreduce([task.rank + 1, 10.0])


def test_gang_members_in_kernel_threads_reduce_over_their_rendezvous(scheduler):
    gang = scheduler.submit(_member_sum, resources={"GPU": 1}, gang="ddp:2")
    assert gang.result(timeout=30) == [(0, [3, 20.0]), (1, [3, 20.0])]


def _rank_1_fails() -> None:
    from jupyter_sched import current_task

    if current_task().rank == 1:
        raise RuntimeError("rank 1 broke")
    allreduce(1, timeout=50)


def test_a_failing_member_stops_rank_0_waiting_in_allreduce_at_once(scheduler):
    start = time.monotonic()
    gang = scheduler.submit(_rank_1_fails, resources={"GPU": 1}, gang="ddp:2")
    with pytest.raises(RuntimeError, match="rank 1 broke"):
        gang.result(timeout=30)
    scheduler.wait(list(gang), timeout=30)
    assert time.monotonic() - start < 10  # not the 50 s allreduce timeout
    assert [(m.state, m.reason) for m in gang] == [
        ("cancelled", f"gang 'ddp': {gang[1].id} failed"),
        ("failed", "RuntimeError: rank 1 broke")]


def test_a_local_process_without_the_gangs_secret_can_neither_add_a_value_nor_block():
    """Any process of the host may connect to MASTER_PORT first: one that claims rank 1 with
    a value, and one that connects and says nothing, are both ignored; the members, who carry
    the gang's secret, reduce their own values."""
    import json
    import struct

    port, secret, size = free_port(), "s3cret-of-this-gang", 3
    results: list = [None] * size
    started = threading.Event()

    def member(rank: int) -> None:
        if rank:
            started.wait(10)
        try:
            results[rank] = allreduce(rank + 1, env=gang_env(rank, size, port, secret),
                                      timeout=20)
        except BaseException as err:
            results[rank] = err

    lead = threading.Thread(target=member, args=(0,))
    lead.start()
    intruders = []
    deadline = time.monotonic() + 10
    while len(intruders) < 2 and time.monotonic() < deadline:
        try:
            intruders.append(socket.create_connection(("127.0.0.1", port), timeout=1))
        except OSError:
            time.sleep(0.02)
    assert len(intruders) == 2, "rank 0 never listened"
    forged = json.dumps({"rank": 1, "world_size": size, "op": "sum", "shape": None,
                         "value": 1000, "secret": "a guess"}).encode()
    intruders[0].sendall(struct.pack("!I", len(forged)) + forged)  # a value, no secret
    # intruders[1] connects and says nothing
    started.set()
    others = [threading.Thread(target=member, args=(r,)) for r in (1, 2)]
    for t in others:
        t.start()
    for t in (lead, *others):
        t.join(30)
    for conn in intruders:
        conn.close()
    assert results == [6, 6, 6], results  # 1 + 2 + 3: the forged 1000 is not in it
