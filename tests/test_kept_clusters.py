"""Clusters kept past the kernel (``%sched start --keep``): a killed or restarted kernel leaves
them running with their work, ``%sched clusters`` lists them from any kernel of the user,
``%sched connect`` uses them again (busy engines join once free), ``%sched stop --cluster ID``
stops them to the last process; their files are refused when they are not the user's own.

The kernels are real; each test's kept-cluster files go to a private directory of its own
(``XDG_RUNTIME_DIR``, the ``xdg`` fixture)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from jupyter_sched.executors.ipp import kept
from jupyter_sched.notebook.statusline import RESTARTED
from jupyter_sched.views.display import MIME
from jupyter_sched.views.kept import listing_text

pytest.importorskip("ipyparallel")
pytest.importorskip("jupyter_client")

from conftest_ipp import assert_gone
from kernel_client import Kernel

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _poll(what, condition, timeout: float = 60.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if condition(value):
            return value
        assert time.monotonic() < deadline, f"not so after {timeout:g}s: {value!r}"
        time.sleep(every)


def _ok(run) -> None:
    assert run.error is None, run.error
    assert "Error" not in run.stderr, run.stderr


def _processes(cluster_id: str) -> list[int]:
    """The pids the kept cluster's process book records (controller, engines, nannies)."""
    data = json.loads(Path(kept.book_path(cluster_id)).read_text())
    return [pid for pid, _ in data["known"]]


def _start_kept(kernel: Kernel, engines: int = 2) -> str:
    _ok(kernel.run("%load_ext jupyter_sched", timeout=60))
    run = kernel.run(f"%sched start --engines {engines} --keep", timeout=180)
    _ok(run)
    rows = kept.listing()
    assert len(rows) == 1 and rows[0].running and rows[0].engines == engines, rows
    assert rows[0].notebook == "kept.ipynb"
    return rows[0].cluster_id


def _end(cluster_id: str | None, *kernels: Kernel | None) -> None:
    """A test's end: its kernels closed, and the kept cluster it left (if any) stopped."""
    for kernel in kernels:
        if kernel is not None:
            kernel.close()
    if cluster_id is not None:
        with contextlib.suppress(kept.KeptError):
            kept.stop(cluster_id)


def _submit_marked(kernel: Kernel, name: str, seconds: float, marker: Path) -> None:
    """An engine task that waits, appends its name to ``marker`` once, and returns a value."""
    _ok(kernel.run(f"%%sched --on engines --name {name}\nimport time\ntime.sleep({seconds})\n"
                   f"open({str(marker)!r}, 'a').write('{name}\\n')\nprint('{name} printed')\n"
                   f"'value of {name}'"))


