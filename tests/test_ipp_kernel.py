"""Cells on engines from a real kernel, as a user writes them: notebook functions and the
globals they read, notebook classes (``super()``, inheritance, closures, decorators), ``open``,
GPUs declared with ``%sched local``, a second ``%sched start``, and ``%sched stop`` leaving no
process behind.

One kernel and one cluster serve the module; tests run in file order.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest
from conftest_ipp import ROOT, TESTS, assert_gone, describe, process_tree

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipyparallel")

from kernel_client import Kernel  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def kernel():
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, str(TESTS), old]))
    try:
        k = Kernel()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    try:
        run = k.run("%load_ext jupyter_sched\n%sched local --gpus 2")
        assert run.error is None and not run.stderr.strip(), (run.error, run.stderr)
        k.run("import jupyter_sched\nsched = jupyter_sched.get_scheduler()")
        yield k
    finally:
        k.close()


def ok(run) -> None:
    assert run.error is None, (run.error or {}).get("traceback", run.error)
    assert "rejected" not in run.stderr, run.stderr


def test_engines_per_gpu_counts_gpus_declared_with_sched_local(kernel):
    run = kernel.run("%sched start --engines-per-gpu 1", timeout=180)
    ok(run)
    assert not run.stderr.strip(), run.stderr
    assert "2/2" in run.texts()[0]  # two engine slots, one per declared GPU
    pinned = kernel.value("sorted(e.visible for e in sched._loop.executors[-1].engines.values())")
    assert pinned == [(0,), (1,)]


def test_a_cell_calling_a_notebook_function_brings_the_globals_it_reads(kernel):
    ok(kernel.run("factor = 3\ndef scale(v):\n    return v * factor\n"
                  "def twice(v):\n    return scale(v) * 2\nx = 5"))
    run = kernel.run("%%sched --on engines --wait\nscale(x)")
    ok(run)
    assert "15" in run.texts()
    run = kernel.run("%%sched --on engines --wait\nfactor = 10\ntwice(x)")  # set by the cell
    ok(run)
    assert "100" in run.texts()
    assert kernel.value("factor") == 10
    ok(kernel.run("factor = 3"))
    assert kernel.value("sched.submit(twice, 5, target='engines').result(60)") == 30


def test_the_user_guides_push_and_pull_with_a_notebook_function(kernel):
    ok(kernel.run("def score(x):\n    return 2 * x\ndata = [1, 2, 3]"))
    run = kernel.run("%%sched --on engines --push data --pull scores --out h\n"
                     "scores = [score(x) for x in data]")
    ok(run)
    assert kernel.value("h.result(60) is None and h.state") == "done"
    assert kernel.value("scores") == [2, 4, 6]


CLASSES = '''
import functools

class Base:
    def __init__(self, w):
        self.w = w

    def total(self):
        return self.w + OFFSET

class Net(Base):
    def __init__(self):
        super().__init__(WIDTH)
        self.layers = [Layer(k) for k in range(2)]

    def total(self):
        return super().total() + sum(layer() for layer in self.layers)

    @property
    def doubled(self):
        return self.w * 2

    @staticmethod
    def kind():
        return "net"

    @classmethod
    def make(cls):
        return cls()

class Layer:
    def __init__(self, k):
        self.k = k

    def __call__(self):
        return self.k * STEP

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return ("logged", fn(*args))
    return wrapper

@logged
def build(n):
    return Net.make().total() + n

def counter(start):
    def step():
        return start + STEP
    return step

WIDTH, OFFSET, STEP = 4, 100, 10
'''


def test_notebook_classes_with_super_go_to_engines(kernel):
    ok(kernel.run(CLASSES))
    run = kernel.run("%%sched --on engines --wait\nNet().w")
    ok(run)
    assert "4" in run.texts()
    run = kernel.run("%%sched --on engines --wait\n"
                     "net = Net()\n(net.total(), net.doubled, Net.kind(), isinstance(net, Base))")
    ok(run)
    assert "(114, 8, 'net', True)" in run.texts()
    # what comes back is an instance of the notebook's own class
    assert kernel.value("type(net) is Net and net.total()") == 114
    run = kernel.run("%%sched --on engines --wait\n(build(1), counter(5)())")
    ok(run)
    assert "(('logged', 115), 15)" in run.texts()
    assert kernel.value("sched.submit(build, 2, target='engines').result(60)") == ("logged", 116)
    assert kernel.value("sched.submit(Net.make, target='engines').result(60).total()") == 114
    assert kernel.value("sched.submit(lambda n: n.total(), Net(), target='engines')"
                        ".result(60)") == 114


def test_a_class_defined_on_an_engine_comes_back(kernel):
    run = kernel.run("%%sched --on engines --wait\n"
                     "class Remote(Base):\n    def __init__(self):\n        super().__init__(7)\n"
                     "r = Remote()")
    ok(run)
    assert kernel.value("(r.total(), isinstance(r, Remote), isinstance(r, Base))") == (
        107, True, True)


def test_a_notebook_exception_comes_back_as_itself(kernel):
    ok(kernel.run("class Oops(Exception):\n    pass"))
    run = kernel.run("%%sched --on engines --wait --out failed\nraise Oops('no luck')")
    assert run.error is not None and run.error["ename"] == "Oops", run.error
    assert kernel.value("isinstance(failed.exception(0), Oops)") is True


def test_open_works_in_engine_cells_and_functions(kernel, tmp_path):
    path = str(tmp_path / "written")
    run = kernel.run(f"%%sched --on engines --wait\nwith open({path!r}, 'w') as f:\n"
                     f"    f.write('from a cell')\nopen({path!r}).read()")
    ok(run)
    assert "'from a cell'" in run.texts()
    ok(kernel.run(f"def read_it():\n    with open({path!r}) as f:\n        return f.read()"))
    assert kernel.value("sched.submit(read_it, target='engines').result(60)") == "from a cell"
    run = kernel.run("%%sched --on engines --wait\nimport builtins\n"
                     "(open is builtins.open, type(get_ipython()).__name__)")
    ok(run)  # the engine's own, not the kernel's
    assert "(True, 'IPythonKernel')" in run.texts() or "(True, 'ZMQInteractiveShell')" in \
        run.texts(), run.texts()


def test_a_second_start_is_refused_with_what_to_do(kernel):
    slots = kernel.value("sum(n.slots for n in sched.snapshot(fresh=True).nodes)")
    run = kernel.run("%sched start --engines 1", timeout=180)
    message = run.stderr  # IPython prints a UsageError, it raises nothing
    assert message.startswith("UsageError: ") and len(message.strip().splitlines()) == 1
    assert "already running" in message and "%sched stop" in message and "--add" in message
    assert "rejected" not in message
    assert kernel.value("sum(n.slots for n in sched.snapshot(fresh=True).nodes)") == slots
    run = kernel.run("%sched start --engines 1 --add", timeout=180)
    ok(run)
    assert f"{slots + 1}/{slots + 1}" in run.texts()[0]


def test_stop_leaves_no_process_behind(kernel):
    ok(kernel.run("import os"))
    kernel_pid = kernel.value("os.getpid()")
    started = process_tree(kernel_pid)
    assert len(started) >= 8, started  # a controller and its schedulers, engines, nannies
    run = kernel.run("%sched stop", timeout=120)
    ok(run)
    assert not run.stderr.strip(), run.stderr
    assert "which this kernel started: its engines and controller have ended" in run.stdout
    assert_gone(started, timeout=30)
    assert psutil.Process(kernel_pid).is_running()
    time.sleep(0.5)
    left = process_tree(kernel_pid)
    assert left == [], describe(left)
