"""What every test module shares: the builders of a core and of a scheduler, how the tests run
side by side (pytest-xdist), and the checks every test gets.

* ``core``: a core checked after every step (tests/conftest_core.py has the event builders).
* :func:`scheduler`, and the ``sched`` fixture built with it: a started scheduler whose core is
  checked after every step, shut down after the test, with no invariant broken. A test that
  asks for ``clock`` too gets it on the test's clock (a
  :class:`~jupyter_sched.testing.TestClock`): its time moves only when the test moves it
  (``waiting.advance``), so a test asserts that something did *not* happen by moving past
  the moment it would have, never by sleeping.
* Tests run in worker processes side by side (``-n auto`` in pyproject.toml). The tests of a
  module that share a fixture (a cluster, a kernel, a server started once) stay on one worker,
  in their order; modules that share something of the machine name it with
  ``pytest.mark.shares(name)`` and run one after another (:data:`SHARED`); any other test runs
  wherever a worker is free.
* A test that starts a real process (a kernel, a cluster, a Python child) is marked
  ``integration`` and has a timeout of its own: the run checks it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing.process
import os
import shutil
import sys
import tempfile
import warnings

import pytest
from hypothesis import settings

# The schedulers and kernels of a test run share a lease ledger of their own, not the user's
# (whose kernels would otherwise wait for the tests' GPUs, and the tests for theirs); each
# worker process of a run has its own.
os.environ.setdefault("JUPYTER_SCHED_LEASES",
                      os.path.join(tempfile.mkdtemp(prefix="jupyter-sched-test-"), "leases.db"))

# In CI the property tests draw the same examples every run (derandomized): a run is judged on
# the code, not on the luck of the draw. Elsewhere they draw fresh examples each time, which is
# how new counterexamples are found.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _a_ledger_of_its_own(monkeypatch, tmp_path_factory):
    """The schedulers and kernels a test starts share a lease ledger of the test's own (unless
    it names one): a scheduler an earlier test of the same worker left holding a share (its
    task still in a call Python cannot interrupt) takes no GPU from this test's."""
    monkeypatch.setenv("JUPYTER_SCHED_LEASES",
                       str(tmp_path_factory.mktemp("leases", numbered=True) / "leases.db"))


# -- a core and a scheduler ---------------------------------------------------------------------


@pytest.fixture
def core():
    """A core checked after every ``handle`` (also one that refuses an event), and at the
    end."""
    from conftest_core import validating

    from jupyter_sched.core.state import Core

    checked = validating(Core())
    yield checked
    checked.validate()


@contextlib.contextmanager
def scheduler(local_resources: str = "GPU=2,CPU=4", *, kernel_wide: bool = False,
              clock: object = None, **settings: object):
    """A started scheduler with ``local_resources`` and any other ``settings`` (an update
    every 0.02 s unless given), whose core is checked after every step; shut down after, with
    no invariant broken on the way. ``kernel_wide``: the one ``jupyter_sched.get_scheduler()``
    gives (checked from its first step after the start), forgotten after. ``clock``: a
    :class:`~jupyter_sched.testing.TestClock` for its time (not with ``kernel_wide``)."""
    from jupyter_sched.runtime import instance
    from jupyter_sched.runtime.scheduler import Scheduler

    settings = {"local_resources": local_resources, "update_interval": 0.02, **settings}
    if kernel_wide:
        s = instance.get_scheduler(**settings)
        s.debug.validate = True
    else:
        s = Scheduler(clock=clock, **settings)
        s.debug.validate = True
        s.start()
    try:
        yield s
    finally:
        s.shutdown()
        if kernel_wide:
            instance._scheduler = None
    assert s.debug.errors == []


@pytest.fixture
def ledger_path(tmp_path_factory):
    """The lease ledger of the test's scheduler (``sched``), in a folder of its own (not in
    ``tmp_path``, which is the test's alone)."""
    return tmp_path_factory.mktemp("ledger") / "leases.db"


@pytest.fixture
def sched(request, ledger_path):
    """:func:`scheduler`'s scheduler, with a lease ledger of the test's own (``ledger_path``)
    and the settings of the test's or module's ``pytest.mark.scheduler(...)`` mark (the
    arguments of :func:`scheduler`); on the test's ``clock`` when the test asks for that
    fixture too (move it with ``waiting.advance``)."""
    args, kwargs = _marked(request, ledger_path)
    if "clock" in request.fixturenames:
        kwargs["clock"] = request.getfixturevalue("clock")
    with scheduler(*args, **kwargs) as s:
        yield s


@pytest.fixture
def clock():
    """A clock that moves only when the test moves it."""
    from jupyter_sched.testing import TestClock

    return TestClock()



def _marked(request, ledger_path) -> tuple[tuple, dict]:
    """The arguments of :func:`scheduler` that the test's or module's
    ``pytest.mark.scheduler(...)`` gives, with the test's ledger."""
    mark = request.node.get_closest_marker("scheduler")
    args, kwargs = (mark.args, mark.kwargs) if mark else ((), {})
    return args, {"ledger_path": str(ledger_path), **kwargs}


