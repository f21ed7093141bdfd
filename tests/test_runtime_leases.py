"""The runtime and the host's lease ledger: leases taken before a local GPU task starts and
given back when it ends; shares other processes hold keep work queued, with the reason; a race
lost to another kernel re-queues the attempt without a retry; a broken ledger costs a warning."""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from jupyter_sched.host.discovery import GpuInfo, HostInfo
from jupyter_sched.host.ledger import Ledger, LedgerError, device_key
from jupyter_sched.host.nvml import GpuProcess, Nvml
from jupyter_sched.host.outside import OutsideUse
from jupyter_sched.runtime import leases as runtime_leases
from jupyter_sched.runtime.leases import SWEEP
from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = [pytest.mark.timeout(60), pytest.mark.scheduler("GPU=1,CPU=4")]

WAIT = 10


@pytest.fixture
def path(ledger_path):
    """The ledger of the test's scheduler (the ``sched`` fixture's)."""
    return ledger_path


def gpu_key(sched, index=0):
    gpu = GpuInfo(index, None, "", "declared", None, declared=True)
    return device_key(gpu, sched.local_host.key)


def as_other_process(path, key, units):
    """A lease held by a live process that is not this one (our parent), as another kernel's."""
    parent = psutil.Process().parent()
    from jupyter_sched.host.ledger.holders import Owner

    me = Owner.current()
    owner = Owner(me.uid, me.user, parent.pid, parent.create_time(), me.host, me.pidns,
                  "notebook train.ipynb")
    with Ledger(path, owner=owner) as ledger:
        return ledger.take(key, units, task="t9")


def other_holder():
    """An owner for another process of this user that runs (a child, killed by the caller)."""
    import subprocess
    import sys

    from jupyter_sched.host.ledger.holders import Owner

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    me = Owner.current()
    owner = Owner(me.uid, me.user, child.pid, psutil.Process(child.pid).create_time(), me.host,
                  me.pidns, "notebook other.ipynb")
    return owner, child


def wait_for(predicate, timeout=WAIT):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_task_holds_its_lease_while_it_runs(sched, path):
    go_on = threading.Event()
    h = sched.submit(go_on.wait, WAIT, resources="GPU=0.5")
    assert wait_for(lambda: h.state == "running")
    with Ledger(path) as ledger:
        (lease,) = ledger.held()
        assert (lease.device, lease.units, lease.task) == (gpu_key(sched), 5000, h.id)
        assert lease.held == "logical"  # a kernel thread: nothing caps its share
        go_on.set()
        h.result(WAIT)
        assert wait_for(lambda: ledger.held() == [])


def test_shares_held_elsewhere_keep_work_queued_with_the_reason(sched, path):
    lease = as_other_process(path, gpu_key(sched), 7500)
    h = sched.submit(lambda: "ran", resources="GPU=0.5")
    assert wait_for(lambda: "held by another kernel" in (sched.record(h.id).reason or ""))
    assert h.state == "queued"
    assert "0.75 of GPU 0 is held by another kernel" in sched.record(h.id).reason
    assert "notebook train.ipynb" in sched.record(h.id).reason
    small = sched.submit(lambda: "fits", resources="GPU=0.25")
    assert small.result(WAIT) == "fits"
    with Ledger(path) as ledger:
        ledger.give(lease)
    started = time.monotonic()
    assert h.result(WAIT) == "ran"
    assert time.monotonic() - started < 2.0  # polled every 0.25 s while it waits


def test_a_lost_race_requeues_the_attempt_without_a_retry(sched, path, monkeypatch):
    """Another kernel takes the share after the last read: the take is refused, the attempt
    ends unstarted, and the task runs once the share is back, its retries untouched."""
    leases = sched._loop.leases
    blind = threading.Event()
    blind.set()
    real_poll, real_settle = leases.poll, leases.settle
    monkeypatch.setattr(leases, "poll", lambda *a: None if blind.is_set() else real_poll(*a))

    def settle(*args):
        refused = real_settle(*args)
        if refused:
            blind.clear()
        return refused

    monkeypatch.setattr(leases, "settle", settle)
    lease = as_other_process(path, gpu_key(sched), 10000)
    h = sched.submit(lambda: "ran", resources="GPU=0.5")
    assert wait_for(lambda: not blind.is_set())
    assert wait_for(lambda: "held by another kernel" in (sched.record(h.id).reason or ""))
    assert h.state == "queued"
    with Ledger(path) as ledger:
        ledger.give(lease)
    assert h.result(WAIT) == "ran"
    task = sched.inspect_core(lambda core: core.tasks[h.id])
    assert (task.failures, task.attempt) == (0, 2)


