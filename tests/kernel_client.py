"""A real IPython kernel driven as a frontend drives it, for the tests that need one: its
IOPub messages grouped by the execution they belong to."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip("jupyter_client")  # (a module importing this skips)

ROOT = Path(__file__).resolve().parents[1]


def kernel_manager(**kwargs) -> tuple[object, str]:
    """A KernelManager whose kernel talks over Unix sockets in a directory of its own (and
    that directory): TCP ports are picked free, then bound by the kernel, and another process
    can take one in between ("Address already in use"), which a busy test run does."""
    sockets = tempfile.mkdtemp(prefix="jsched-kernel-")
    return jupyter_client.KernelManager(transport="ipc", ip=os.path.join(sockets, "k"),
                                        **kwargs), sockets


class Kernel:
    """A real IPython kernel and every IOPub message it sent, grouped by parent msg_id."""

    def __init__(self, prefix: tuple[str, ...] = (), **extra_env: str) -> None:
        """``prefix``: run the kernel under a command (``unshare ...``: another namespace)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.update(extra_env)
        # the "python3" kernel runs this interpreter (jupyter_client puts sys.executable for
        # the spec's "python")
        self.km, self._sockets = kernel_manager(kernel_name="python3")
        if prefix:
            self.km.kernel_spec.argv[:0] = list(prefix)
        self.km.start_kernel(env=env, cwd=str(ROOT))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.messages: dict[str, list[dict]] = {}

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(self._sockets, ignore_errors=True)

    def _pump(self, timeout: float) -> dict | None:
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            return None
        parent = msg["parent_header"].get("msg_id", "")
        self.messages.setdefault(parent, []).append(msg)
        return msg

    def run(self, code: str, timeout: float = 60, metadata: dict | None = None) -> Run:
        """Execute ``code`` and wait until the kernel is idle again; ``metadata``: the execute
        request's, as a frontend sends it (JupyterLab: ``{"cellId": ...}``)."""
        msg_id = self.start(code, metadata)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._pump(0.5)
            if (msg is not None and msg["parent_header"].get("msg_id") == msg_id
                    and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"):
                return Run(self, msg_id)
        raise TimeoutError(f"no idle after {timeout} s running {code!r}")

    def start(self, code: str, metadata: dict | None = None) -> str:
        """Execute ``code`` without waiting; returns its msg_id."""
        if not metadata:
            return self.kc.execute(code)
        # (KernelClient.execute sends no metadata: the request as it builds it, with some)
        content = {"code": code, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}
        msg = self.kc.session.msg("execute_request", content, metadata=metadata)
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def until(self, msg_id: str, predicate, timeout: float = 60) -> Run:
        """Read IOPub until ``predicate(Run)`` holds for the messages of ``msg_id``."""
        deadline = time.monotonic() + timeout
        run = Run(self, msg_id)
        while not predicate(run):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met; messages: {run.msgs}")
            self._pump(0.2)
        return run

    def value(self, expression: str):
        run = self.run(f"print(repr({expression}))")
        assert run.error is None, run.error
        return eval(run.stdout.strip())


class Run:
    """The messages of one execution (as far as they have arrived)."""

    def __init__(self, kernel: Kernel, msg_id: str) -> None:
        self.kernel, self.msg_id = kernel, msg_id

    @property
    def msgs(self) -> list[dict]:
        return self.kernel.messages.get(self.msg_id, [])

    def _of(self, *types: str) -> list[dict]:
        return [m for m in self.msgs if m["msg_type"] in types]

    @property
    def stdout(self) -> str:
        return "".join(m["content"]["text"] for m in self._of("stream")
                       if m["content"]["name"] == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(m["content"]["text"] for m in self._of("stream")
                       if m["content"]["name"] == "stderr")

    @property
    def error(self) -> dict | None:
        errors = self._of("error")
        return errors[0]["content"] if errors else None

    @property
    def displays(self) -> list[dict]:
        return [m["content"] for m in self._of("display_data", "execute_result")]

    @property
    def updates(self) -> list[dict]:
        return [m["content"] for m in self._of("update_display_data")]

    def texts(self, mime: str = "text/plain") -> list[str]:
        return [c["data"][mime] for c in self.displays if mime in c["data"]]

    def status_lines(self) -> list[str]:
        """The status line's text, first as displayed, then each update."""
        first = [c for c in self.displays if c.get("transient", {}).get("display_id")]
        if not first:
            return []
        display_id = first[0]["transient"]["display_id"]
        lines = [first[0]["data"]["text/plain"]]
        lines += [c["data"]["text/plain"] for c in self.updates
                  if c.get("transient", {}).get("display_id") == display_id]
        return lines


@contextlib.contextmanager
def loaded_kernel(setup: str, code: str = "") -> Iterator[Kernel]:
    """A :class:`Kernel` with the extension loaded and ``setup`` run (``%sched local ...``),
    then ``code``, with ``sched`` (the kernel's scheduler) and ``gate`` (an Event) defined;
    closed after."""
    k = Kernel()
    try:
        run = k.run(f"%load_ext jupyter_sched\n{setup}")
        assert run.error is None and "UsageError" not in run.stderr, (run.error, run.stderr)
        k.run("import threading\nimport jupyter_sched\n"
              "sched = jupyter_sched.get_scheduler()\ngate = threading.Event()\n" + code)
        yield k
    finally:
        k.close()