@pytest.fixture
def xdg(tmp_path, monkeypatch) -> str:
    """A private runtime directory (``XDG_RUNTIME_DIR``): the test's kept-cluster files, and
    its kernels'."""
    directory = tmp_path / "xdg"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(directory))
    return str(directory)


@pytest.fixture
def quiet(caplog):
    """Fail the test if anything warns or logs above DEBUG (no NVML must be a quiet state)."""
    caplog.set_level(logging.DEBUG, logger="jupyter_sched")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield caplog
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert [r.getMessage() for r in records if r.levelno > logging.DEBUG] == []


# -- side by side -------------------------------------------------------------------------------
#
# pytest-xdist runs the tests in worker processes (``-n auto --dist loadgroup`` in
# pyproject.toml). Its own grouping reads a group from each test's node id, which pytest 9.2 no
# longer lets a plugin change (pytest-dev/pytest-xdist#1386: the groups are silently dropped);
# here each worker writes the groups it collected to a file, and the controller's scheduler
# (:func:`pytest_xdist_make_scheduler`) sends each group to one worker as one unit of work.

# What some modules share that there is one of per machine: they carry
# ``pytest.mark.shares(name)`` and run one after another, on one worker. Everything else a test
# makes is its own (temporary folders, free ports, random names, pid-tagged namespaces), so
# other modules run beside them.
SHARED = {
    "hosts": "namespace hosts (tests/hosts.py) with a Slurm cluster or sshd on them, whose "
             "heartbeats and timeouts (seconds) a second such cluster would starve",
}

# Modules that take minutes go first, so that no worker starts one when the rest are nearly
# done; then the rest of the modules whose tests start processes, then the others.
FIRST = ("test_build", "test_lab_ui", "test_notebooks", "test_labextension", "test_fair_share",
         "test_provisioner", "test_ledger_damage", "test_flat_cost", "test_ledger_on_hosts")

_GROUPS = "JUPYTER_SCHED_TEST_GROUPS"  # the folder the workers write their groups to
_GROUP = pytest.StashKey[str]()


def pytest_configure(config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        folder = tempfile.mkdtemp(prefix="jupyter-sched-groups-")  # (workers inherit it)
        os.environ[_GROUPS] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.hookimpl(optionalhook=True)  # (pytest-xdist's hooks)
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: a worker per CPU, at least two and at most eight (two per CPU kept both
    cores so busy that kernels' status lines and timers fell behind their tests' bounds)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, min(8, cpus or 1))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With ``--dist loadgroup``: a unit of work is a group of tests (:func:`_group`), or one
    test; units go to workers in the collection's order as they become free."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        """Also after a worker crashed: its test is not run again (it was reported failed),
        and every worker is given more or told to finish whenever a test completes (a worker
        keeps its last test until either comes, and one that joined to replace the crashed
        one otherwise waited forever: pytest-xdist's own scheduler asks only the worker whose
        test completed)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = _read_groups()
            return self.groups.get(nodeid, nodeid)

        def remove_node(self, node):
            workload = self.assigned_work.get(node, {})
            crashed = next((nodeid for unit in workload.values()
                            for nodeid, done in unit.items() if not done), None)
            if crashed is None:
                return super().remove_node(node)
            workload[self._split_scope(crashed)][crashed] = True  # (reported as failed)
            if self._pending_of(workload):
                super().remove_node(node)  # (the rest of its work goes back in the queue)
            else:
                self.assigned_work.pop(node)
                for other in self.nodes:
                    self._reschedule(other)
            return crashed

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)

        def schedule(self) -> None:
            late = self.collection is not None
            super().schedule()
            if late:  # (a worker that replaced a crashed one: two units, as the first had)
                for node in self.nodes:
                    self._reschedule(node)

    return Groups(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Each test's group (:func:`_group`); then the order: :data:`FIRST`, the modules whose
    tests start processes, the rest (a module stays whole, in its order)."""
    for item in items:
        group = _group(item)
        if group is not None:
            item.stash[_GROUP] = group
    first = {name: k for k, name in enumerate(FIRST)}
    starts = {item.module.__name__ for item in items if item.get_closest_marker("integration")}
    items.sort(key=lambda item: (first.get(item.module.__name__, len(FIRST)),
                                 item.module.__name__ not in starts))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session) -> None:
    """A worker writes the groups of what it collected, by node id, for the controller, before
    it says its collection is done (pytest-xdist's own hook says so: this one runs first)."""
    folder = os.environ.get(_GROUPS)
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if folder and worker:
        groups = {item.nodeid: item.stash[_GROUP] for item in session.items
                  if _GROUP in item.stash}
        partial = os.path.join(folder, f".{worker}.json")
        with open(partial, "w") as f:
            json.dump(groups, f)
        os.replace(partial, os.path.join(folder, f"{worker}.json"))


def _read_groups(timeout: float = 60.0) -> dict[str, str]:
    """The groups a worker wrote (every worker collected the same tests): written before the
    worker says its collection is done, waited for a while should the file system lag."""
    import time

    folder = os.environ.get(_GROUPS, "")
    deadline = time.monotonic() + timeout
    while True:
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.endswith(".json") and not name.startswith("."):
                with open(os.path.join(folder, name)) as f:
                    return json.load(f)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no worker wrote the groups of its tests to {folder!r}")
        time.sleep(0.05)


def _group(item) -> str | None:
    """What ``item`` runs with, on one worker: the shared thing its module names; else its
    module's tests, when it uses a fixture they share (a cluster, a kernel, a server started
    once); else nothing: it runs wherever a worker is free."""
    mark = item.get_closest_marker("shares")
    if mark is not None:
        if not mark.args or mark.args[0] not in SHARED:
            raise pytest.UsageError(f"{item.nodeid}: pytest.mark.shares{mark.args} names none "
                                    f"of tests/conftest.py's SHARED ({', '.join(SHARED)})")
        return f"shares {mark.args[0]}"
    info = getattr(item, "_fixtureinfo", None)
    if info is not None and any(d.scope in ("class", "module", "package")
                                for defs in info.name2fixturedefs.values() for d in defs):
        return item.module.__name__
    return None


# -- tests that start processes ----------------------------------------------------------------

_started: list[str] = []  # what started a process, in this worker, ever
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn",
                             "os.fork", "os.forkpty", "os.exec"})


