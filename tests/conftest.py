"""What every test module shares: the builders of a core and of a scheduler, and the checks
every test gets.

* ``core``: a core checked after every step (tests/conftest_core.py has the event builders).
* :func:`scheduler`, and the ``sched`` fixture built with it: a started scheduler whose core is
  checked after every step, shut down after the test, with no invariant broken.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings

import pytest
from hypothesis import settings

# In CI the property tests draw the same examples every run (derandomized): a run is judged on
# the code, not on the luck of the draw. Elsewhere they draw fresh examples each time, which is
# how new counterexamples are found.
# The schedulers and kernels of a test run share a lease ledger of their own, not the user's
# (whose kernels would otherwise wait for the tests' GPUs, and the tests for theirs).
os.environ.setdefault("JUPYTER_SCHED_LEASES",
                      os.path.join(tempfile.mkdtemp(prefix="jupyter-sched-test-"), "leases.db"))

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


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
              **settings: object):
    """A started scheduler with ``local_resources`` and any other ``settings`` (an update
    every 0.02 s unless given), whose core is checked after every step; shut down after, with
    no invariant broken on the way. ``kernel_wide``: the one ``jupyter_sched.get_scheduler()``
    gives (checked from its first step after the start), forgotten after."""
    from jupyter_sched.runtime import instance
    from jupyter_sched.runtime.scheduler import Scheduler

    settings = {"local_resources": local_resources, "update_interval": 0.02, **settings}
    if kernel_wide:
        s = instance.get_scheduler(**settings)
        s.debug.validate = True
    else:
        s = Scheduler(**settings)
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
    arguments of :func:`scheduler`)."""
    mark = request.node.get_closest_marker("scheduler")
    args, kwargs = (mark.args, mark.kwargs) if mark else ((), {})
    kwargs = {"ledger_path": str(ledger_path), **kwargs}
    with scheduler(*args, **kwargs) as s:
        yield s


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
    import time

    left = sched.cancel_all("left by the previous test")
    sched.wait(timeout=SETTLE)
    deadline = time.monotonic() + SETTLE  # engines reply after their tasks ended
    while time.monotonic() < deadline:
        nodes = sched.snapshot(fresh=True).nodes
        if all(node.free_slots == node.slots for node in nodes):
            break
        time.sleep(0.05)
    if left:
        logging.getLogger("jupyter_sched.tests").warning(
            "%d tasks left by %s were cancelled", left, sched)