def test_a_killed_kernels_work_is_taken_back_and_runs_once(xdg, tmp_path):
    marker = tmp_path / "marker.txt"
    first = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
    second = None
    cluster_id = None
    try:
        cluster_id = _start_kept(first)
        processes = _processes(cluster_id)
        assert len(processes) >= 3  # the controller and its schedulers, two engines
        _submit_marked(first, "slow-a", 8, marker)
        _submit_marked(first, "slow-b", 8, marker)
        _submit_marked(first, "wait-a", 1, marker)  # both engines are busy: these wait
        _submit_marked(first, "wait-b", 1, marker)
        # the journal says what was sent, to which engine, with ipyparallel's request id
        sent = _poll(lambda: kept.read_journal(kept.journal_path(cluster_id)).running,
                     lambda rows: len(rows) == 2)
        assert {run.name for run in sent} == {"slow-a", "slow-b"}
        assert all(run.request and isinstance(run.engine, int) for run in sent)
        assert os.stat(kept.journal_path(cluster_id)).st_mode & 0o777 == 0o600

        first.km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
        first.kc.stop_channels()
        first = None

        rows = kept.listing()
        assert [(r.cluster_id, r.running, sorted(r.tasks)) for r in rows] == [
            (cluster_id, True, ["slow-a", "slow-b"])]
        second = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
        _ok(second.run("%load_ext jupyter_sched\nimport jupyter_sched\n"
                       "sched = jupyter_sched.get_scheduler()"))
        listed = second.run("%sched clusters")
        _ok(listed)
        assert f"{cluster_id}  running · 2 engines · 2 sent and not ended (" in listed.stdout
        assert "started by notebook kept.ipynb · since " in listed.stdout
        slots = "sum(n.slots for n in sched.snapshot(fresh=True).nodes)"
        alone = second.value(slots)  # the kernel's own
        connect = second.run("%sched connect", timeout=120)
        _ok(connect)
        assert "took back 2 tasks an earlier kernel sent to this kept cluster" in connect.stdout
        assert "2 cells were waiting when the kernel stopped: wait-a, wait-b; %sched restore " \
               "NAME ... (or --all) submits them again" in connect.stdout
        lines = " ".join(connect.texts())
        assert "slow-a" in lines and "slow-b" in lines
        # their values come back here, what they printed too; each ran once
        values = second.value("sorted(h.result(timeout=60) for h in jupyter_sched.reattached())")
        assert values == ["value of slow-a", "value of slow-b"]
        assert sorted(marker.read_text().splitlines()) == ["slow-a", "slow-b"]
        assert kept.listing()[0].tasks == ()
        assert second.value("sorted(h.name for h in jupyter_sched.reattached())") == [
            "slow-a", "slow-b"]
        shown = second.run("%sched result slow-a")
        _ok(shown)
        assert "value of slow-a" in " ".join(shown.texts()) + shown.stdout
        assert "slow-a printed" in second.run("%sched log slow-a").stdout
        # the journal says they ended: no later kernel takes them back again
        assert kept.read_journal(kept.journal_path(cluster_id)).running == []
        # the waiting cells run only when asked, once, with their options
        assert "wait-a" not in marker.read_text()
        bad = second.run("%sched restore nope")
        assert "UsageError: 'nope' was not waiting; those waiting: wait-a, wait-b" in bad.stderr
        _ok(second.run("%sched restore wait-a"))  # by name: that one only
        assert "1 cell was waiting when the kernel stopped: wait-b" in second.run(
            "%sched restore").stdout
        _ok(second.run("%sched restore --all"))
        for name in ("wait-a", "wait-b"):
            assert second.value(f"sched.task({name!r}).result(timeout=60)") == f"value of {name}"
        assert second.run("%sched restore").stdout.startswith("no cell was waiting for kept ")
        # the engines, free again, serve the new kernel's cells, whose sends are journaled
        _poll(lambda: second.value(slots), lambda n: n == alone + 2, timeout=60, every=0.5)
        run = second.run("%%sched --on engines --wait --out e\n21 * 2", timeout=120)
        _ok(run)
        assert second.value("e.result()") == 42
        journaled = Path(kept.journal_path(cluster_id)).read_bytes()  # (struck: it ended)
        assert journaled.count(b'#"k":"sent"') >= 1, journaled
        assert sorted(marker.read_text().splitlines()) == ["slow-a", "slow-b", "wait-a",
                                                            "wait-b"]

        stopped = second.run(f"%sched stop --cluster {cluster_id}", timeout=120)
        _ok(stopped)
        assert stopped.stdout.strip() == f"stopped kept cluster {cluster_id}"
        assert_gone(processes, timeout=30)
        assert kept.listing() == []
        assert not Path(kept.journal_path(cluster_id)).exists()
        cluster_id = None
    finally:
        _end(cluster_id, first, second)


def test_work_that_ended_while_no_kernel_was_there_comes_back_after_a_restart(xdg, tmp_path):
    marker = tmp_path / "marker.txt"
    kernel = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
    cluster_id = None
    try:
        cluster_id = _start_kept(kernel, engines=1)
        processes = _processes(cluster_id)
        _submit_marked(kernel, "quick", 2, marker)
        _poll(lambda: kept.read_journal(kept.journal_path(cluster_id)).running,
              lambda rows: len(rows) == 1)
        kernel.km.restart_kernel(now=False)  # as the notebook's "Restart Kernel"
        kernel.kc.wait_for_ready(timeout=60)
        assert [(r.cluster_id, r.running) for r in kept.listing()] == [(cluster_id, True)]
        assert all(_alive(pid) for pid in processes)
        _poll(lambda: marker.read_text() if marker.exists() else "", lambda t: t == "quick\n",
              timeout=60)  # it ended while no kernel followed it
        _ok(kernel.run("%load_ext jupyter_sched\nimport jupyter_sched"))
        connect = kernel.run("%sched connect", timeout=120)
        _ok(connect)
        assert "took back 1 task an earlier kernel sent" in connect.stdout
        assert kernel.value("[h.result(timeout=60) for h in jupyter_sched.reattached()]") == [
            "value of quick"]
        assert marker.read_text() == "quick\n"
        # %sched stop stops a kept cluster connected to as well: it is the user's
        stopped = kernel.run("%sched stop", timeout=120)
        _ok(stopped)
        assert f"stopped kept cluster {cluster_id}" in stopped.stdout
        assert_gone(processes, timeout=30)
        assert kept.listing() == []
        cluster_id = None
    finally:
        _end(cluster_id, kernel)