def _audit(event: str, args: tuple) -> None:
    if event in _PROCESS_EVENTS:
        _started.append(event)


sys.addaudithook(_audit)
_start_process = multiprocessing.process.BaseProcess.start


def _start_and_say(self) -> None:  # (multiprocessing's spawn raises no audit event)
    _started.append("multiprocessing")
    _start_process(self)


multiprocessing.process.BaseProcess.start = _start_and_say


_STARTED_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_STARTED_BEFORE] = len(_started)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test and its fixtures: whether it started a process, and may."""
    result = yield
    started = _started[item.stash.get(_STARTED_BEFORE, len(_started)):]
    if started and not (item.get_closest_marker("integration")
                        and item.get_closest_marker("timeout")):
        pytest.fail(f"{item.nodeid} starts processes ({', '.join(sorted(set(started)))}) but "
                    f"is not marked integration with a timeout of its own: mark it "
                    f"(pytest.mark.integration, pytest.mark.timeout(seconds))", pytrace=False)
    return result


# -- tests that share a scheduler or a kernel ---------------------------------------------------

SETTLE = 60  # seconds the work a test left may take to end once cancelled


@pytest.fixture(autouse=True)
def _the_next_test_starts_idle(request):
    """Modules share a cluster or a kernel between their tests (starting one costs seconds):
    whatever a test leaves running or queued there, by failing half-way or by a product bug,
    is cancelled and waited for after it, so the next test finds idle engines and judges only
    its own work."""
    yield
    from jupyter_sched.runtime.scheduler import Scheduler

    for value in list(request.node.funcargs.values()):
        sched = value[0] if isinstance(value, tuple) and value else value
        if isinstance(sched, Scheduler) and sched.alive:
            _settle(sched)
        elif type(value).__name__ == "Kernel" and hasattr(value, "run"):
            with contextlib.suppress(Exception):
                value.run("import jupyter_sched as _js\n"
                          "if _js.get_scheduler().alive:\n"
                          "    _js.get_scheduler().cancel_all('left by the previous test')\n"
                          f"    _js.get_scheduler().wait(timeout={SETTLE})\n"
                          "del _js", timeout=SETTLE + 30)


def _settle(sched) -> None:
    from waiting import wait_for

    left = sched.cancel_all("left by the previous test")
    sched.wait(timeout=SETTLE)
    # engines reply after their tasks ended
    wait_for(lambda: all(node.free_slots == node.slots
                         for node in sched.snapshot(fresh=True).nodes), SETTLE,
             "every slot free after the test's work was cancelled", every=0.05)
    if left:
        logging.getLogger("jupyter_sched.tests").warning(
            "%d tasks left by %s were cancelled", left, sched)


@pytest.fixture
def neighbour(ledger_path):
    """Another live process's use of the test's ledger: a ``Ledger`` as a child of the test
    (of this user, alive while the test runs) would have it."""
    import subprocess

    import psutil

    from jupyter_sched.host.ledger import Ledger
    from jupyter_sched.host.ledger.holders import Owner

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    me = Owner.current()
    owner = Owner(me.uid, me.user, child.pid, psutil.Process(child.pid).create_time(), me.host,
                  me.pidns, "notebook other.ipynb")
    try:
        with Ledger(ledger_path, owner=owner) as ledger:
            yield ledger
    finally:
        child.kill()
        child.wait()