@pytest.mark.integration
def test_a_dead_holders_lease_is_swept(sched, path):
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        from jupyter_sched.host.ledger.holders import Owner

        me = Owner.current()
        proc = psutil.Process(child.pid)
        owner = Owner(me.uid, me.user, child.pid, proc.create_time(), me.host, me.pidns, "")
        with Ledger(path, owner=owner) as ledger:
            assert ledger.take(gpu_key(sched), 10000)
        h = sched.submit(lambda: "ran", resources="GPU=1")
        assert wait_for(lambda: h.state == "queued" and sched.record(h.id).reason)
    finally:
        child.kill()
        child.wait()
    assert h.result(WAIT) == "ran"


def test_a_corrupt_ledger_is_made_again_and_leases_go_on(path):
    """A ledger of this user's that is no database any more (a cleanup, a stray command) is
    moved aside and made again, the user is told once, and GPU work goes on under leases."""
    path.write_bytes(b"this is not a database" * 100)
    s = Scheduler(local_resources="GPU=1", ledger_path=str(path))
    s.start()
    try:
        handles = [s.submit(lambda i=i: i, resources="GPU=0.5") for i in range(4)]
        assert [h.result(WAIT) for h in handles] == [0, 1, 2, 3]
        assert s._loop.leases is not None and s._loop.leases.view.blocked is None
        assert [p.name for p in path.parent.iterdir() if ".damaged-" in p.name]
        with Ledger(path) as ledger:
            assert ledger.version() > 0  # a ledger again, and used
    finally:
        s.shutdown()


