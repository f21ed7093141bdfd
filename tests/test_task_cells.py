"""A ``%%sched`` cell's task keeps the id of the notebook cell that submitted it, as the
frontend sent it in the execute request's metadata (``cellId``, which JupyterLab sends), and
its payload carries it (``cell``), so that the sidebar can jump to that cell. A task submitted
from Python code, or from a request without a cell id, has none."""

from __future__ import annotations

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

from kernel_client import loaded_kernel  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel("%sched local --gpus 1",
                       "from jupyter_sched.notebook.comm_messages import status_data") as k:
        yield k


def payload_tasks(kernel) -> dict:
    """Each task of the comm's snapshot payload (running, waiting and ended), by its name."""
    run = kernel.run("data = status_data(sched.snapshot(fresh=True))\n"
                     "print(repr({t['name']: t for k in ('running', 'waiting', 'history') "
                     "for t in data[k]}))")
    assert run.error is None, run.error
    return eval(run.stdout.strip())


def test_a_cell_task_carries_the_id_of_its_cell(kernel):
    run = kernel.run("%%sched --gpus 1 --name held-cell --out a\ngate.wait(60)",
                     metadata={"cellId": "abc"})
    assert run.error is None, run.error
    kernel.run("%%sched --gpus 1 --name waiting-cell --out b\npass",
               metadata={"cellId": "cell-2_B"})
    kernel.run("%%sched --name no-id --out c\npass")  # a frontend that sends no cell id
    kernel.run("%%sched --name bad-id --out d\npass", metadata={"cellId": "<b>x</b>"})
    kernel.run("e = sched.submit(print, 'from code', name='from-code')",
               metadata={"cellId": "code-cell"})
    kernel.run("for h in (c, d, e): h.result(timeout=30)")
    tasks = payload_tasks(kernel)
    assert tasks["held-cell"]["state"] == "running" and tasks["held-cell"]["cell"] == "abc"
    assert tasks["waiting-cell"]["state"] == "queued"
    assert tasks["waiting-cell"]["cell"] == "cell-2_B"
    for name in ("no-id", "bad-id", "from-code"):  # (absent: no cell to jump to)
        assert tasks[name]["state"] == "done" and "cell" not in tasks[name], tasks[name]

    kernel.run("gate.set()\nb.result(timeout=30)")
    tasks = payload_tasks(kernel)
    assert tasks["held-cell"]["state"] == "done" and tasks["held-cell"]["cell"] == "abc"
    assert tasks["waiting-cell"]["cell"] == "cell-2_B"
