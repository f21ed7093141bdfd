"""Leases and MPS on engines' hosts, without ipyparallel: the wrapper that runs on the engine
(:mod:`jupyter_sched.executors.ipp.on_host`), what the kernel sends it and makes of its replies
(:mod:`jupyter_sched.executors.ipp.leases`). The real thing, with engines on other hosts, is
tests/test_multihost_leases.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from conftest_ipp import FakeRuntime

from jupyter_sched.core import events as ev
from jupyter_sched.executors.base import ExecutorSettings
from jupyter_sched.executors.ipp import leases as kernel_side
from jupyter_sched.executors.ipp import on_host
from jupyter_sched.executors.ipp.engines import EngineInfo, HostMap
from jupyter_sched.executors.ipp.futures import Reply
from jupyter_sched.executors.ipp.on_host import REFUSED, host_call, host_holdings
from jupyter_sched.executors.ipp.state import Engine, Guard, Run
from jupyter_sched.host.discovery import discover_host
from jupyter_sched.host.ledger import Ledger, device_key
from jupyter_sched.host.ledger.holders import Owner
from jupyter_sched.host.mps import MEMORY_ENV, PIPE_ENV, THREADS_ENV, MpsStatus
from jupyter_sched.model.resources import GPU

GiB = 2**30
KEY = "declared:h1/boot:0"


@pytest.fixture
def ledger_file(tmp_path):
    return tmp_path / "leases.db"


@pytest.fixture(autouse=True)
def no_mps(monkeypatch, tmp_path):
    """No MPS unless a test says so (the machine's /tmp/nvidia-mps must not decide)."""
    monkeypatch.setenv(PIPE_ENV, str(tmp_path / "no-mps"))
    monkeypatch.setattr(on_host, "_mps", [None, -1e9])


def other_owner(label="notebook b.ipynb"):
    """A live process that is not this one (our parent), as another scheduler of the host."""
    parent = psutil.Process().parent()
    me = Owner.current()
    return Owner(me.uid, me.user, parent.pid, parent.create_time(), me.host, me.pidns, label)


def host(ledger_file, units=5_000, task="t7", mps=()):
    return {"task": task, "node": "h1", "label": "engine for a kernel on login",
            "ledger": str(ledger_file), "shares": {KEY: units} if units else {},
            "devices": {KEY: 0}, "mps": list(mps)}


def ok(value):
    return "ok", {"notes": []}, value


# -- the wrapper on the engine -------------------------------------------------------------------


def test_the_lease_is_held_while_the_task_runs_and_given_back_after(ledger_file):
    seen = []

    def task():
        seen.extend(Ledger(ledger_file).held())
        return ok(b"done")

    assert host_call(host(ledger_file), task) == ok(b"done")
    (lease,) = seen
    assert (lease.device, lease.units, lease.task) == (KEY, 5_000, "t7")
    assert lease.owner.pid == os.getpid()  # the engine process holds it: the sweep knows it
    assert lease.owner.label == "engine for a kernel on login"
    assert Ledger(ledger_file).held() == []


@pytest.mark.parametrize("error", [ValueError("bad"), KeyboardInterrupt()])
def test_the_lease_is_given_back_when_the_call_raises(ledger_file, error):
    def task():
        assert Ledger(ledger_file).held()
        raise error

    with pytest.raises(type(error)):
        host_call(host(ledger_file), task)
    assert Ledger(ledger_file).held() == []


def test_a_refused_lease_does_not_run_the_task_and_says_who_holds_it(ledger_file):
    other = Ledger(ledger_file, owner=other_owner())
    held = other.take_all({KEY: 5_000}, task="t3"), other.take_all({KEY: 5_000}, task="t4")
    ran = []
    status, head, data = host_call(host(ledger_file), lambda: ran.append(1))
    assert (status, data, ran) == (REFUSED, b"", [])
    assert (head["device"], head["taken"]) == (KEY, 10_000)
    assert head["reason"].startswith("0.5 of GPU 0 on h1 is not free (only 0 is)")
    pid = other_owner().pid
    assert f"pid {pid}" in head["reason"] and "notebook b.ipynb" in head["reason"]
    assert "task t3" in head["reason"] and "task t4" in head["reason"]
    assert sorted((d, u, p, t.split(", ")[-1]) for d, u, p, _, t in head["holdings"]) == [
        (KEY, 5_000, pid, "task t3"), (KEY, 5_000, pid, "task t4")]
    assert [lease.owner.pid for lease in Ledger(ledger_file).held()] == [pid, pid]
    for (lease,) in held:
        other.give(lease)
    assert host_call(host(ledger_file), lambda: ok(1)) == ok(1)


LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(60)
"""


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_ledger_another_process_holds_up_refuses_the_task_and_never_runs_it(ledger_file):
    Ledger(ledger_file).close()
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(ledger_file)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        on_host._ledgers.clear()  # (a fresh engine: it opens the ledger under the lock)
        ran = []
        began = time.monotonic()
        status, head, data = host_call(host(ledger_file), lambda: ran.append(1))
        assert time.monotonic() - began < 2.0  # (never stalled long)
        assert (status, data, ran) == (REFUSED, b"", [])
        assert head["reason"].startswith("the GPU ledger of h1 is held up (")
        assert [(d, u) for d, u, *_ in head["holdings"]] == [(KEY, 10_000)]
        assert host_holdings({"ledger": str(ledger_file), "node": "h1",
                              "devices": {KEY: 0}})["holdings"][0][:2] == (KEY, 10_000)
    finally:
        locker.kill()
        locker.wait()
    assert host_call(host(ledger_file), lambda: ok(1)) == ok(1)


def test_leases_left_by_an_interrupted_call_are_given_back_by_the_next(ledger_file):
    Ledger(ledger_file).take(KEY, 10_000, task="t1")  # this process: the engine's own
    assert host_call(host(ledger_file, 10_000, task="t2"), lambda: ok(2)) == ok(2)
    assert Ledger(ledger_file).held() == []


def test_a_task_without_shares_takes_nothing(ledger_file):
    assert host_call(host(ledger_file, units=0), lambda: ok(Ledger(ledger_file).held())) == \
        ok([])


def test_a_ledger_that_cannot_be_used_runs_the_task_unleased_and_says_so(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("not a database at all, " * 100)
    status, head, value = host_call(host(bad), lambda: ok("ran"))
    assert (status, value) == ("ok", "ran")
    assert "not a usable SQLite database" in head["ledger"]


def test_the_holdings_of_a_host_sweep_ended_holders_first(ledger_file):
    me = Owner.current()
    ended = Owner(me.uid, me.user, 2**22 - 7, 1.0, me.host, me.pidns)  # no such process
    Ledger(ledger_file, owner=ended).take(KEY, 10_000, task="t0")
    live = Ledger(ledger_file, owner=other_owner())
    assert host_holdings({"ledger": str(ledger_file), "devices": {KEY: 0}}) == {"holdings": []}
    live.take(KEY, 2_500, task="t5")
    live.take("GPU-other-device", 2_500)
    ((device, units, pid, host_key, who),) = host_holdings(
        {"ledger": str(ledger_file), "devices": {KEY: 0}})["holdings"]
    assert (device, units, pid, host_key) == (KEY, 2_500, other_owner().pid, me.host)
    assert who.endswith("notebook b.ipynb, task t5")


def test_the_default_ledger_is_the_one_every_kernel_of_the_host_finds(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTER_SCHED_LEASES", f"{tmp_path}/")
    monkeypatch.setattr(on_host, "_ledgers", {})
    from jupyter_sched.host.ledger import default_ledger as default_path

    assert on_host.open_ledger("").path == default_path("")  # as the kernels here resolve it
    assert on_host.open_ledger(str(tmp_path / "x.db")).path == tmp_path / "x.db"


# -- MPS on the engine -----------------------------------------------------------------------------


@pytest.fixture
def mps(monkeypatch, tmp_path):
    """A pipe directory with the daemon's control pipe and pid file (this process stands in
    for the daemon), as ``CUDA_MPS_PIPE_DIRECTORY``."""
    directory = tmp_path / "mps"
    directory.mkdir()
    os.mkfifo(directory / "control", 0o600)
    (directory / "nvidia-cuda-mps-control.pid").write_text(str(os.getpid()))
    monkeypatch.setenv(PIPE_ENV, str(directory))
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    return directory


def variables():
    return os.environ.get(THREADS_ENV), os.environ.get(MEMORY_ENV)


def said(value, enforced):
    """A reply as the wrapper hands it back: with how the share was held."""
    status, head, rest = ok(value)
    return status, {**head, "enforced": enforced}, rest


def test_a_fraction_of_a_gpu_runs_with_its_mps_variables_restored_after(mps, ledger_file):
    share = host(ledger_file, units=0, mps=[(0, 2_500, 16 * GiB)])
    assert host_call(share, lambda: ok(variables())) == said(("25", "0=4096M"), "mps")
    assert variables() == (None, None)
    os.environ[THREADS_ENV] = "80"  # the engine's own setting comes back after the call
    try:
        assert host_call(share, lambda: ok(variables())) == said(("25", "0=4096M"), "mps")
        assert variables() == ("80", None)
    finally:
        del os.environ[THREADS_ENV]
    with pytest.raises(ValueError):
        host_call(share, lambda: (_ for _ in ()).throw(ValueError("x")))
    assert variables() == (None, None)


def test_no_mps_daemon_or_a_whole_gpu_sets_nothing(mps, ledger_file):
    assert on_host.mps_variables([(0, 10_000, 16 * GiB)], MpsStatus(True, str(mps), 1)) == {}
    assert on_host.mps_variables([(1, 5_000, None)], MpsStatus(True, str(mps), 1)) == {
        THREADS_ENV: "50"}
    assert on_host.mps_variables([(1, 5_000, 8 * GiB)], MpsStatus(True, str(mps), 1)) == {
        THREADS_ENV: "50", MEMORY_ENV: "1=4096M"}
    (mps / "control").unlink()
    on_host._mps[:] = [None, -1e9]
    share = host(ledger_file, units=0, mps=[(0, 2_500, 16 * GiB)])
    assert host_call(share, lambda: ok(variables())) == said((None, None), "logical")


class FakeTorch:
    """``torch`` as far as a memory cap goes: CUDA there, each cap set noted."""

    def __init__(self):
        self.caps = []
        self.cuda = self
        self.available = True

    def is_available(self):
        return self.available

    def set_per_process_memory_fraction(self, fraction, device):
        self.caps.append((fraction, device))


def test_a_torch_cap_holds_the_share_where_torch_is_imported_and_mps_is_not(
        monkeypatch, ledger_file):
    share = {**host(ledger_file, units=0, mps=[(0, 2_500, 16 * GiB)]), "torch": [(0, 2_500)],
             "load_torch": False}
    assert host_call(share, lambda: ok(1)) == said(1, "logical")  # torch not imported here
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert host_call(share, lambda: ok(list(torch.caps))) == said([(0.25, 0)], "torch")
    assert torch.caps == [(0.25, 0), (1.0, 0)]  # the whole device again after the call
    torch.available = False  # no CUDA: nothing is capped, and the word says so
    assert host_call(share, lambda: ok(1)) == said(1, "logical")


def test_under_mps_the_torch_cap_is_not_also_set(mps, monkeypatch, ledger_file):
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    share = {**host(ledger_file, units=0, mps=[(0, 2_500, 16 * GiB)]), "torch": [(0, 2_500)]}
    assert host_call(share, lambda: ok(1)) == said(1, "mps") and torch.caps == []


def test_the_first_task_to_use_cuda_fixes_the_engines_cap_and_says_so(
        mps, monkeypatch, ledger_file):
    loaded = [False]
    monkeypatch.setattr(on_host, "cuda_loaded", lambda: loaded[0])
    monkeypatch.setattr(on_host, "_cuda_cap", [None])

    def first_cuda_use():
        loaded[0] = True  # the task initialised CUDA
        return ok(variables())

    quarter = host(ledger_file, units=0, mps=[(0, 2_500, 16 * GiB)])
    _, head, value = host_call(quarter, first_cuda_use)
    assert head["cap"] == 2_500 and head["enforced"] == "mps" and value == ("25", "0=4096M")
    _, head, _ = host_call(quarter, lambda: ok(1))  # the same cap: still its share's
    assert head["enforced"] == "mps" and "cap" not in head
    half = host(ledger_file, units=0, mps=[(0, 5_000, 16 * GiB)])
    _, head, _ = host_call(half, lambda: ok(1))  # capped at 0.25, asked 0.5: not its cap
    assert head["enforced"] == "logical" and "cap" not in head


def test_the_lease_on_the_engines_host_says_how_the_share_is_held_as_the_reply_does(
        mps, monkeypatch, ledger_file):
    def words():
        return [(lease.units, lease.held) for lease in Ledger(ledger_file).held()]

    quarter = host(ledger_file, units=2_500, mps=[(0, 2_500, 16 * GiB)])
    _, head, seen = host_call(quarter, lambda: ok(words()))
    assert (head["enforced"], seen) == ("mps", [(2_500, "mps")])
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    (mps / "control").unlink()  # no daemon: the torch cap holds it
    on_host._mps[:] = [None, -1e9]
    capped = {**quarter, "torch": [(0, 2_500)]}
    _, head, seen = host_call(capped, lambda: ok(words()))
    assert (head["enforced"], seen) == ("torch", [(2_500, "torch")])
    torch.available = False
    _, head, seen = host_call(capped, lambda: ok(words()))
    assert (head["enforced"], seen) == ("logical", [(2_500, "logical")])
    whole = host(ledger_file, units=10_000)  # nothing to cap, nothing to say
    assert host_call(whole, lambda: ok(words())) == ok([(10_000, "")])
    # Scheduler.enforce = "logical": nothing to cap, but a fraction is held logically
    assert host_call(host(ledger_file, units=2_500), lambda: ok(words())) == \
        ok([(2_500, "logical")])
    assert words() == []


def test_a_refused_lease_leaves_the_mps_variables_as_they_were(mps, ledger_file):
    other = Ledger(ledger_file, owner=other_owner())
    (theirs,) = other.take_all({KEY: 10_000}, task="t3")
    ran = []
    quarter = host(ledger_file, units=2_500, mps=[(0, 2_500, 16 * GiB)])
    status, head, _ = host_call(quarter, lambda: ran.append(variables()))
    assert (status, ran, variables()) == (REFUSED, [], (None, None))
    assert "enforced" not in head and head["reason"].startswith("0.25 of GPU 0 on h1")
    other.give(theirs)


def test_mps_is_detected_again_after_a_while(mps):
    assert on_host.mps_status(now=1000.0).running
    (mps / "control").unlink()
    assert on_host.mps_status(now=1000.0 + on_host.MPS_RECHECK / 2).running  # (cached)
    assert not on_host.mps_status(now=1000.0 + on_host.MPS_RECHECK * 2).running


# -- what the kernel sends, and makes of the replies -----------------------------------------------


def engine_on_h1(declare="GPU=2,gpu_memory=16GiB", visible="1,0"):
    """A HostMap with node h1 (two declared GPUs), and a pinned engine there."""
    h1 = discover_host(declare=declare)
    h1 = type(h1)(**{**{f: getattr(h1, f) for f in h1.__dataclass_fields__},
                     "hostname": "h1", "boot_id": "boot"})
    info = EngineInfo(h1, 4321, visible, "h1", "10.0.0.11")
    hosts = HostMap(None)
    joined = hosts.join("e0", info)
    engine = Engine(0, "e0", joined.node, info, joined.visible, info.pinned, local_host=False,
                    ours=False)
    return hosts, engine, h1


def start(units, index=1, task="t7", attempt=1):
    return ev.Start(task, "h1", "e0", {GPU: {index: units}} if units else {}, attempt=attempt)


def test_device_keys_are_those_another_scheduler_on_that_host_uses():
    hosts, engine, h1 = engine_on_h1()
    node = hosts.nodes["h1"]
    theirs = {gpu.index: device_key(gpu, h1.key) for gpu in h1.gpus}  # (runtime/leases.py)
    assert theirs == {0: "declared:h1/boot:0", 1: "declared:h1/boot:1"}
    assert kernel_side.node_keys(node) == theirs
    seeing_one, _, _ = engine_on_h1(visible="1")
    assert kernel_side.node_keys(seeing_one.nodes["h1"]) == {1: theirs[1]}  # (what engines see)
    meta = kernel_side.host_meta(start(5_000), engine, node, lease=True, ledger="/x.db",
                                 label="me")
    assert meta == {"task": "t7", "node": "h1", "label": "me", "ledger": "/x.db",
                    "shares": {"declared:h1/boot:1": 5_000},
                    "devices": {"declared:h1/boot:0": 0, "declared:h1/boot:1": 1},
                    "mps": [(0, 5_000, 16 * GiB)],  # GPU 1 is device 0 of the engine
                    "torch": [(0, 5_000)], "load_torch": False}  # (auto: MPS, else torch)


def test_what_needs_no_wrapper_gets_none():
    hosts, engine, _ = engine_on_h1()
    node = hosts.nodes["h1"]
    assert kernel_side.host_meta(start(0), engine, node, lease=True) is None  # no GPU
    assert kernel_side.host_meta(start(10_000), engine, node, lease=False) is None  # whole
    meta = kernel_side.host_meta(start(10_000), engine, node, lease=True)
    assert meta["shares"] == {"declared:h1/boot:1": 10_000} and meta["mps"] == []
    meta = kernel_side.host_meta(start(2_500), engine, node, lease=False)
    assert meta["shares"] == {} and meta["mps"] == [(0, 2_500, 16 * GiB)]
    # Scheduler.enforce: "logical" caps nothing; "mps" or "torch" only that way
    assert kernel_side.host_meta(start(2_500), engine, node, lease=False,
                                 enforce="logical") is None
    meta = kernel_side.host_meta(start(2_500), engine, node, lease=False, enforce="mps")
    assert meta["mps"] == [(0, 2_500, 16 * GiB)] and "torch" not in meta
    meta = kernel_side.host_meta(start(2_500), engine, node, lease=False, enforce="torch")
    assert meta["mps"] == [] and meta["torch"] == [(0, 2_500)] and meta["load_torch"]


def test_holdings_become_held_elsewhere_without_this_kernels_engines():
    hosts, _, h1 = engine_on_h1()
    node = hosts.nodes["h1"]
    holdings = [("declared:h1/boot:1", 5_000, 99, h1.key, "pid 99, user bob, task t3"),
                ("declared:h1/boot:1", 2_500, 4321, h1.key, "pid 4321, task t1"),  # ours
                ("declared:h1/boot:0", 2_500, 4321, "other/boot", "pid 4321"),  # not ours
                ("GPU-unknown", 5_000, 98, h1.key, "")]
    event = kernel_side.held_event(node, holdings, ours={4321})
    assert event.node == "h1" and event.device_shares == {GPU: {0: 2_500, 1: 5_000}}
    assert event.reason == ("0.25 of GPU 0 on h1 is held by another process (pid 4321); 0.5 of "
                            "GPU 1 on h1 is held by another process (pid 99, user bob, task t3)")
    assert kernel_side.held_event(node, [], ours=set()).device_shares == {GPU: {}}


class Engines:
    """The registry as the lease part sees it (:class:`.leases.Hosts`): node h1's engines."""

    def __init__(self, hosts, engine):
        self.hosts, self.engine = hosts, engine

    def node(self, name):
        return self.hosts.nodes.get(name)

    def on_node(self, name):
        return [self.engine] if self.engine.node == name else []