def test_a_line_from_before_a_restart_says_so_then_how_its_task_ended(xdg):
    """The old kernel's last word on a %%sched line, and the line the new kernel updates once
    it took the task back: done, its request and its whole time (from its real start)."""
    kernel = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
    cluster_id = None
    try:
        cluster_id = _start_kept(kernel, engines=1)
        cell = kernel.run("%%sched --on engines --cpus 1 --name nap\nimport time\n"
                          "time.sleep(4)\n'rested'")
        _ok(cell)
        line = cell.displays[0]["transient"]["display_id"]
        _poll(lambda: kept.read_journal(kept.journal_path(cluster_id)).running,
              lambda rows: len(rows) == 1)
        kernel.km.restart_kernel(now=False)
        while kernel._pump(1.0) is not None:  # (the old kernel's last words, before
            pass                               # wait_for_ready drops what is unread)
        kernel.kc.wait_for_ready(timeout=60)
        _ok(kernel.run("%load_ext jupyter_sched", timeout=60))
        last = [u["data"] for u in cell.updates if u["transient"]["display_id"] == line][-1]
        assert last["text/plain"].endswith(RESTARTED), last["text/plain"]
        assert "time" not in last[MIME] and last[MIME]["task"]["state"] == "running"
        _ok(kernel.run("%sched connect", timeout=120))
        waited = kernel.run("%sched wait nap", timeout=60)
        _ok(waited)
        done = [u["data"] for u in waited.updates if u["transient"]["display_id"] == line][-1]
        task = done[MIME]["task"]
        assert task["state"] == "done" and task["demand"] == {"CPU": 1}, task
        assert task["ended"] - task["started"] >= 4, task
        assert "nap: done on kept-" in done["text/plain"]
        _ok(kernel.run("%sched stop", timeout=120))
        cluster_id = None
    finally:
        _end(cluster_id, kernel)


def test_a_gangs_members_are_taken_back_each_with_its_own_value(xdg, tmp_path):
    marker = tmp_path / "ranks.txt"
    first = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
    second = None
    cluster_id = None
    try:
        cluster_id = _start_kept(first)
        _ok(first.run("%%sched --on engines --gang pair:2\nimport os, time\ntime.sleep(4)\n"
                      f"open({str(marker)!r}, 'a').write(os.environ['RANK'] + '\\n')\n"
                      "int(os.environ['RANK']) * 10"))
        _poll(lambda: kept.read_journal(kept.journal_path(cluster_id)).running,
              lambda rows: len(rows) == 2)
        first.km.shutdown_kernel(now=True)  # SIGKILL
        first.kc.stop_channels()
        first = None
        second = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
        _ok(second.run("%load_ext jupyter_sched\nimport jupyter_sched"))
        connect = second.run("%sched connect", timeout=120)
        _ok(connect)
        assert "took back 2 tasks" in connect.stdout
        values = second.value(
            "sorted((h.name, h.result(timeout=60)) for h in jupyter_sched.reattached())")
        assert values == [("pair-0", 0), ("pair-1", 10)]
        assert sorted(marker.read_text().split()) == ["0", "1"]  # each rank ran once
        _ok(second.run("%sched stop", timeout=120))
        cluster_id = None
    finally:
        _end(cluster_id, first, second)


