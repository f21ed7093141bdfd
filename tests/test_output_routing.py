"""A task's output goes to the cell that submitted it, never another one.

The first tests check the pieces in-process with a recording publisher; the last ones start a
real kernel (jupyter_client), submit a task from one cell, let it print and display while a
second cell runs, and check every IOPub message's parent. ``JUPYTER_SCHED_TEST_KERNEL_PYTHON``
(a path, or several separated by ``os.pathsep``) runs the kernel tests under other
interpreters too, e.g. a virtual environment with another ipykernel.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from jupyter_sched.executors.local import output as routing
from jupyter_sched.executors.local.output import RoutedStream, TaskOutput

ROOT = Path(__file__).resolve().parent.parent
WAIT = 10


class Recorder:
    """A Publisher that keeps what it would send."""

    def __init__(self):
        self.sent = []
        self.lock = threading.Lock()

    def stream(self, parent, name, text):
        with self.lock:
            self.sent.append(("stream", parent["msg_id"], name, text))

    def display(self, parent, data, metadata=None, transient=None, update=False):
        with self.lock:
            self.sent.append(("display", parent["msg_id"], data, update))

    def clear_output(self, parent, wait=False):
        with self.lock:
            self.sent.append(("clear", parent["msg_id"], wait))


# -- in-process -------------------------------------------------------------------------------


def test_routed_stream_sends_task_writes_to_the_task_and_passes_others():
    class Inner:
        def __init__(self):
            self.parts = []
            self.encoding = "utf-8"

        def write(self, text):
            self.parts.append(text)
            return len(text)

        def flush(self):
            pass

    inner, rec = Inner(), Recorder()
    stream = RoutedStream(inner, "stdout")
    out = TaskOutput({"msg_id": "cell-1"}, rec)
    ident = threading.get_ident()

    stream.write("main before\n")
    routing.route(ident, out)
    try:
        stream.write("from the task\n")
        stream.write("partial")
        stream.flush()
    finally:
        routing.unroute(ident)
    stream.write("main after\n")
    assert inner.parts == ["main before\n", "main after\n"]
    assert out.text("stdout") == "from the task\npartial"
    assert "".join(s[3] for s in rec.sent) == "from the task\npartial"
    assert {s[1] for s in rec.sent} == {"cell-1"}
    assert stream.encoding == "utf-8"  # everything else is the inner stream's


def test_task_output_batches_floods_and_flushes_when_due():
    rec, pending = Recorder(), []
    out = TaskOutput({"msg_id": "c"}, rec, on_pending=pending.append, interval=60)
    out.write("stdout", "one\n")  # nothing sent for a minute: goes out at once
    for i in range(100):
        out.write("stdout", f"line {i}\n")
    assert len(rec.sent) == 1 and pending == [out]
    out.flush()  # what the runtime does when it is due
    assert len(rec.sent) == 2
    assert out.text() == "one\n" + "".join(f"line {i}\n" for i in range(100))
    out.display({"text/plain": "x"})
    assert rec.sent[-1][0] == "display" and out.displays[0]["data"] == {"text/plain": "x"}


def test_display_from_a_task_thread_goes_to_its_output(monkeypatch):
    published = []

    class Pub:
        def publish(self, data, metadata=None, *, transient=None, update=False):
            published.append(data)

        def clear_output(self, wait=False):
            published.append("clear")

    pub = Pub()
    monkeypatch.setattr(routing, "ipython_shell", lambda: types_shell(pub))
    routing._wrap_display_pub(pub)
    rec = Recorder()
    out = TaskOutput({"msg_id": "cell-7"}, rec)
    done = threading.Event()

    def task_thread():
        routing.route(threading.get_ident(), out)
        try:
            pub.publish({"text/plain": "task"})
            pub.clear_output()
        finally:
            routing.unroute(threading.get_ident())
        done.set()

    threading.Thread(target=task_thread).start()
    assert done.wait(WAIT)
    pub.publish({"text/plain": "main"})
    assert published == [{"text/plain": "main"}]
    assert [s[:2] for s in rec.sent] == [("display", "cell-7"), ("clear", "cell-7")]


def types_shell(pub):
    import types

    return types.SimpleNamespace(display_pub=pub)


# -- a real kernel ----------------------------------------------------------------------------

SUBMIT = """
import sys, threading, time
import jupyter_sched as js
from IPython.display import display, HTML
go = threading.Event()