class Requests:
    """The connection as the lease part uses it: requests recorded, answered by no one."""

    def __init__(self):
        self.sent = []

    def apply(self, eid, fn, args, hook, output=None, sent=None):
        reply = Reply(f"m{len(self.sent)}")
        hook(reply)
        self.sent.append((eid, fn, args))
        return reply


def host_leases(hosts, engine, runtime, busy=(), requests=None):
    """The lease part over one engine on h1 (``busy``: the engine ids running a task)."""
    return kernel_side.EngineLeases(Guard(runtime), requests or Requests(),
                                  Engines(hosts, engine), lambda eid: eid not in busy,
                                  lambda: ExecutorSettings(),
                                  lambda: runtime.gpu_work_waits)


def test_a_refusal_reports_what_is_held_first_then_an_unstarted_attempt():
    hosts, engine, h1 = engine_on_h1()
    runtime = FakeRuntime()
    leases = host_leases(hosts, engine, runtime)
    guard = leases._guard
    run = Run("t7", engine, None, start(5_000, attempt=3))
    head = {"reason": "0.5 of GPU 1 on h1 is not free (only 0 is): ...",
            "holdings": [("declared:h1/boot:1", 10_000, 99, h1.key, "pid 99")],
            "device": "declared:h1/boot:1", "taken": 10_000}

    def refused(status, head):
        with guard as out:
            return leases.refused(run, status, head, out)

    def changed(holdings):
        with guard:
            return leases.changed("h1", holdings)

    try:
        assert refused(REFUSED, head)
        held, failed = runtime.events
        assert held == ev.HeldElsewhere("h1", {GPU: {1: 10_000}},
                                        "1 of GPU 1 on h1 is held by another process (pid 99)")
        assert failed == ev.Failed("t7", head["reason"], attempt=3, unstarted=True)
        assert leases.told == {"h1": {1: 10_000}} and leases.timer is not None
        # a read that finds the same says nothing; one that finds it freed says so, once
        assert changed(head["holdings"]) is None
        assert changed([]) == ev.HeldElsewhere("h1", {GPU: {}}, "")
        assert changed([]) is None and leases.told == {}
        # a reply that ran is not this part's business
        assert not refused("ok", {"notes": []})
        # a refusal by this kernel's own engine (its task just ended) counts until next read
        runtime.events.clear()
        mine = [("declared:h1/boot:1", 7_500, 4321, h1.key, "pid 4321")]
        refused(REFUSED, {**head, "holdings": mine, "taken": 7_500})
        assert runtime.events[0] == ev.HeldElsewhere("h1", {GPU: {1: 7_500}}, head["reason"])
        assert changed(mine) == ev.HeldElsewhere("h1", {GPU: {}}, "")
        run.stopping = "cancelled"  # a refusal of a task being stopped: it stopped
        runtime.events.clear()
        refused(REFUSED, head)
        assert runtime.events[-1] == ev.Stopped("t7", attempt=3)
    finally:
        with guard:
            leases.close()