def test_a_request_the_controller_never_got_is_said_so_and_not_run(xdg):
    """A journal that names a request the controller has no record of (lost on its way, or a
    controller that lost its records): taking it back ends it, failed, with that said in
    words, and it is not run."""
    first = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
    second = None
    cluster_id = None
    try:
        cluster_id = _start_kept(first, engines=1)
        first.km.shutdown_kernel(now=True)  # SIGKILL
        first.kc.stop_channels()
        first = None
        journal = kept.Journal(kept.journal_path(cluster_id))
        journal.append(kept.Sent("gone.1/t1#1", "ghost", 0, "00000000-never-received_1_1"))
        journal.close()
        second = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
        _ok(second.run("%load_ext jupyter_sched\nimport jupyter_sched"))
        connect = second.run("%sched connect", timeout=120)
        _ok(connect)
        assert "took back 1 task" in connect.stdout
        run = second.run("[h] = jupyter_sched.reattached()\nh.result(timeout=60)")
        assert run.error is not None and run.error["ename"] == "RuntimeError", run.error
        assert run.error["evalue"] == (
            f"kept cluster {cluster_id}'s controller has no record of ghost's request: it never "
            "reached the controller (the kernel that sent it ended first) or the controller "
            "has lost its records; whether it ran is not known, and it is not run again")
        assert second.value("h.state") == "failed"
        assert kept.read_journal(kept.journal_path(cluster_id)).running == []
        _ok(second.run("%sched stop", timeout=120))
        cluster_id = None
    finally:
        _end(cluster_id, first, second)


def test_a_kept_clusters_task_holds_its_gpu_while_no_kernel_is_there(xdg, tmp_path):
    """The lease of a task on an engine of this host is the engine's: the kernel that sent it
    dies, and another notebook's kernel asking for that GPU waits, told who holds it, until
    the task ends; never both at once."""
    times = tmp_path / "times.txt"
    first = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb")
    other = None
    cluster_id = None
    stamp = "open({path!r}, 'a').write(f'{what} {{time.time()}}\\n')"
    try:
        _ok(first.run("%load_ext jupyter_sched\n%sched local --gpus 1", timeout=60))
        _ok(first.run("%sched start --engines 1 --keep", timeout=180))
        cluster_id = kept.listing()[0].cluster_id
        _ok(first.run("%%sched --on engines --gpus 1 --name hold\nimport time\n"
                      + stamp.format(path=str(times), what="hold-start") + "\ntime.sleep(8)\n"
                      + stamp.format(path=str(times), what="hold-end")))
        _poll(lambda: times.read_text() if times.exists() else "", lambda t: "hold-start" in t)
        first.km.shutdown_kernel(now=True)  # SIGKILL
        first.kc.stop_channels()
        first = None

        other = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="other.ipynb")
        _ok(other.run("%load_ext jupyter_sched\n%sched local --gpus 1\nimport jupyter_sched\n"
                      "sched = jupyter_sched.get_scheduler()"))
        _ok(other.run("%%sched --gpus 1 --name mine --out mine\nimport time\n"
                      + stamp.format(path=str(times), what="mine-start")))
        if "hold-end" not in times.read_text():  # (still running: mine waits, told for whom)
            queue = other.run("%sched queue")
            _ok(queue)
            text = " ".join(queue.texts())
            assert "mine" in text and "engine for notebook kept.ipynb" in text, text
        other.run("mine.result(timeout=60)", timeout=90)
        stamps = dict(line.split() for line in times.read_text().splitlines())
        assert set(stamps) == {"hold-start", "hold-end", "mine-start"}
        assert float(stamps["mine-start"]) >= float(stamps["hold-end"])
        _ok(other.run(f"%sched stop --cluster {cluster_id}", timeout=120))
        cluster_id = None
    finally:
        _end(cluster_id, first, other)


