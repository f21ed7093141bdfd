"""Steering the queue in a real kernel: ``%sched priority/top/hold/release`` and the handles'
methods move waiting cells at once (their status lines, ``%sched queue``), a queue's
``--max-running`` holds its cells back whatever is free, and each bad input is one line that
names it. Logical GPUs are declared, so no GPU is needed."""

from __future__ import annotations

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

from kernel_client import loaded_kernel  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel("%sched local --gpus 1 --cpus 4 --mem 8GiB") as k:
        yield k


def line_says(run, words: str):
    return lambda r: bool(r.status_lines()) and words in r.status_lines()[-1]


def test_the_magics_move_hold_and_release_waiting_cells_at_once(kernel):
    kernel.run("%%sched --gpus 1 --name busy\ngate.wait(120)")
    cells = {name: kernel.run(f"%%sched --gpus 1 --name {name}\nprint('{name} ran')")
             for name in ("first", "second", "third")}
    kernel.until(cells["third"].msg_id, line_says(cells["third"], "position 3"), timeout=30)

    run = kernel.run("%sched top third")
    assert run.error is None, run.error
    assert "third is first: position 1 in queue 'default', priority 1" in run.stdout
    kernel.until(cells["third"].msg_id, line_says(cells["third"], "position 1"), timeout=10)
    kernel.until(cells["first"].msg_id, line_says(cells["first"], "position 2"), timeout=10)

    run = kernel.run("%sched hold first")
    assert "held t" in run.stdout and "never starts until released" in run.stdout, run.stdout
    kernel.until(cells["first"].msg_id,
                 line_says(cells["first"], "held: never started until released"), timeout=10)
    kernel.until(cells["second"].msg_id, line_says(cells["second"], "position 2"), timeout=10)
    queue = kernel.run("%sched queue").texts()[-1]
    assert "held" in queue and "first" in queue, queue

    run = kernel.run("%sched priority second 7")
    assert "second has priority 7: position 1" in run.stdout, run.stdout
    kernel.until(cells["third"].msg_id, line_says(cells["third"], "position 2"), timeout=10)

    kernel.run("gate.set()")
    for name in ("second", "third"):
        kernel.until(cells[name].msg_id, line_says(cells[name], "done"), timeout=30)
    assert kernel.value("sched.task('first').state") == "held"  # the GPU is free: still held
    run = kernel.run("%sched release first")
    assert "first: started at once, on local" in run.stdout, run.stdout  # (however soon it ends)
    kernel.until(cells["first"].msg_id, line_says(cells["first"], "done"), timeout=30)
    kernel.run("gate.clear()")


def test_the_api_steers_handles_and_gangs(kernel):
    kernel.run("busy = sched.submit(gate.wait, 120, resources='GPU=1', name='api-busy')\n"
               "a = sched.submit(print, 'a', resources='GPU=1', name='api-a')\n"
               "b = sched.submit(print, 'b', resources='GPU=1', name='api-b')\n"
               "g = sched.submit(print, 'g', resources='GPU=0.5', gang='pair:2')")
    assert kernel.value("b.set_priority(3)").startswith("t")
    assert kernel.value("b.position") == 1
    assert "held" in kernel.value("g.hold()")
    assert kernel.value("[m.state for m in g.members]") == ["held", "held"]
    assert "first" in kernel.value("g.top()")
    assert "released" in kernel.value("g.release()")
    assert kernel.value("[m.position for m in g.members]") == [1, 1]
    kernel.run("gate.set()")
    assert kernel.run("sched.wait(timeout=60)").error is None
    run = kernel.run("a.hold()")
    assert run.error is not None and "has ended (done): only a waiting task can be held" in \
        run.error["evalue"], run.error
    kernel.run("gate.clear()")


@pytest.mark.parametrize(("line", "words"), [
    ("%sched hold nope", "no task 'nope'"),
    ("%sched priority api-a 1e3", "is not a whole number in ASCII digits"),
    ("%sched priority api-a 99999999999", "must be from -1,000,000,000 to 1,000,000,000"),
    ("%sched release api-a", "has ended (done): only a waiting task can be released"),
    ("%sched top", "the following arguments are required"),
    ("%sched queues add capped --max-running -1", "must be from 0 to 1,000,000"),
    ("%sched queues set nowhere --max-running 2", "no queue 'nowhere'"),
    ("%sched queues set default", "changes nothing"),
    ("%%sched --min-runtime 5\npass", "--min-runtime 5 is for batch work; add --batch"),
])
def test_bad_steering_input_is_one_line_that_names_it(kernel, line, words):
    run = kernel.run(line)
    said = (run.error or {}).get("evalue", "") + run.stderr
    assert words in said, (line, said)
    assert "Traceback" not in run.stderr