def speak():
    while not go.wait(0.01):
        pass
    print("hello from t")
    print("trouble from t", file=sys.stderr)
    display(HTML("<b>display from t</b>"))
    sys.stdout.flush()
    return 1

h = js.submit(speak, resources="GPU=0.5")
"""

BUSY = """
go.set()
time.sleep(1.0)
print("cell two")
"""

RESULT = "print('result', h.result(10), h.stdout.upper().strip())"


def _pythons() -> list[str]:
    extra = os.environ.get("JUPYTER_SCHED_TEST_KERNEL_PYTHON", "")
    return [sys.executable, *[p for p in extra.split(os.pathsep) if p]]


@pytest.fixture(scope="module", params=_pythons(),
                ids=lambda p: "kernel" if p == sys.executable else p)
def kernel(request, tmp_path_factory):
    pytest.importorskip("jupyter_client")
    from jupyter_client.kernelspec import KernelSpec
    from kernel_client import kernel_manager

    km, sockets = kernel_manager()
    km._kernel_spec = KernelSpec(
        argv=[request.param, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        display_name="test", language="python")
    env = dict(os.environ, JUPYTER_SCHED_DECLARE="GPU=2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    km.start_kernel(env=env, cwd=str(tmp_path_factory.mktemp("kernel")))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _run_cells(kc, cells: list[str]) -> tuple[list[str], list[dict]]:
    """Execute ``cells`` one after the other (each waits for the previous one's reply), and
    collect every IOPub message until the last cell is idle."""
    ids, messages = [], []
    for code in cells:
        ids.append(kc.execute(code))
        reply = kc.get_shell_msg(timeout=WAIT * 3)
        assert reply["content"]["status"] == "ok", reply["content"]
    deadline = time.monotonic() + WAIT * 3
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Exception:
            continue
        messages.append(msg)
        if (msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
                and msg["parent_header"].get("msg_id") == ids[-1]):
            break
    return ids, messages


def _parents(messages: list[dict], kind: str, needle: str) -> list[str]:
    found = []
    for msg in messages:
        if msg["msg_type"] == "stream" and kind in ("stdout", "stderr"):
            if msg["content"]["name"] == kind and needle in msg["content"]["text"]:
                found.append(msg["parent_header"]["msg_id"])
        elif (msg["msg_type"] == "display_data" and kind == "display"
              and needle in msg["content"]["data"].get("text/html", "")):
            found.append(msg["parent_header"]["msg_id"])
    return found


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_task_output_goes_to_the_submitting_cell_in_a_real_kernel(kernel):
    (first, second, third), messages = _run_cells(kernel, [SUBMIT, BUSY, RESULT])
    assert _parents(messages, "stdout", "hello from t") == [first]
    assert _parents(messages, "stderr", "trouble from t") == [first]
    assert _parents(messages, "display", "display from t") == [first]
    assert _parents(messages, "stdout", "cell two") == [second]
    assert _parents(messages, "stdout", "result 1 HELLO FROM T") == [third]
    # and the task's output did come while the second cell was running
    busy = [i for i, m in enumerate(messages) if m["parent_header"].get("msg_id") == second
            and m["msg_type"] == "status"]
    hello = next(i for i, m in enumerate(messages) if m["msg_type"] == "stream"
                 and "hello from t" in m["content"]["text"])
    assert busy[0] < hello < busy[-1]


CELL_TASK = """
base = 40
h2 = js.submit(code="answer = base + 2\\nprint('computing')\\nanswer * 1", resources="GPU=1")
"""

CELL_CHECK = "print('got', h2.result(10), answer)"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_cell_task_runs_in_the_notebook_namespace(kernel):
    cells = ["import jupyter_sched as js\n" + CELL_TASK, CELL_CHECK]
    (first, second), messages = _run_cells(kernel, cells)
    assert _parents(messages, "stdout", "computing") == [first]
    assert _parents(messages, "stdout", "got 42 42") == [second]