def test_the_restart_safe_notebook_with_a_real_restart(xdg):
    """notebooks/restart-safe.ipynb as a user runs it: its cells in a real kernel, with a real
    restart where the notebook says to restart (the cell that stands in for one is skipped)."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "restart-safe.ipynb",
                       as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    stand_in = [k for k, source in enumerate(cells) if "get_scheduler().shutdown()" in source]
    assert len(stand_in) == 1
    kernel = Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="notebooks/restart-safe.ipynb")
    said: dict[str, str] = {}
    try:
        for k, source in enumerate(cells):
            if k == stand_in[0]:
                kernel.km.restart_kernel(now=False)
                kernel.kc.wait_for_ready(timeout=60)
                continue
            run = kernel.run(source, timeout=180)
            _ok(run)
            said[source] = run.stdout + "\n".join(run.texts())
        assert kept.listing() == []  # its last cell stopped the cluster
    finally:
        kernel.close()
        for row in kept.listing():
            with contextlib.suppress(kept.KeptError):
                kept.stop(row.cluster_id)
    text = "\n".join(said.values())
    assert "took back 2 tasks an earlier kernel sent to this kept cluster" in text
    assert "1 cell was waiting when the kernel stopped: report" in text
    assert "{'train': 0.125, 'sweep': {'lr': 0.01, 'loss': 0.118}}" in text
    assert "'report: a GPU was free again'" in text
    assert "started by notebook restart-safe.ipynb" in text
    assert said["loss"].strip() == "0.125"  # pulled from the engine: %sched result --pull
    assert "pulled loss" in text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- bad input and hostile files (no cluster needed) ---------------------------------------------


def test_unknown_and_malformed_ids_are_one_line_errors(xdg):
    with pytest.raises(kept.KeptError, match=r"^no kept cluster 'nope' of yours on this host; "
                       r"%sched clusters lists them$"):
        kept.stop("nope")
    for bad in ("../x", "", "a" * 200, "x y", None, 3):
        with pytest.raises(kept.KeptError, match="is not a cluster id: ids are letters"):
            kept.stop(bad)
    long = "a" * 200
    with pytest.raises(kept.KeptError) as caught:
        kept.check_id(long)
    assert len(str(caught.value)) < 200  # the value is cut, not echoed whole


def test_damaged_records_and_journals_are_said_and_change_nothing(xdg):
    folder = kept.folder()
    (folder / "kept-1700000000-abcd.json").write_text("{not json")
    os.chmod(folder / "kept-1700000000-abcd.json", 0o600)
    record = kept.KeptCluster("1700000001-wxyz", "/nonexistent/cluster.json", "a.ipynb",
                              os.getpid(), time.time(), "local", 2)
    record.save()
    journal = kept.Journal(kept.journal_path(record.cluster_id))
    journal.append(kept.Sent("s.1/t1#1", "one", 0, "r1"))
    journal.close()
    with open(kept.journal_path(record.cluster_id), "ab") as f:
        f.write(b'{"k":"sent","id":"t2","na')  # cut short by a crash
    rows = {r.cluster_id: r for r in kept.listing()}
    damaged = rows["1700000000-abcd"]
    assert not damaged.running and "its record" in damaged.problem and "damaged" in \
        damaged.problem
    good = rows["1700000001-wxyz"]
    assert not good.running and good.tasks == ("one",)
    assert good.problem == "1 line of its journal could not be read"
    text = listing_text(list(rows.values()))
    assert "1700000001-wxyz  not running · 2 engines · 1 sent and not ended (one)" in text
    # a kept cluster whose controller is gone: connecting to it says so in one line
    from jupyter_sched import Scheduler

    sched = Scheduler(local_resources="GPU=1")
    try:
        with pytest.raises(ValueError, match=r"^kept cluster '1700000001-wxyz' is not running "
                           r"any more \(its controller is gone\); %sched stop --cluster "
                           r"1700000001-wxyz ends what is left of it$"):
            sched.connect(cluster_id="1700000001-wxyz", timeout=5)
    finally:
        sched.shutdown()
    # stopping what is left: files go, nothing else is touched
    assert kept.stop("1700000000-abcd") == []
    assert kept.stop("1700000001-wxyz") == []
    assert kept.listing() == []


def test_a_link_or_a_file_open_to_others_is_refused(xdg, tmp_path):
    folder = kept.folder()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"cluster_id": "1700000002-link", "cluster_file": "",
                                     "notebook": "", "kernel_pid": 1, "since": 0.0}))
    os.symlink(elsewhere, folder / "kept-1700000002-link.json")
    (folder / "kept-1700000003-open.json").write_text("{}")
    os.chmod(folder / "kept-1700000003-open.json", 0o666)
    rows = {r.cluster_id: r for r in kept.listing()}
    assert "refused" in rows["1700000002-link"].problem
    assert "refused" in rows["1700000003-open"].problem
    os.symlink(elsewhere, folder / "kept-1700000004-jour.journal")
    with pytest.raises(PermissionError, match="is a link"):
        kept.Journal(folder / "kept-1700000004-jour.journal")
    assert json.loads(elsewhere.read_text())["cluster_id"] == "1700000002-link"  # untouched


def test_the_keep_clusters_setting_keeps_what_start_cluster_starts(xdg):
    import jupyter_sched
    from jupyter_sched import Scheduler

    sched = Scheduler(local_resources="GPU=1", keep_clusters=True)
    try:
        executor = sched.start_cluster(engines=1)
        rows = jupyter_sched.kept_clusters()
        assert [(r.cluster_id, r.running, r.engines) for r in rows] == [
            (executor.kept_id, True, 1)]
        assert sched.submit(code="6 * 7", target="engines").result(timeout=60) == 42
        processes = _processes(executor.kept_id)
        stopped = sched.stop_cluster()
        assert [(s.name, s.kept, s.started_here, s.ended) for s in stopped] == [
            (executor.kept_id, True, True, True)]
        assert stopped[0].text() == (f"stopped kept cluster {executor.kept_id}: its engines "
                                     "and controller have ended")
        assert_gone(processes, timeout=30)
        assert jupyter_sched.kept_clusters() == []
        # keep=False for one start overrides the setting: an ordinary cluster, not listed
        sched.start_cluster(engines=1, keep=False)
        assert jupyter_sched.kept_clusters() == []
    finally:
        sched.shutdown()


def test_one_kept_cluster_is_in_use_at_a_time():
    from types import SimpleNamespace

    from jupyter_sched.runtime.kept import KeptWork

    work = KeptWork(lambda: None, lambda *a, **k: None, lambda executor: None)
    work.check_free("1700000000-aaaa")  # (none in use: any may come)
    work.started(SimpleNamespace(kept_id="1700000000-aaaa", journal=None))
    work.check_free("1700000000-aaaa")  # (the same one: its executor says it is in use)
    for other in ("1700000000-bbbb", None):
        with pytest.raises(kept.KeptError, match=r"^kept cluster 1700000000-aaaa is in use here "
                           r"already \(one at a time\); %sched stop \(stop_cluster\(\)\) "
                           r"stops it, or %sched stop --cluster 1700000000-aaaa"):
            work.check_free(other)


def test_keep_takes_only_true_or_false():
    from jupyter_sched import Scheduler

    sched = Scheduler(local_resources="GPU=1")
    try:
        with pytest.raises(TypeError, match=r"keep='yes': give True or False"):
            sched.start_cluster(engines=1, keep="yes")
        assert sched.state == "new"  # nothing was started
    finally:
        sched.shutdown()


# -- another user --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mallory():
    from test_host_trust import RealUsers, why_no_real_users

    reason = why_no_real_users()
    if reason:
        pytest.skip(reason)
    users = RealUsers()
    try:
        users.mallory = users.user("mallory")
        yield users
    finally:
        users.close()


def test_another_users_kept_files_and_processes_are_never_taken_for_ours(xdg, mallory):
    """Files of another real user in this user's private directory (left there by a mistake,
    or by root) are refused, and the processes they name are never signalled; another user's
    cluster, named by its id, is not found among this user's."""
    import psutil

    pid = int(mallory.sh(mallory.mallory, "sleep 120 >/dev/null 2>&1 & echo $!"))
    try:
        folder = kept.folder()
        cluster_id = "1700000005-mall"
        book = folder / f"kept-{cluster_id}.processes.json"
        book.write_text(json.dumps({"since": 0.0, "sessions": [],
                                    "known": [[pid, psutil.Process(pid).create_time()]]}))
        record = folder / f"kept-{cluster_id}.json"
        record.write_text(json.dumps({"cluster_id": cluster_id, "cluster_file": "",
                                      "notebook": "hers.ipynb", "kernel_pid": pid,
                                      "since": time.time()}))
        for path in (book, record):
            path.chmod(0o600)
            os.chown(path, mallory.mallory.uid, -1)
        rows = kept.listing()
        assert [(r.cluster_id, r.running) for r in rows] == [(cluster_id, False)]
        assert "its record is refused" in rows[0].problem
        with pytest.raises(kept.KeptError, match="its record is refused"):
            kept.KeptCluster.load(cluster_id)
        assert kept.stop(cluster_id) == []  # her book names nothing to signal
        assert psutil.Process(pid).is_running() and \
            psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert kept.listing() == []  # (what was in this user's directory is gone)
        # her cluster, by its id: not one of this user's kept clusters, and said in one line
        from jupyter_sched import Scheduler

        sched = Scheduler(local_resources="GPU=1")
        try:
            with pytest.raises(ValueError, match=r"^no cluster '1700000006-hers' is running"):
                sched.connect(cluster_id="1700000006-hers", timeout=5)
        finally:
            sched.shutdown()
    finally:
        os.kill(pid, 9)