def test_max_running_holds_a_queues_cells_back_whatever_is_free(kernel):
    run = kernel.run("%sched queues add capped --max-running 1")
    assert run.error is None, run.error
    assert "0 of max 1" in run.texts()[-1], run.texts()
    kernel.run("%%sched --cpus 1 --queue capped --name cap-a\ngate.wait(120)")
    second = kernel.run("%%sched --cpus 1 --queue capped --name cap-b\nprint('b')")
    kernel.until(second.msg_id, line_says(
        second, "waits for its queue: queue 'capped' runs 1 of at most 1 tasks at once"),
        timeout=30)
    kernel.run("%sched queues set capped --max-running 0")
    kernel.until(second.msg_id, line_says(second, "done"), timeout=30)
    kernel.run("gate.set()")
    assert kernel.run("sched.wait(timeout=60)").error is None
    kernel.run("gate.clear()")


def test_batch_cells_and_map_items_are_batch_work(kernel):
    kernel.run("%%sched --cpus 1 --batch --min-runtime 2 --name batchy\npass")
    kernel.run("items = sched.map(abs, [1, -2])\nsched.wait(timeout=60)")
    views = kernel.value("[(v.name, v.batch) for v in sched.snapshot(fresh=True).history"
                         " if v.name in ('batchy',) or v.name.startswith('abs')]")
    assert views and all(batch for _, batch in views), views
    cell = kernel.run("%%sched --cpus 1 --name interactive\npass")
    kernel.until(cell.msg_id, line_says(cell, "done"), timeout=30)
    assert kernel.value("[v.batch for v in sched.snapshot(fresh=True).history "
                        "if v.name == 'interactive']") == [False]


def test_a_share_no_device_has_waits_fragmented_in_its_status_line(kernel):
    run = kernel.run("%sched local --gpus 2 --cpus 4 --mem 8GiB")
    assert run.error is None, run.error
    for name in ("frag-a", "frag-b"):
        kernel.run(f"%%sched --gpus 0.6 --name {name}\ngate.wait(120)")
    big = kernel.run("%%sched --gpus 0.8 --name frag-big\nprint('big ran')")
    kernel.until(big.msg_id, line_says(
        big, "fragmented: 0.4 + 0.4 free on local, no device has 0.8"), timeout=30)
    queue = kernel.run("%sched queue").texts()[-1]
    assert "fragmented: 0.4 + 0.4 free on local, no device has 0.8" in queue, queue
    kernel.run("gate.set()")
    kernel.until(big.msg_id, line_says(big, "done"), timeout=30)
    kernel.run("gate.clear()\n%sched local --gpus 1 --cpus 4 --mem 8GiB")


def test_a_running_share_says_how_it_is_held(kernel):
    cell = kernel.run("%%sched --gpus 0.5 --name shared\ngate.wait(120)")
    kernel.until(cell.msg_id, line_says(cell, "running on local, GPU 0 (0.5) [logical]"),
                 timeout=30)
    queue = kernel.run("%sched queue").texts()[-1]
    assert "GPU 0 (0.5) [logical]" in queue, queue
    assert kernel.value("[(v.name, v.enforced) for v in sched.snapshot(fresh=True).running]"
                        ) == [("shared", "logical")]
    assert kernel.value("sched.task('shared').enforced") == "logical"
    run = kernel.run("%config Scheduler.enforce = 'full'")
    # one line of ours, naming the value and what is valid (IPython's own log of a %config
    # error reads "ERROR:root:...", as if something had crashed)
    assert run.error is None, run.error
    assert run.stderr.startswith("jupyter_sched: ") and "ERROR" not in run.stderr, run.stderr
    assert "'enforce'" in run.stderr and "'full'" in run.stderr and "'logical'" in run.stderr
    assert run.stderr.strip().endswith("(nothing was changed)"), run.stderr
    assert kernel.value("sched.enforce") == "auto"
    kernel.run("gate.set()")
    kernel.until(cell.msg_id, line_says(cell, "done on local, GPU 0 (0.5) (in"), timeout=30)
    kernel.run("gate.clear()")
