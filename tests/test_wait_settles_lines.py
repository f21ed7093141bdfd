"""`%sched wait` and `jupyter_sched.wait()` send the final state of the status lines they
waited for again, under the waiting cell's own parent: frontends that drop a finished cell's
updates (nbclient, which executes and saves notebooks) then show how each task ended.

Checked in a real kernel (the harness of test_magics_kernel.py), and end to end with nbclient.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kernel_client import Kernel, Run  # skips the module without jupyter_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    try:
        run = k.run("%load_ext jupyter_sched\n%sched local --gpus 2 --cpus 4 --mem 8GiB\n"
                    "import threading\nimport jupyter_sched")
        assert run.error is None, run.error
        yield k
    finally:
        k.close()


def display_id(run: Run) -> str:
    shown = [c for c in run.displays if c.get("transient", {}).get("display_id")]
    assert len(shown) == 1, run.msgs
    return shown[0]["transient"]["display_id"]


def settled(run: Run) -> dict[str, str]:
    """The updates sent under this cell: display id -> text."""
    return {c["transient"]["display_id"]: c["data"]["text/plain"] for c in run.updates}


def test_wait_sends_the_final_lines_again_under_its_own_cell(kernel):
    kernel.run("gate = threading.Event()")
    ok = kernel.run("%%sched --gpus 0.5 --name fine\ngate.wait(60)\n'fine'")
    bad = kernel.run("%%sched --gpus 0.5 --name broken\ngate.wait(60)\nraise ValueError('no')")
    first = (ok.status_lines()[0], bad.status_lines()[0])
    assert all(": running on local, GPU 0 (0.5)" in line for line in first), first
    kernel.run("gate.set()")
    wait = kernel.run("%sched wait fine broken")
    assert wait.error is None, wait.error
    sent = settled(wait)
    assert sent[display_id(ok)].startswith("[sched] t1 fine: done on local, GPU 0 (0.5) (in ")
    assert sent[display_id(bad)].startswith(
        "[sched] t2 broken: failed: ValueError: no (in "), sent
    assert "t2 broken: failed: ValueError: no" in wait.stdout


def test_a_plain_wait_settles_each_ended_line_once(kernel):
    early = kernel.run("%%sched --gpus 0.25 --name early\n'quick'")
    kernel.run("jupyter_sched.get_scheduler().wait()")  # it ends while no wait cell runs
    kernel.run("gate = threading.Event()")
    late = kernel.run("%%sched --gpus 0.25 --name late\ngate.wait(60)")
    kernel.run("gate.set()")
    first = kernel.run("%sched wait")
    sent = settled(first)
    assert ": done" in sent[display_id(early)] and ": done" in sent[display_id(late)], sent
    # already settled: a plain wait does not send them again, a named one does
    assert settled(kernel.run("%sched wait")) == {}
    again = settled(kernel.run("%sched wait early"))
    assert list(again) == [display_id(early)]


def test_a_waiting_cell_settles_nothing_its_own_line_already_showed(kernel):
    run = kernel.run("%%sched --gpus 0.5 --wait --name waited\n6 * 7")
    assert ": done" in run.updates[-1]["data"]["text/plain"]
    assert settled(kernel.run("%sched wait")) == {}


def test_python_wait_settles_too(kernel):
    kernel.run("gate = threading.Event()")
    sub = kernel.run("%%sched --gpus 0.5 --name from-python\ngate.wait(60)")
    kernel.run("gate.set()")
    wait = kernel.run("_ = jupyter_sched.wait()")
    assert wait.error is None, wait.error
    assert ": done on local" in settled(wait)[display_id(sub)]


def test_a_notebook_executed_by_nbclient_is_saved_with_final_states(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        "%load_ext jupyter_sched\n%sched local --gpus 1",
        "import threading\ngate = threading.Event()",
        "%%sched --gpus 0.5 --name a\ngate.wait(60)",
        "%%sched --gpus 0.5 --name b\ngate.wait(60)\nraise KeyError('b')",
        "gate.set()\n%sched wait",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    client = nbclient.NotebookClient(nb, timeout=60, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)
    lines = [o["data"]["text/plain"] for c in nb.cells[2:4] for o in c.outputs
             if o.get("output_type") == "display_data"]
    assert lines[0].startswith("[sched] t1 a: done on local, GPU 0 (0.5) (in "), lines
    assert lines[1].startswith("[sched] t2 b: failed: KeyError: 'b' (in "), lines
