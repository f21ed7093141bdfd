"""The magics in a real kernel: non-blocking submission, live status lines, --wait, interrupts,
gangs, HTML escaping, bad input, and the dashboard with 10,000 queued tasks.

One kernel serves the whole module (starting one costs seconds); tests run in file order and
each leaves the scheduler idle. Logical GPUs are declared, so no GPU is needed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

from kernel_client import Kernel  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    try:
        run = k.run("%load_ext jupyter_sched\n%sched local --gpus 2 --cpus 4 --mem 8GiB")
        assert run.error is None and "UsageError" not in run.stderr, (run.error, run.stderr)
        k.run("import threading, time\nimport jupyter_sched\n"
              "sched = jupyter_sched.get_scheduler()")
        yield k
    finally:
        k.close()


def idle(kernel: Kernel) -> None:
    """Wait until nothing runs or waits (so each test starts from the same state)."""
    run = kernel.run("sched.wait(timeout=60); print(sched.snapshot(fresh=True).counts)")
    assert run.error is None, run.error


# -- loading and configuration ------------------------------------------------------------------

def test_declared_gpus_show_as_declared(kernel):
    run = kernel.run("%sched nodes")
    text = run.texts()[0]
    assert text.count("declared") == 2, text
    assert "GPU 0" in text and "GPU 1" in text


def test_loading_twice_is_harmless_and_config_works(kernel):
    run = kernel.run("%load_ext jupyter_sched\n%reload_ext jupyter_sched")
    assert run.error is None and "Error" not in run.stderr, run.stderr
    run = kernel.run('%config Scheduler.policy = "spread"')
    assert run.error is None and not run.stderr, run.stderr
    assert kernel.value("sched.policy") == "spread"
    kernel.run('%config Scheduler.policy = "binpack"')
    assert kernel.value("sched.policy") == "binpack"
    run = kernel.run("%sched config")
    assert "policy" in run.stdout and "'binpack'" in run.stdout


def test_help_explains_every_option(kernel):
    run = kernel.run("%sched --help")
    for command in ("status", "nodes", "queue", "cancel", "wait", "result", "log", "local",
                    "connect", "start", "stop", "queues", "drain", "history", "config"):
        assert f"  {command} " in run.stdout
    for cell in ("%%sched --help", "%%sched --help\n", "%%sched --help\n\n  \n",
                 "%%sched --help\npass"):
        run = kernel.run(cell)  # as the README says: alone in a cell, or above code
        assert run.error is None, run.error
        for option in ("--gpus", "--gpu-mem", "--gang NAME:SIZE[:MIN]", "--on WHERE",
                       "--out VAR"):
            assert option in run.stdout
    assert "--all" in kernel.run("%sched cancel --help").stdout
    empty = kernel.run("%%sched --gpus 0.5")
    assert empty.stderr.strip() == "UsageError: the cell is empty: nothing to schedule"


# -- submitting -----------------------------------------------------------------------------------

def test_submit_returns_at_once_and_the_status_line_follows_the_task(kernel):
    kernel.run("gate = threading.Event()")
    run = kernel.run("%%sched --gpus 0.5 --name slow --out h\n"
                     "gate.wait(60)\nprint('slow done')\n'ignored'")
    assert run.error is None, run.error
    # the cell is over while the task still waits on the gate: it did not block
    assert kernel.value("h.state") in ("queued", "running")
    assert kernel.value("h.done()") is False
    assert run.status_lines()[0].startswith("[sched] t")
    kernel.run("gate.set()")
    done = kernel.until(run.msg_id, lambda r: any(
        ": done" in line for line in r.status_lines()) and "slow done" in r.stdout)
    lines = done.status_lines()
    assert any("running on local, GPU" in line for line in lines), lines
    assert lines[-1].startswith(f"[sched] {kernel.value('h.id')} slow: done on local, GPU")
    assert " (in " in lines[-1]
    # the task's output went to the cell that submitted it, under its status line
    assert done.stdout == "slow done\n"
    idle(kernel)


def test_queued_line_shows_the_position(kernel):
    kernel.run("gate = threading.Event()")
    kernel.run("%%sched --gpus 1 --name hold-a\ngate.wait(60)")
    kernel.run("%%sched --gpus 1 --name hold-b\ngate.wait(60)")
    run = kernel.run("%%sched --gpus 1 --name third\npass")
    waiting = kernel.until(run.msg_id, lambda r: any(
        "queued, position 1" in line for line in r.status_lines()), timeout=30)
    assert "in default" in waiting.status_lines()[-1]
    kernel.run("gate.set()")
    kernel.until(run.msg_id, lambda r: any(": done" in x for x in r.status_lines()))
    idle(kernel)


def test_wait_returns_the_value_and_reraises_the_error(kernel):
    run = kernel.run("%%sched --gpus 0.5 --wait\nprint('inside')\n6 * 7")
    assert run.error is None, run.error
    assert run.stdout == "inside\n"
    assert "42" in run.texts()
    assert any(": done on local, GPU" in line for line in run.status_lines())
    run = kernel.run("%%sched --gpus 0.5 --wait --name bad\n1 / 0")
    assert run.error is not None and run.error["ename"] == "ZeroDivisionError"
    assert "failed: ZeroDivisionError: division by zero" in run.status_lines()[-1]
    idle(kernel)


def test_interrupting_a_waiting_cell_cancels_the_task(kernel):
    msg_id = kernel.start("%%sched --gpus 1 --wait --name sleeper --out s\n"
                          "for _ in range(3000):\n    time.sleep(0.02)")
    kernel.until(msg_id, lambda r: any("running" in x for x in r.status_lines()))
    kernel.km.interrupt_kernel()
    run = kernel.until(msg_id, lambda r: r.error is not None)
    assert run.error["ename"] == "KeyboardInterrupt"
    assert re.fullmatch(r"t\d+ sleeper: interrupted: cancelled", run.error["evalue"])
    # what was interrupted inside concurrent.futures and threading is of no use to the user
    traceback = "\n".join(run.error["traceback"])
    assert "threading.py" not in traceback and "_base.py" not in traceback
    assert len(traceback.splitlines()) < 15, traceback
    # the status line's last update may reach iopub just after the cell's error
    run = kernel.until(msg_id, lambda r: "interrupted: cancelled" in r.status_lines()[-1])
    assert "interrupted: cancelled" in run.status_lines()[-1]
    assert "cancelled" in run.status_lines()[-1]
    idle(kernel)
    assert kernel.value("s.state") == "cancelled"


def test_local_gang_of_two_on_declared_gpus(kernel):
    run = kernel.run(
        "%%sched --gpus 1 --gang ddp:2 --wait --out g\n"
        "t = jupyter_sched.current_task()\n"
        "print('rank', t.rank, 'of', t.world_size, 'gpus', t.gpus)")
    assert run.error is None, run.error
    lines = sorted(run.stdout.splitlines())
    assert lines == ["rank 0 of 2 gpus [0]", "rank 1 of 2 gpus [1]"], run.stdout
    final = run.status_lines()[-1].splitlines()
    assert len(final) == 2
    assert "[gang ddp rank 0]" in final[0] and "[gang ddp rank 1]" in final[1]
    assert all(": done" in line for line in final)
    idle(kernel)


def test_names_are_escaped_in_html(kernel):
    run = kernel.run(f"%%sched --name '{EVIL}' --wait\n1")
    assert run.error is None, run.error
    assert "<img" not in run.displays[0]["data"]["text/html"]
    for command in ("%sched history", "%sched"):
        run = kernel.run(command)
        html = run.displays[0]["data"]["text/html"]
        if command == "%sched history":
            assert "&lt;img src=x onerror=alert(1)&gt;" in html
            assert EVIL in run.displays[0]["data"]["text/plain"]
        assert "<img" not in html
    idle(kernel)


# -- bad input ------------------------------------------------------------------------------------

BAD = [
    ("%%sched --gpus 1.5\n1", "1.5"),
    ("%%sched --gpus -1\n1", "-1"),
    ("%%sched --gpus abc\n1", "abc"),
    ("%%sched --gpus 0.00001\n1", "0.00001"),
    ("%%sched --cpus nan\n1", "nan"),
    ("%%sched --mem 12XB\n1", "12XB"),
    ("%%sched --gpu-mem lots\n1", "lots"),
    ("%%sched --gpus 0.5 --gpu-mem 8GiB\n1", "gpu_memory"),
    ("%%sched --resource licenses\n1", "licenses"),
    ("%%sched --resource 9lives=1\n1", "9lives"),
    ("%%sched --gpuz 1\n1", "--gpuz"),
    ("%%sched --queue nope\n1", "nope"),
    ("%%sched --queue shut\n1", "shut"),
    ("%%sched --gang ddp:0\n1", "ddp:0"),
    ("%%sched --gang ddp:2:3\n1", "ddp:2:3"),
    ("%%sched --gang ddp:two\n1", "ddp:two"),
    ("%%sched --gang ddp:2 --strategy diagonal\n1", "diagonal"),
    ("%%sched --on nowhere\n1", "nowhere"),
    ("%%sched --on local --on engines\n1", "engines"),
    ("%%sched --push missing_name\n1", "missing_name"),
    ("%%sched --out 1x\n1", "1x"),
    ("%%sched --priority high\n1", "high"),
    ("%%sched --retries -1\n1", "-1"),
    ("%%sched --time-limit 0\n1", "0"),
    ("%%sched --timeout -3\n1", "-3"),
    ("%%sched --name ''\n1", "--name"),
    ("%%sched --gpus 0.5\n", "empty"),
    ("%sched cancel t999", "t999"),
    ("%sched cancel no-such-task", "no-such-task"),
    ("%sched cancel", "--all"),
    ("%sched result t999", "t999"),
    ("%sched log t999", "t999"),
    ("%sched wait t999", "t999"),
    ("%sched bogus", "bogus"),
    ("%sched status --bogus", "--bogus"),
    ("%sched start --engines 0", "0"),
    ("%sched start", "--engines"),
    ("%sched start --engines 1 --launcher no-such-launcher", "no-such-launcher"),
    ("%sched local", "--gpus"),
    ("%sched local --gpus 1.5", "1.5"),
    ("%sched queues add", "NAME"),
    ("%sched queues close nope", "nope"),
    ("%sched queues frobnicate x", "frobnicate"),
    ("%sched queues add extra --capability GPU=abc", "abc"),
    ("%sched drain no-such-node", "no-such-node"),
]


def test_bad_input_is_one_line_naming_the_value_and_leaves_the_queue_unchanged(kernel):
    kernel.run("gate = threading.Event()")
    kernel.run("%sched queues add shut --weight 1\n%sched queues close shut")
    kernel.run("%%sched --gpus 1 --name keep-1\ngate.wait(60)")
    kernel.run("%%sched --gpus 1 --name keep-2\ngate.wait(60)")
    kernel.run("%%sched --gpus 1 --name keep-3\ngate.wait(60)")
    before = kernel.run("%sched queue").texts()[0]
    queues_before = kernel.run("%sched queues").texts()[0]
    assert "keep-3" in before and "queued #1" in before
    failures = []
    for code, named in BAD:
        run = kernel.run(code)
        err = run.stderr.strip()
        lines = err.splitlines()
        if not (len(lines) == 1 and lines[0].startswith("UsageError: ") and named in lines[0]
                and run.error is None):
            failures.append((code, err, run.error and run.error["ename"]))
    assert kernel.run("%sched queue").texts()[0] == before
    assert kernel.run("%sched queues").texts()[0] == queues_before
    assert not failures, "\n".join(map(repr, failures))
    assert len(BAD) >= 30
    kernel.run("gate.set()")
    idle(kernel)


# -- the dashboard -----------------------------------------------------------------------------

def test_dashboard_with_ten_thousand_queued(kernel):
    kernel.run("gate = threading.Event()")
    run = kernel.run("handles = sched.map(lambda i: gate.wait(60), range(10_000), "
                     "resources={'GPU': 1}, name='many')", timeout=120)
    assert run.error is None, run.error
    # the two that fit start on the scheduler's thread: wait until a snapshot shows them
    run = kernel.run("import time\n"
                     "while sched.snapshot(fresh=True).counts['running'] < 2:\n"
                     "    time.sleep(0.02)", timeout=60)
    assert run.error is None, run.error
    run = kernel.run(
        "from jupyter_sched.notebook.widgets import Dashboard\n"
        "board = Dashboard(sched)\n"
        "board.refresh()\n"
        "print(len(board.running.visible), len(board.waiting.visible), "
        "len(board.waiting.rows))\n"
        "print(board.queue_counts.value)\n"
        "board.waiting.visible[0].button.click()\n"
        "print(board.message.value)\n"
        "board")
    assert run.error is None, run.error
    counts, queued, message = run.stdout.splitlines()
    assert counts == "2 50 50"
    assert "9,998 queued" in queued
    assert message == "cancel sent to <code>t" + message.split("<code>t")[1]
    assert any("application/vnd.jupyter.widget-view+json" in c["data"] for c in run.displays)
    kernel.run("sched.cancel_all(); gate.set()", timeout=120)
    idle(kernel)
    run = kernel.run("%sched status --widget")
    assert any("application/vnd.jupyter.widget-view+json" in c["data"] for c in run.displays)


# -- ipyparallel engines ------------------------------------------------------------------------

def test_cells_on_engines_push_and_pull(kernel):
    pytest.importorskip("ipyparallel")
    run = kernel.run("%sched start --engines 1", timeout=180)
    assert run.error is None and not run.stderr.strip(), run.stderr
    assert "1/1" in run.texts()[0]  # one engine slot, free
    kernel.run("import os\nkernel_pid = os.getpid()\nx = 20")
    run = kernel.run("%%sched --on engines --wait --out e\n"
                     "import os\ny = x + 1\nprint('elsewhere', os.getpid() != kernel_pid)\ny * 2")
    assert run.error is None, run.error
    assert run.stdout == "elsewhere True\n"
    assert "42" in run.texts()
    assert "(engine " in run.status_lines()[-1] and ": done on " in run.status_lines()[-1]
    assert kernel.value("y") == 21  # assigned on the engine, pulled back
    run = kernel.run("%sched stop", timeout=120)
    said = re.compile(r"stopped cluster \d+-\w+, which this kernel started: its engines and "
                      r"controller have ended")
    assert [line for line in run.stdout.splitlines() if said.fullmatch(line)], run.stdout
    assert "1/1" not in kernel.run("%sched nodes").texts()[0]


def test_a_huge_magic_line_is_refused_at_once_and_not_echoed(kernel):
    """A line of 100,000 characters is read as written (no ``$var`` expansion walking it
    first: that took 67 s) and the error shows at most 60 characters of the value."""
    huge = "n" * 100_000
    for code in (f"%%sched --name {huge}\n1", f"%sched cancel {huge[:20_000]}",
                 f"%%sched --priority {'9' * 50_000}\n1"):
        started = time.monotonic()
        run = kernel.run(code, timeout=30)
        assert time.monotonic() - started < 30
        said = (run.error or {}).get("evalue", "") + run.stderr
        assert "UsageError" in said or run.error is not None, said[:200]
        longest = max(len(word) for word in said.split())
        assert longest <= 80, said[:300]
    idle(kernel)


def test_after_a_shutdown_the_next_cell_gets_a_fresh_scheduler(kernel):
    """``get_scheduler().shutdown()`` ends that scheduler; the magics then use a fresh one (the
    same as ``get_scheduler()`` gives), not the closed one for the kernel's life."""
    idle(kernel)
    run = kernel.run("jupyter_sched.get_scheduler().shutdown()")
    assert run.error is None, run.error
    run = kernel.run("%%sched --wait\n6 * 7")
    assert run.error is None, run.error
    assert "42" in run.texts()
    fresh = "jupyter_sched.get_scheduler()"
    assert kernel.value(f"({fresh} is not sched, {fresh}.started, sched.state)") == (
        True, True, "closed")
    kernel.run(f"sched = {fresh}")  # (for any test after this one)