def test_reads_go_to_an_idle_engine_only_while_gpu_work_waits():
    hosts, engine, _ = engine_on_h1()
    runtime = FakeRuntime()
    requests, busy = Requests(), {engine.eid}
    leases = host_leases(hosts, engine, runtime, busy=busy, requests=requests)
    leases.told["h1"] = {1: 5_000}
    try:
        runtime.gpu_work_waits = False
        leases.read()
        assert requests.sent == []
        runtime.gpu_work_waits = True
        leases.read()  # busy: a read would wait behind its task
        assert requests.sent == []
        busy.clear()
        leases.read()
        ((eid, fn, (meta,)),) = requests.sent
        assert eid == engine.eid and fn is kernel_side.HOLDINGS
        assert meta["devices"] == {"declared:h1/boot:0": 0, "declared:h1/boot:1": 1}
        leases.read()
        assert len(requests.sent) == 1  # one read at a time per node
    finally:
        with leases._guard:
            leases.close()


# -- a real GPU under a real MPS daemon ---------------------------------------------------------


def allocate(fraction_of_limit: float) -> tuple:
    """On the engine: the MPS variables, and whether CUDA lets this process allocate that
    fraction of its pinned memory limit (through the driver API, no framework needed)."""
    import ctypes

    threads, limit = os.environ.get(THREADS_ENV), os.environ.get(MEMORY_ENV)
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    assert cuda.cuCtxSetCurrent(context) == 0
    mib = int(limit.split("=")[1].removesuffix("M"))
    size = ctypes.c_size_t(int(mib * 2**20 * fraction_of_limit))
    status = cuda.cuMemAlloc_v2(ctypes.byref(pointer), size)
    if status == 0:
        cuda.cuMemFree_v2(pointer)
    return threads, limit, status