def test_another_programs_database_is_left_alone_and_gpu_work_waits(path):
    """A ledger path naming another program's database: never moved, never used; GPU tasks
    wait with the reason (and the fix), CPU tasks run."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    s = Scheduler(local_resources="GPU=1,CPU=2", ledger_path=str(path))
    s.start()
    try:
        gpu = s.submit(lambda: "gpu", resources="GPU=0.5")
        assert wait_for(lambda: gpu.state == "queued" and "cannot be used" in gpu.reason)
        assert "host_leases = False" in gpu.reason
        assert s.submit(lambda: "cpu", resources="CPU=1").result(WAIT) == "cpu"
        assert [n[2] for n in s.notices() if "cannot be used" in n[2]]
        gpu.cancel()
    finally:
        s.shutdown()
    db = sqlite3.connect(path)
    assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    db.close()


def test_a_ledger_that_fails_for_a_while_loses_no_task(sched, path, monkeypatch):
    """A ledger that errs (a disk gone, a lock never released): GPU work waits, naming why,
    and goes on when it works again; nothing runs without a lease meanwhile."""
    failing = threading.Event()
    failing.set()
    real = sched._loop.leases.ledger.exchange

    def flaky(*args, **kwargs):
        if failing.is_set():
            raise LedgerError("the disk went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(sched._loop.leases.ledger, "exchange", flaky)
    handles = [sched.submit(lambda i=i: i, resources="GPU=0.5") for i in range(3)]
    assert wait_for(lambda: "the disk went away" in handles[0].reason)
    assert all(h.state == "queued" for h in handles)
    failing.clear()
    assert [h.result(WAIT) for h in handles] == [0, 1, 2]
    assert sched._loop.leases.view.blocked is None


def test_leases_off_takes_none(path):
    s = Scheduler(local_resources="GPU=1", ledger_path=str(path), host_leases=False)
    try:
        assert s.submit(lambda: 1, resources="GPU=1").result(WAIT) == 1
        assert s._loop.leases is None
    finally:
        s.shutdown()
    assert not path.exists()


def test_shutdown_gives_back_every_lease(path):
    s = Scheduler(local_resources="GPU=1", ledger_path=str(path))
    h = s.submit(time.sleep, 0.05, resources="GPU=0.5")  # (interruptible: it ends on shutdown)
    assert wait_for(lambda: h.state in ("running", "done"))
    s.shutdown()
    with Ledger(path) as ledger:
        assert ledger.held() == []


@pytest.mark.integration
def test_a_task_blocked_in_a_call_keeps_its_lease_after_shutdown_until_it_returns(path):
    """Shutdown cannot interrupt a thread inside a C call (here a lock's wait): its code still
    runs on the GPU, so its share stays leased, and another kernel cannot take the whole GPU,
    until the call returns; the user is told which task is still running."""
    s = Scheduler(local_resources="GPU=1", ledger_path=str(path))
    go_on = threading.Event()
    h = s.submit(go_on.wait, WAIT, resources="GPU=0.5")
    assert wait_for(lambda: h.state == "running")
    s.shutdown()
    assert [n for n in s.notices() if h.id in n[2] and "stay leased" in n[2]]
    owner, child = other_holder()
    try:
        with Ledger(path, owner=owner) as other:
            assert [lease.task for lease in other.held()] == [h.id]
            assert not other.take(gpu_key(s), 10_000)  # the whole GPU: not while it runs
            go_on.set()  # the call returns, the thread ends
            assert wait_for(lambda: other.held() == [])
            assert other.take(gpu_key(s), 10_000)
    finally:
        child.kill()
        child.wait()


class FakeNvml(Nvml):
    """One 8 GiB GPU whose processes are given."""

    def __init__(self, processes):
        self._processes = processes

    def device_count(self):
        return 1

    def device(self, index):
        raise NotImplementedError

    def processes(self, index):
        return self._processes


def test_memory_used_outside_every_scheduler_counts_as_held(path):
    gib = 2**30
    host = HostInfo("h", "boot", 4, 16 * gib,
                    (GpuInfo(0, 0, "GPU-aaaa", "Fake GPU", 8 * gib),))
    nvml = FakeNvml([GpuProcess(os.getpid(), 4 * gib), GpuProcess(1, 2 * gib)])
    leases = runtime_leases.HostLeases(Ledger(path), host, "local",
                                       OutsideUse(host, nvml))
    held = leases.poll(0.0, waiting=True)
    assert held.device_shares == {"GPU": {0: 2500}}  # pid 1's 2 GiB, not this process's 4
    assert held.reason == ("2 GiB of GPU 0's memory (0.25 of it) is used by processes outside "
                           "the scheduler")
    assert leases.poll(0.1, waiting=True) is None  # nothing changed
    nvml._processes = [GpuProcess(1, None)]  # NVML cannot say: nothing is claimed
    assert leases.poll(SWEEP + 1, waiting=True).device_shares == {"GPU": {}}


def test_a_step_settles_its_leases_in_one_exchange_and_its_own_writes_are_no_news(path):
    """Ended attempts give back and starts take in one transaction; what this scheduler wrote
    does not make it re-read the ledger, what another process wrote does (at once after a
    refusal, else within ``READ`` seconds)."""
    from jupyter_sched.core import events as ev

    host = HostInfo("h", "boot", 4, 0, (GpuInfo(0, None, "", "declared", None, declared=True),))
    leases = runtime_leases.HostLeases(Ledger(path), host, "local")
    assert leases.poll(0.0, waiting=False) is None  # nothing held elsewhere: nothing to say
    exchanges = []
    real = leases.ledger.exchange
    leases.ledger.exchange = lambda *a, **k: exchanges.append(a) or real(*a, **k)

    def start(task, units):
        return ev.Start(task, "local", None, {"GPU": {0: units}}, attempt=1)

    assert leases.settle([], [start("a", 5_000), start("b", 5_000), start("c", 2_500)], 0.0) == {
        "c": "0.25 of GPU 0 is not free (only 0 is): " + "; ".join(
            lease.describe() for lease in leases.ledger.held())}
    assert sorted(leases.tasks()) == ["a", "b"]
    assert leases.settle(["a"], [start("c", 2_500)], 0.0) == {}
    assert len(exchanges) == 2 and sorted(leases.tasks()) == ["b", "c"]
    assert leases.ledger.held()[-1].task == "c"
    # after a refusal it reads at once, and tells the core again (here: nobody else holds any)
    assert leases.poll(1.0, waiting=False).device_shares == {"GPU": {}}
    version = leases.ledger.version()
    assert leases.settle(["c"], [start("d", 2_500)], 1.0) == {}  # c's lease passes to d as it is
    assert leases.ledger.version() == version and len(exchanges) == 2  # written later
    assert sorted(leases.tasks()) == ["b", "d"] and leases.label_due == 1.0 + runtime_leases.LABEL
    assert leases.settle(["b"], [], 1.5) == {}  # the give writes the pass too
    assert len(exchanges) == 3 and leases.label_due is None
    assert [(lease.units, lease.task) for lease in leases.ledger.held()] == [(2_500, "d")]
    read = leases.ledger.held
    leases.ledger.held = lambda *a: pytest.fail("the leases read again for its own write")
    assert leases.poll(1.0 + runtime_leases.READ, waiting=False) is None
    leases.ledger.held = read
    as_other_process(path, gpu_key_of(host), 5_000)
    assert leases.poll(1.0 + runtime_leases.READ / 2, waiting=False) is None  # not yet read
    held = leases.poll(1.0 + 3 * runtime_leases.READ, waiting=False)
    assert held.device_shares == {"GPU": {0: 5_000}}


def test_a_lease_passed_on_is_named_for_its_new_task_by_the_label_time(path, caplog):
    """A step that only passes leases on writes nothing; the ledger learns the new holder at
    the latest ``LABEL`` seconds later, for a pass in a step as for a task sent ahead on an
    engine; a pass whose lease was removed behind this process's back is taken anew."""
    from jupyter_sched.core import events as ev

    host = HostInfo("h", "boot", 4, 0, (GpuInfo(0, None, "", "declared", None, declared=True),))
    behind: dict = {}  # who runs after whom (the runtime's records)
    leases = runtime_leases.HostLeases(Ledger(path), host, "local",
                                       hooks=runtime_leases.LeaseHooks(successor=behind.get))
    label = runtime_leases.LABEL

    def start(task, after=None):
        return ev.Start(task, "local", None, {"GPU": {0: 5_000}}, attempt=1, after=after)

    def named():
        return sorted(lease.task for lease in leases.ledger.held())

    assert leases.settle([], [start("a"), start("b")], 10.0) == {}
    assert leases.settle(["a"], [start("c")], 10.5) == {} and named() == ["a", "b"]
    assert leases.settle([], [], 10.5 + label / 2) == {} and named() == ["a", "b"]
    assert leases.settle([], [], 10.5 + label) == {} and named() == ["b", "c"]
    assert leases.label_due is None
    behind["b"] = ("d", 1)  # d runs after b on b's engine, on b's shares
    assert leases.settle(["b"], [], 12.0) == {} and leases.tasks() == ["c", "d"]
    assert named() == ["b", "c"] and leases.label_due == 12.0 + label
    with Ledger(path) as other:  # b's lease removed behind this process's back
        other.give(next(lease for lease in other.held() if lease.task == "b"))
    assert leases.settle([], [], 12.0 + label) == {} and named() == ["c", "d"]
    # and when it cannot be taken anew, the task runs on without it, with a warning
    assert leases.settle(["d"], [start("e")], 20.0) == {}
    with Ledger(path) as other:
        other.give(next(lease for lease in other.held() if lease.task == "d"))
    as_other_process(path, gpu_key_of(host), 5_000)
    assert leases.settle([], [], 20.0 + label) == {} and leases.tasks() == ["c"]
    assert "e runs without its GPU lease" in caplog.text


def test_the_runtime_names_a_task_given_a_passed_lease_without_a_step_of_its_own(sched, path):
    """A long task that took over a short one's lease is named in the ledger within
    ``LABEL`` seconds, though nothing else happens in the scheduler."""
    go, gate = threading.Event(), threading.Event()
    try:
        first = sched.submit(go.wait, WAIT, resources={"GPU": 1}, name="short")
        second = sched.submit(gate.wait, WAIT, resources={"GPU": 1}, name="long")
        assert wait_for(lambda: (first.state, second.state) == ("running", "queued"))
        go.set()
        first.result(WAIT)
        with Ledger(path) as ledger:  # (asking the scheduler anything would make a step)
            assert wait_for(lambda: [lease.task for lease in ledger.held()] == [second.id],
                            timeout=runtime_leases.LABEL + WAIT)
        assert second.state == "running"
    finally:
        go.set()
        gate.set()


def test_a_lease_passed_between_tasks_keeps_how_its_share_is_held(sched, path):
    """Kernel threads hold their shares ``logical``: the ledger says so while they run, and
    the lease a task takes over from one that ended says it still."""
    gates = [threading.Event() for _ in range(3)]
    try:
        first, second, third = (sched.submit(gate.wait, WAIT, resources="GPU=0.5")
                                for gate in gates)
        assert wait_for(lambda: (first.state, second.state) == ("running", "running"))
        with Ledger.to_read(path) as ledger:
            before = {lease.task: lease for lease in ledger.held()}
        assert {task: lease.held for task, lease in before.items()} == {
            first.id: "logical", second.id: "logical"}
        gates[0].set()
        first.result(WAIT)
        assert wait_for(lambda: third.state == "running")

        def held():
            with Ledger.to_read(path) as ledger:
                return {lease.task: (lease.id, lease.held) for lease in ledger.held()}

        assert wait_for(lambda: first.id not in held(), timeout=runtime_leases.LABEL + WAIT)
        assert held() == {second.id: (before[second.id].id, "logical"),
                          third.id: (before[first.id].id, "logical")}  # first's, passed on
    finally:
        for gate in gates:
            gate.set()


def test_a_lease_passes_only_to_a_start_that_holds_its_share_the_same_way(path):
    """A start whose share is held another way (an engine under MPS after a kernel thread)
    takes a lease of its own: a pass never changes what a lease says."""
    from jupyter_sched.core import events as ev

    host = HostInfo("h", "boot", 4, 0, (GpuInfo(0, None, "", "declared", None, declared=True),))
    leases = runtime_leases.HostLeases(Ledger(path), host, "local")
    words = {"a": "logical", "b": "logical", "c": "mps", "d": None}

    def start(task, units=5_000):
        return ev.Start(task, "local", None, {"GPU": {0: units}}, attempt=1)

    def held():
        return sorted((lease.task, lease.held) for lease in leases.ledger.held())

    assert leases.settle([], [start("a")], 0.0, words) == {}
    (taken,) = leases.ledger.held()
    assert leases.settle(["a"], [start("b")], 0.0, words) == {}  # the same: passed
    assert leases.settle([], [], runtime_leases.LABEL, words) == {}
    assert held() == [("b", "logical")] and leases.ledger.held()[0].id == taken.id
    assert leases.settle(["b"], [start("c")], 2.0, words) == {}  # held another way
    assert held() == [("c", "mps")] and leases.ledger.held()[0].id != taken.id
    assert leases.settle(["c"], [start("d")], 3.0, words) == {}  # not said: ''
    assert held() == [("d", "")]
    words["e"] = "mps"  # a whole GPU has no word: any start of it takes a whole one over
    assert leases.settle(["d"], [start("e", 10_000)], 4.0, words) == {}
    whole = leases.ledger.held()
    assert [(lease.task, lease.held) for lease in whole] == [("e", "")]
    words["f"] = "logical"
    assert leases.settle(["e"], [start("f", 10_000)], 5.0, words) == {}
    assert leases.tasks() == ["f"] and leases.label_due is not None  # passed as it is


def gpu_key_of(host, index=0):
    return device_key(host.gpus[index], host.key)


def test_a_scheduler_whose_thread_died_gives_its_leases_back(path):
    first = Scheduler(local_resources="GPU=1", ledger_path=str(path)).start()
    gate = threading.Event()
    try:
        first.submit(gate.wait, WAIT, resources={"GPU": 1})
        with Ledger(path) as ledger:
            assert wait_for(lambda: len(ledger.held()) == 1)

            def crash():
                raise SystemExit("injected crash")

            first._loop._next_items = crash
            first._loop.inbox.queue.put(object())  # wakes it
            first._loop.inbox.thread.join(WAIT)
            assert "lost 1 running" in first.abandon()
            # its thread still waits (a call Python cannot interrupt): its code may use the
            # GPU, so its lease is held until it returns
            assert len(ledger.held()) == 1
            gate.set()
            assert wait_for(lambda: ledger.held() == [])
        second = Scheduler(local_resources="GPU=1", ledger_path=str(path)).start()
        try:
            assert second.submit(lambda: "mine now", resources={"GPU": 1}).result(WAIT) == \
                "mine now"
        finally:
            second.shutdown()
    finally:
        gate.set()
        first.shutdown()


def test_a_start_in_the_step_that_ends_another_task_is_not_refused_by_its_own_leases(tmp_path,
                                                                                     monkeypatch):
    monkeypatch.setenv("JUPYTER_SCHED_LEASES", str(tmp_path / "ledger.db"))
    sched = Scheduler(local_resources="GPU=2").start()
    try:
        hold = threading.Event()
        blocker = sched.submit(hold.wait, 30, resources={"GPU": 2}, name="blocker")
        first = sched.submit(code="'first come'", resources={"GPU": 2}, name="first")
        second = sched.submit(code="'second come'", resources={"GPU": 2}, name="second")
        hold.set()
        sched.wait([blocker, first, second], timeout=30)
        # FIFO, as without leases: first is placed as blocker's end is handled, and blocker's
        # lease (given back only when its record is synced) must not turn it away
        assert first.started < second.started
        assert first.result(0) == "first come" and second.result(0) == "second come"
    finally:
        sched.shutdown()


def test_a_kernel_that_only_holds_notices_its_ledger_deleted(path):
    """Nothing waits, nothing else happens: the ledger file is still looked after while the
    kernel holds a lease, made again with that lease, and the kernel's view of the GPUs comes
    back once the grace of a ledger made again is over."""
    s = Scheduler(local_resources="GPU=2", ledger_path=str(path)).start()
    gate = threading.Event()
    try:
        h = s.submit(gate.wait, WAIT, resources={"GPU": 1})
        assert wait_for(lambda: h.state == "running")
        path.unlink()
        assert wait_for(lambda: any("was deleted" in n[2] for n in s.notices()), WAIT)
        with Ledger(path) as ledger:
            assert [lease.task for lease in ledger.held()] == [h.id]
        # after the grace, the other GPU is free again for this kernel, with nothing asked
        assert wait_for(lambda: s.snapshot(fresh=True).nodes[0].devices[1].allocated == 0, 10)
        assert s.submit(lambda: "on", resources={"GPU": 1}).result(WAIT) == "on"
    finally:
        gate.set()
        s.shutdown()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_share_whose_holder_ended_is_shown_until_it_is_taken_back(sched, path):
    """A lease whose process was killed (-9) still counts until a sweep or a take takes it
    back: ``%sched`` shows it like any other holder's, marked as ended, and its summary says
    who the others are."""
    from jupyter_sched.views import display, tables

    owner, child = other_holder()
    try:
        with Ledger(path, owner=owner) as ledger:
            assert ledger.take(gpu_key(sched), 5000, task="t4")

        def others():
            return sched.snapshot(fresh=True).nodes[0].devices[0].others

        assert wait_for(lambda: len(others()) == 1)
        assert not others()[0].ended
        summary = display.summary_text(sched.snapshot(fresh=True))
        assert f"others hold 0.5: {owner.user} (notebook other.ipynb, pid {child.pid}) 0.5" \
            in summary
    finally:
        child.kill()
        child.wait()
    assert wait_for(lambda: others() and others()[0].ended)
    snap = sched.snapshot(fresh=True)
    (held,) = snap.nodes[0].devices[0].others
    assert (held.pid, held.share, held.ended) == (child.pid, 0.5, True)
    assert snap.gpu_totals() == (0.5, 1.0)  # its share still counts
    bundle = tables.Status(snap)._repr_mimebundle_()
    said = f"pid {child.pid}, since "
    assert f"0.5 held by {owner.user} (notebook other.ipynb, {said}" in bundle["text/plain"]
    assert "; ended, not yet taken back)" in bundle["text/plain"]
    assert (f"others hold 0.5: {owner.user} (notebook other.ipynb, pid {child.pid}; ended, "
            "not yet taken back) 0.5") in bundle["text/plain"]
    assert "ended, not yet taken back" in bundle["text/html"]
    (payload,) = bundle[display.MIME]["nodes"][0]["devices"][0]["others"]
    assert payload["ended"] is True and payload["pid"] == child.pid
    with Ledger(path) as ledger:
        assert len(ledger.sweep()) == 1
    assert wait_for(lambda: not others())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_task_waiting_out_a_remade_ledgers_grace_names_the_holders_back_so_far(sched, path):
    """While a ledger made again waits for its holders to take back what they held, every
    GPU counts as held; a waiting task's reason says until when, and names the holders that
    have taken theirs back already (with what of which GPU)."""
    import contextlib

    from jupyter_sched.host.ledger.order import set_grace
    from jupyter_sched.testing import ledger_writer

    owner, child = other_holder()
    try:
        with Ledger(path, owner=owner) as ledger:
            assert ledger.take(gpu_key(sched), 5000, task="t4")
        with contextlib.closing(ledger_writer(path)) as db:
            db.execute("BEGIN IMMEDIATE")
            set_grace(db, 600)
            db.execute("COMMIT")
        h = sched.submit(lambda: None, resources={"GPU": 0.5}, name="after")
        assert wait_for(lambda: "back so far" in (h.reason or ""), 20), h.reason
        said = h.reason
        assert "the host's lease ledger was made again" in said, said
        assert (f"(back so far: 0.5 of GPU 0 is held by another kernel (pid {child.pid}, "
                "notebook other.ipynb") in said, said
        assert h.state == "queued"
        h.cancel()
    finally:
        child.kill()
        child.wait()


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_this_notebooks_kept_engine_is_shown_as_the_users_own_not_as_others(sched, path,
                                                                             monkeypatch):
    """After a restart, before ``%sched connect``, a lease an engine of this notebook's kept
    cluster holds (this user's process, labelled as this notebook's engines) is the user's own
    work: shown so, and not counted among what others hold; another kernel's is."""
    import socket

    from jupyter_sched.host.ledger.holders import Owner
    from jupyter_sched.views import display

    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/kept.ipynb")
    engine, child = other_holder()
    other, second = other_holder()
    try:
        engine = Owner(engine.uid, engine.user, engine.pid, engine.started, engine.host,
                       engine.pidns, f"engine for notebook kept.ipynb on {socket.gethostname()}")
        with Ledger(path, owner=engine) as ledger:
            assert ledger.take(gpu_key(sched), 5000, task="t2")
        with Ledger(path, owner=other) as ledger:
            assert ledger.take(gpu_key(sched), 2500, task="t9")

        def holders():
            devices = sched.snapshot(fresh=True).nodes[0].devices
            return [(h.pid, h.yours) for d in devices for h in d.others]

        assert wait_for(lambda: sorted(holders()) == sorted([(child.pid, True),
                                                              (second.pid, False)])), holders()
        snap = sched.snapshot(fresh=True)
        summary = display.summary_text(snap)
        assert "this notebook's kept engines hold 0.5 (%sched connect takes their work back)" \
            in summary, summary
        assert f"others hold 0.25: {other.user} (notebook other.ipynb, pid {second.pid}) 0.25" \
            in summary, summary
        said = display.nodes_text(snap)
        assert "this notebook's kept engine (" in said and f"pid {child.pid}" in said, said
        (node,) = display.to_json(snap.nodes)
        flags = {h["pid"]: h.get("yours") for d in node["devices"] for h in d["others"]}
        assert flags == {child.pid: True, second.pid: None}
    finally:
        for proc in (child, second):
            proc.kill()
            proc.wait()
