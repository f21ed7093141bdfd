"""Whatever a started cluster runs is stopped, down to the last child process, also when a
parent died first: the controller's main process SIGKILLed, then ``stop_cluster()``, a kernel
closing, or a kernel killed (the reaper's part)."""

from __future__ import annotations

import json
import os
import signal
import stat
import time

import psutil
import pytest
from conftest_ipp import ROOT, TESTS, assert_gone, engines_can_import_this_checkout, process_tree

from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def live(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def wait_for_tree(root: int, at_least: int, timeout: float = 30) -> list[int]:
    """The processes under ``root`` once there are ``at_least`` of them (they start a while)."""
    deadline = time.monotonic() + timeout
    while True:
        tree = process_tree(root)
        if len(tree) >= at_least or time.monotonic() > deadline:
            return tree
        time.sleep(0.1)


def controller_of(tree: list[int]) -> int:
    """The controller's main process: the one of ``ipyparallel.controller`` whose parent is not
    one too."""
    procs = {p: psutil.Process(p) for p in tree}
    controllers = {p for p, proc in procs.items()
                   if "ipyparallel.controller" in " ".join(proc.cmdline())}
    (main,) = [p for p in controllers if procs[p].ppid() not in controllers]
    return main


def test_stop_after_the_controller_was_killed_leaves_no_process():
    sched = Scheduler(local_resources="GPU=2")
    before = set(process_tree(os.getpid()))
    try:
        with engines_can_import_this_checkout():
            executor = sched.start_cluster(engines=2)
        started = [p for p in wait_for_tree(os.getpid(), len(before) + 14) if p not in before]
        assert len(started) >= 14, started  # controller + 8, 2 engines + 2 nannies, the reaper
        recorded = {pid for pid, _ in executor.processes()}
        assert set(started) - recorded <= {executor._cluster.reaper.pid}
        main = controller_of(started)
        os.kill(main, signal.SIGKILL)
        time.sleep(1)
        assert len(live(started)) >= 12  # its schedulers, orphaned, live on
        sched.stop_cluster()
        assert_gone(started, timeout=20)
    finally:
        sched.shutdown()


def kernel_with_a_cluster():
    from kernel_client import Kernel

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, str(TESTS), old]))
    try:
        kernel = Kernel()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    run = kernel.run("%load_ext jupyter_sched\n%sched start --engines 1\nimport os", timeout=180)
    assert run.error is None and not run.stderr.strip(), (run.error, run.stderr)
    pid = kernel.km.provisioner.process.pid
    tree = wait_for_tree(pid, 12)
    assert len(tree) >= 12, tree  # controller + 8, an engine and its nanny, the reaper
    return kernel, pid, tree


@pytest.mark.parametrize("how", ["shut down", "killed"])
def test_a_kernel_that_ends_after_its_controller_was_killed_leaves_no_process(how):
    pytest.importorskip("jupyter_client")
    kernel, pid, tree = kernel_with_a_cluster()
    try:
        os.kill(controller_of(tree), signal.SIGKILL)
        time.sleep(1)
        if how == "killed":  # the reaper's part
            os.kill(pid, signal.SIGKILL)
        else:
            kernel.kc.stop_channels()
            kernel.km.shutdown_kernel(now=False)
        assert_gone([pid, *tree], timeout=40)
    finally:
        if kernel.km.is_alive():
            kernel.close()
        for p in live(tree):  # never leave them to the next test
            os.kill(p, signal.SIGKILL)


def test_the_clusters_process_book_is_a_private_file_and_goes_with_the_cluster():
    from jupyter_core.paths import jupyter_runtime_dir

    from jupyter_sched.host.files import private_dir, read_private

    sched = Scheduler(local_resources="GPU=1")
    try:
        with engines_can_import_this_checkout():
            executor = sched.start_cluster(engines=1)
        book = executor._cluster.book.path
        mine = private_dir(runtime_dir=jupyter_runtime_dir())
        assert os.path.dirname(book) == str(mine), book  # not under /tmp
        assert stat.S_IMODE(os.lstat(book).st_mode) == 0o600
        assert os.lstat(os.path.dirname(book)).st_uid == os.getuid()
        recorded = {pid for pid, _ in json.loads(read_private(book))["known"]}
        assert recorded == {pid for pid, _ in executor.processes()} and recorded
        sched.stop_cluster()
        assert not os.path.exists(book)
    finally:
        sched.shutdown()
