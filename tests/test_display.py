"""Rendering snapshot views: stable text, escaped HTML, versioned JSON."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import pytest

from jupyter_sched.notebook.cell_options import parse_args
from jupyter_sched.notebook.commands import COMMANDS
from jupyter_sched.sim import Simulation
from jupyter_sched.views import display, history, snapshot, tables
from jupyter_sched.views import format as fmt

EVIL = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def scenario(evil: str = EVIL, queued: int = 5) -> snapshot.Snapshot:
    """Two nodes (one with two A100s), a queue, running, queued, infeasible, gang and done
    tasks, with ``evil`` as the name of a node label, a queue, a task and a reason source."""
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 2, "memory": "64GiB", "licenses": 3},
                 labels={"gpu.model": "A100", "owner": evil}, gpu_memory="40GiB")
    sim.add_node(evil, {"CPU": 4})
    sim.add_queue("research", weight=2, capability={"GPU": 4})
    sim.add_queue(evil, weight=1)
    for i in range(queued):
        sim.submit(duration=10, resources={"GPU": 0.5}, name=f"a{i}")
    sim.submit(duration=1, resources={"GPU": 8}, name=evil, queue=evil)
    sim.submit(duration=1, resources={"GPU": 1}, gang=("ddp", 2))
    sim.submit(duration=0.5, resources={"CPU": 1}, name=evil)
    sim.run(until=3)
    history = [t for t in sim.core.tasks.values() if t.state in ("done", "failed", "cancelled")]
    return snapshot.take(sim.core, history=history)


BUNDLES = [display.status_bundle, display.nodes_bundle, display.queue_bundle,
           history.history_bundle, display.queues_bundle]


@pytest.mark.parametrize("render", BUNDLES, ids=lambda f: f.__name__)
def test_bundle_has_three_mime_types_and_a_versioned_kind(render):
    bundle = render(scenario())
    assert set(bundle) == {"text/plain", "text/html", display.MIME}
    data = bundle[display.MIME]
    assert data["version"] == 1
    assert data["kind"] == render.__name__.removesuffix("_bundle")
    json.dumps(data)  # plain JSON
    assert isinstance(bundle["text/plain"], str) and bundle["text/plain"]


@pytest.mark.parametrize("render", BUNDLES, ids=lambda f: f.__name__)
def test_user_strings_are_escaped_in_html_and_plain_in_text(render):
    bundle = render(scenario())
    html = bundle["text/html"]
    assert "<img" not in html
    assert ESCAPED in html
    assert EVIL in bundle["text/plain"]


def test_every_task_view_renders_escaped():
    snap = scenario()
    views = [*snap.running, *snap.waiting, *snap.history]
    evil = [v for v in views if v.name == EVIL]
    assert {v.state for v in evil} == {"infeasible", "done"}
    for view in views:
        bundle = display.task_bundle(view, error=EVIL)
        assert "<img" not in bundle["text/html"]
        assert bundle[display.MIME]["task"]["id"] == view.id
    bundle = display.task_bundle(evil[0])
    assert ESCAPED in bundle["text/html"]
    assert bundle["text/plain"].startswith(f"{evil[0].id} {EVIL}: infeasible: GPU")


def test_failed_task_error_and_status_line_are_escaped():
    view = snapshot.TaskView("t9", EVIL, "failed", EVIL, "default", 0, {"GPU": 0.5},
                             started=1.0, ended=3.5)
    bundle = display.task_bundle(view, error=f"ValueError: {EVIL}")
    assert bundle["text/plain"] == f"t9 {EVIL}: failed: ValueError: {EVIL}"
    assert "<img" not in bundle["text/html"] and ESCAPED in bundle["text/html"]
    line = display.status_line(view, now=9.0, error=f"ValueError: {EVIL}", note=EVIL)
    expected = f"[sched] t9 {EVIL}: failed: ValueError: {EVIL} (in 2.5 s) — {EVIL}"
    assert line["text/plain"] == expected
    assert "<img" not in line["text/html"]


def test_a_status_line_carries_its_task_or_gang_as_a_payload():
    from jupyter_sched.notebook.statusline import render_line

    view = snapshot.TaskView("t9", EVIL, "running", "", "default", 0, {"GPU": 0.5},
                             node="local", devices={"GPU": {0: 0.5}}, submitted=1.0,
                             started=2.0)
    line = render_line([view], now=9.0, note=EVIL)
    data = line[display.MIME]
    assert data == {"version": 1, "kind": "task", "task": display.to_json(view), "error": None,
                    "time": 9.0, "note": EVIL}
    assert json.loads(json.dumps(data)) == data
    assert line["text/plain"].startswith("[sched] t9 ")
    members = [snapshot.TaskView(f"t{k}", f"ddp-{k}", "queued", "", "default", 0, {"GPU": 1},
                                 gang="ddp", rank=k) for k in (1, 2)]
    data = render_line(members)[display.MIME]
    assert data["kind"] == "gang" and data["name"] == "ddp" and "time" not in data
    assert [t["rank"] for t in data["tasks"]] == [1, 2] and "note" not in data


class _Left:
    """A handle whose task was left running on a kept cluster as its scheduler stopped."""

    id, name, state, reason, queue, priority = "t1", "train", "failed", "left running", "q", 0
    demand, node, slot, devices = {"GPU": 1.0}, "local", "e0", {"GPU": {0: 1.0}}
    submitted, started, ended = 1.0, 2.0, 5.0

    def done(self):
        return True

    def cancelled(self):
        return False

    def exception(self, timeout=None):
        from jupyter_sched.executors.base import LeftRunning

        return LeftRunning("left running on engine 0 of kept cluster c1")


def test_a_line_left_running_on_a_kept_cluster_says_the_kernel_restarted_and_stops_counting():
    from jupyter_sched.notebook.statusline import RESTARTED, render_line

    line = render_line([_Left()], now=9.0)
    assert line["text/plain"] == ("[sched] t1 train: running on local (engine e0), GPU 0 — "
                                  + RESTARTED)
    data = line[display.MIME]
    assert "time" not in data and data["note"] == RESTARTED and data["error"] is None
    assert data["task"]["state"] == "running" and data["task"]["ended"] is None


def test_every_task_in_a_payload_says_its_state_in_the_words_of_its_text():
    """A task's ``text`` is its line of ``text/plain`` after its label: the frontend shows the
    kernel's words (docs/schema.md); a failed task's own payload says its error there."""
    snap = scenario()
    status = display.status_bundle(snap)
    tasks = [*status[display.MIME]["running"], *status[display.MIME]["waiting"]]
    assert {t["state"] for t in tasks} >= {"running", "queued", "infeasible"}
    for task, view in zip(tasks, [*snap.running, *snap.waiting], strict=True):
        line = f"{fmt.task_label(view)}: {task['text']}{fmt.gang_text(view)}"
        assert display.task_bundle(view)["text/plain"] == line
    infeasible = next(t for t in tasks if t["state"] == "infeasible" and t["name"] == EVIL)
    assert infeasible["text"].startswith("infeasible: GPU")
    ended = history.history_bundle(snap)[display.MIME]["history"]
    assert ended and all(t["text"] == t["state"] or t["text"].startswith(t["state"] + " ")
                         or t["text"].startswith(t["state"] + ":") for t in ended)
    failed = snapshot.TaskView("t9", "x", "failed", "ran out", "default", 0, {"CPU": 1})
    assert display.task_bundle(failed, error="ValueError: no")[display.MIME]["task"]["text"] \
        == "failed: ValueError: no"
    assert display.to_json(failed)["text"] == "failed: ran out"
    line = display.line_payload([failed], ["ValueError: no"])
    assert line["task"]["text"] == "failed: ValueError: no"


def test_gang_bundle_lists_members():
    snap = scenario()
    members = [v for v in snap.waiting if v.gang == "ddp"]
    bundle = display.gang_bundle(EVIL, members)
    assert bundle["text/plain"].splitlines()[0] == f"gang {EVIL}: 2 members, queued"
    assert "<img" not in bundle["text/html"]
    assert [t["rank"] for t in bundle[display.MIME]["tasks"]] == [0, 1]


@pytest.mark.parametrize("render", [*BUNDLES, display.task_bundle], ids=lambda f: f.__name__)
def test_plain_text_and_html_are_stable_across_equal_states(render):
    first, second = scenario(), scenario()
    if render is display.task_bundle:
        first, second = first.running[0], second.running[0]
    assert render(first)["text/plain"] == render(second)["text/plain"]
    assert render(first)["text/html"] == render(second)["text/html"]


def test_status_text_shows_devices_shares_and_the_queue():
    text = display.status_bundle(scenario())["text/plain"]
    assert text.splitlines()[0] == (
        "2 nodes · GPU 2/2 allocated · 4 running · 3 queued · 1 infeasible · 1 done · 0 failed")
    assert "GPU 0  [##########]  1.00 allocated  A100  40 GiB" in text
    assert "t1  a0" in text and "on n1, GPU 0 (0.5)" in text
    assert "queued #1" in text
    assert "GPU: needs 8 whole" in text
    assert "[gang ddp rank 1]" in text


def test_declared_devices_are_marked():
    sim = Simulation()
    sim.add_node("local", {"GPU": 2, "CPU": 2})
    sim.run()
    snap = snapshot.take(sim.core)
    declared = snapshot.Snapshot(
        snap.time,
        tuple(snapshot.NodeView(**{**n.__dict__, "devices": tuple(
            snapshot.DeviceView(d.index, d.allocated, declared=True) for d in n.devices)})
            for n in snap.nodes),
        (), (), (), (), snap.counts)
    bundle = display.nodes_bundle(declared)
    assert bundle["text/plain"].count("declared") == 2
    assert "<i>declared</i>" in bundle["text/html"]
    assert "(declared)" in display.summary_text(declared)
    assert bundle[display.MIME]["nodes"][0]["devices"][0]["declared"] is True


def test_rows_are_bounded_and_the_rest_counted():
    snap = scenario(queued=120)
    bundle = display.queue_bundle(snap, limit=10)
    text = bundle["text/plain"]
    assert text.count("queued #") == sum(v.state == "queued" for v in snap.waiting[:10])
    assert "more waiting" in text
    waiting = snap.counts["queued"] + snap.counts["infeasible"] + snap.counts["pending"]
    assert f"… and {waiting - 10:,} more waiting" in text
    assert len(bundle[display.MIME]["waiting"]) == 10
    assert bundle["text/html"].count("<tr>") <= 1 + 20


def test_wrappers_display_and_iterate():
    snap = scenario()
    nodes = tables.NodeList(snap)
    assert [n.name for n in nodes] == ["n1", EVIL] and len(nodes) == 2
    assert repr(nodes) == display.nodes_bundle(snap)["text/plain"]
    queue = tables.QueueList(snap)
    assert len(queue) == len(snap.running) + len(snap.waiting)
    assert queue.counts["running"] == 4
    for cls in (tables.Status, tables.NodeList, tables.QueueList, tables.History,
                tables.Queues):
        assert display.MIME in cls(snap)._repr_mimebundle_()


def test_empty_snapshot_renders():
    empty = snapshot.Snapshot(0.0, (), (), (), (), (), {})
    for render in BUNDLES:
        bundle = render(empty)
        assert bundle["text/plain"]


def test_formatting_helpers():
    assert fmt.format_resources({"CPU": 2, "GPU": 0.5, "memory": 2**34}) == (
        "GPU 0.5, CPU 2, memory 16 GiB")
    assert fmt.format_devices({"GPU": {1: 1.0, 0: 0.25}}) == "GPU 0 (0.25), GPU 1"
    assert fmt.format_duration(0.042) == "0.04 s"
    assert fmt.format_duration(75) == "1 min 15 s"
    assert fmt.format_duration(7300) == "2 h 1 min"


def test_every_view_of_a_gpu_says_the_same_about_it():
    gpu = snapshot.DeviceView(index=0, allocated=0.5, model="A100", memory=16 * 2**30,
                              declared=False, utilization=75, memory_used=2 * 2**30)
    expected = ["A100", "use 75%", "memory used 2 GiB of 16 GiB"]
    assert fmt.device_details(gpu) == expected
    declared = snapshot.DeviceView(index=1, allocated=0.0, model="declared GPU", memory=None,
                                   declared=True, utilization=None, memory_used=None)
    assert fmt.device_details(declared) == []  # its placeholder model says nothing


def test_a_task_whose_stop_is_out_shows_stopping_and_for_how_long():
    sim = Simulation(stop_delay=5.0)
    sim.add_node("n1", {"CPU": 8, "GPU": 1})
    t = sim.submit(duration=100, resources={"GPU": 1}, name="stubborn")
    sim.cancel(t, at=1.0)
    sim.run(until=2.0)
    snap = snapshot.take(sim.core)
    (view,) = snap.running
    assert view.state == "stopping" and view.stopping_since == 1.0
    line = display.status_line(view, now=3.5)["text/plain"]
    assert "stopping on n1, GPU 0: cancelled" in line and "for 2.5 s" in line
    assert "stopping" in display.queue_bundle(snap)["text/plain"]
    assert display.queue_bundle(snap)[display.MIME]["running"][0]["state"] == "stopping"
    sim.run()
    assert t.state == "cancelled"


def test_who_else_holds_a_gpu_is_shown_everywhere_and_escaped():
    """Other kernels' leases and the processes holding none, in %sched's text, its HTML and
    the JSON payload (the sidebar's); user names and notebook paths are escaped."""
    import dataclasses

    sim = Simulation()
    sim.add_node("local", {"CPU": 4, "GPU": 1})
    sim.run()
    snap = snapshot.take(sim.core)
    evil = "<img src=x onerror=alert(1)>"
    device = dataclasses.replace(
        snap.nodes[0].devices[0],
        others=(snapshot.HolderView("bob", f"notebook {evil}.ipynb", 4242, 0.5, 0.0, "t3"),),
        unmanaged=(snapshot.ProcessView(777, 2 * 2**30, "carol"),))
    node = dataclasses.replace(snap.nodes[0], devices=(device,))
    snap = dataclasses.replace(snap, nodes=(node,), notices=((1, 0.0, f"made {evil}"),))
    bundle = display.status_bundle(snap)
    text = bundle["text/plain"]
    assert f"0.5 held by bob (notebook {evil}.ipynb, pid 4242)" in text
    assert "unmanaged: pid 777 (2 GiB) of carol" in text
    assert evil not in bundle["text/html"] and "&lt;img" in bundle["text/html"]
    data = bundle[display.MIME]
    (dev,) = data["nodes"][0]["devices"]
    assert dev["others"] == [{"user": "bob", "label": f"notebook {evil}.ipynb", "pid": 4242,
                              "share": 0.5, "since": 0.0, "task": "t3"}]
    assert dev["unmanaged"] == [{"pid": 777, "memory": 2 * 2**30, "user": "carol"}]
    assert data["notices"] == [{"seq": 1, "time": 0.0, "text": f"made {evil}"}]
    json.dumps(data)


@pytest.mark.parametrize("name", ["status", "queue", "nodes", "history", "queues"])
def test_a_table_from_sched_is_frozen_as_of_when_it_was_made(name):
    """``%sched`` and ``%sched queue`` (and their kin) print a record of one moment: it says
    ``as of`` the time of day, and nothing in it tells a frontend to count its times on."""
    snap = scenario()
    assert snap.running  # times that a live view would count on
    scheduler = SimpleNamespace(snapshot=lambda fresh=True, **_: snap, queues=None)
    ctx = SimpleNamespace(scheduler=scheduler)
    cmd = COMMANDS[name]
    before = time.time()
    table = cmd(ctx, parse_args(cmd.parser, ""))
    bundle = table._repr_mimebundle_()
    said = display.as_of_text(table.taken)
    assert re.fullmatch(r"\d\d:\d\d:\d\d", said) and table.taken >= before - 1
    assert f"as of {said}" in bundle["text/html"]
    assert bundle[display.MIME]["as_of"] == said
    html = bundle["text/html"].lower()
    assert "<script" not in html and "data-since" not in html and "data-started" not in html
    assert table._repr_mimebundle_() == bundle  # shown again: the same moment (its `taken`)
    assert "as of" not in bundle["text/plain"]  # stable for nbval


def test_the_sidebars_status_and_status_lines_are_not_frozen():
    snap = scenario()
    assert "as_of" not in display.status_bundle(snap)[display.MIME]
    view = snap.running[0]
    assert "as_of" not in display.line_payload([view], [None], now=snap.time)