@pytest.mark.gpu
@pytest.mark.integration
@pytest.mark.timeout(180)
def test_an_engine_task_on_a_fraction_of_a_real_gpu_is_capped_by_mps():
    from jupyter_sched.host.mps import detect_mps
    from jupyter_sched.host.nvml import load_nvml
    from jupyter_sched.runtime.scheduler import Scheduler

    nvml = load_nvml()
    if nvml is None or nvml.device_count() == 0:
        pytest.skip("no NVIDIA GPU with a working NVML here")
    if not detect_mps().running:
        pytest.skip("no MPS control daemon serves this user")
    from conftest_ipp import engines_can_import_this_checkout

    sched = Scheduler()
    try:
        with engines_can_import_this_checkout():
            sched.start_cluster(engines=2)
        # a fresh engine each: the first task that uses CUDA in an engine sets its cap
        within = sched.submit(allocate, 0.5, resources={"GPU": 0.25}, target="engines")
        beyond = sched.submit(allocate, 1.5, resources={"GPU": 0.25}, target="engines")
        threads, limit, status = within.result(timeout=120)
        assert (threads, status) == ("25", 0) and limit.startswith("0=")
        threads, _, status = beyond.result(timeout=120)
        assert threads == "25" and status != 0  # CUDA_ERROR_OUT_OF_MEMORY: the cap holds
    finally:
        sched.shutdown()
