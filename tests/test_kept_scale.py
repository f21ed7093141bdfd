"""A kept cluster's journal at scale, through real kernels: ``%sched connect`` over a journal of
a million entries takes back the live ones, each run once, within 100 MB, and a line of a
gigabyte is skipped with a notice naming what was lost, the kernel's memory unmoved. How long
the connect takes (the goal: under a second) is benchmarks/take_back.py's to measure: a wall
clock in a test measures the machine's other work too.

Each test's kept-cluster files go to a private directory of its own (``xdg``)."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

import psutil
import pytest

from jupyter_sched.executors.ipp import kept
from jupyter_sched.testing import ended_work

pytest.importorskip("ipyparallel")
pytest.importorskip("jupyter_client")

from kernel_client import Kernel
from test_kept_clusters import _ok, _poll, _start_kept, _submit_marked

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ENTRIES = 1_000_000
MEMORY = 100 * 2**20  # the bound on the kernel's growth for %sched connect over ENTRIES


class Peak:
    """The highest resident memory of process ``pid`` while it is watched (every 2 ms)."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.base = self.peak = self.process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def growth(self) -> int:
        self._done.set()
        self._thread.join()
        return max(self.peak, self.process.memory_info().rss) - self.base


def _kill(kernel: Kernel) -> None:
    kernel.km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
    kernel.kc.stop_channels()


def _connect_measured(kernel: Kernel) -> tuple[object, float, int]:
    """``%sched connect`` in ``kernel``: (its run, its seconds as the kernel timed it, the
    growth of the kernel's resident memory meanwhile)."""
    _ok(kernel.run("%load_ext jupyter_sched\nimport os, time, jupyter_sched, ipyparallel\n"
                   "jupyter_sched.get_scheduler().snapshot(fresh=True)"))
    peak = Peak(kernel.value("os.getpid()"))
    run = kernel.run("began = time.perf_counter()\n%sched connect\n"
                     "print(f'connect took {time.perf_counter() - began:.3f} s')", timeout=120)
    grown = peak.growth()
    _ok(run)
    took = float(re.search(r"connect took ([0-9.]+) s", run.stdout).group(1))
    return run, took, grown


@pytest.fixture
def kernels(xdg):
    """Real kernels of one notebook (``kernels()`` starts one); at the end, closed, and every
    kept cluster they left stopped."""
    made: list[Kernel] = []

    def start() -> Kernel:
        made.append(Kernel(XDG_RUNTIME_DIR=xdg, JPY_SESSION_NAME="kept.ipynb"))
        return made[-1]

    yield start
    for kernel in made:
        with contextlib.suppress(Exception):  # (one killed already)
            kernel.close()
    for row in kept.listing():
        with contextlib.suppress(kept.KeptError):
            kept.stop(row.cluster_id)


def test_connect_over_a_million_entries_takes_back_the_live_ones_in_bounded_memory(kernels,
                                                                                  tmp_path):
    marker = tmp_path / "marker.txt"
    first = kernels()
    cluster_id = _start_kept(first)
    _submit_marked(first, "slow-a", 8, marker)
    _submit_marked(first, "slow-b", 8, marker)
    _submit_marked(first, "wait-c", 1, marker)  # both engines are busy: it waits
    _poll(lambda: kept.read_journal(kept.journal_path(cluster_id)).running,
          lambda runs: len(runs) == 2)
    _kill(first)
    path = Path(kept.journal_path(cluster_id))
    live = path.read_bytes()  # the killed kernel's lines, put amid a million that ended
    filler = ENTRIES - live.count(b"\n")
    with open(path, "wb") as f:
        for k, line in enumerate(ended_work(filler)):
            f.write(line)
            if k == filler // 2:
                f.write(live)
    assert path.read_bytes().count(b"\n") == ENTRIES

    second = kernels()
    run, took, grown = _connect_measured(second)
    assert "took back 2 tasks an earlier kernel sent to this kept cluster" in run.stdout
    assert "1 cell was waiting when the kernel stopped: wait-c" in run.stdout
    print(f"%sched connect over {ENTRIES:,} entries: {took:.3f} s, {grown / 2**20:.1f} MB")
    assert grown < MEMORY, grown
    values = second.value("sorted(h.result(timeout=60) for h in jupyter_sched.reattached())")
    assert values == ["value of slow-a", "value of slow-b"]
    assert sorted(marker.read_text().split()) == ["slow-a", "slow-b"]  # each ran once
    assert path.stat().st_size < 10_000  # (left compacted: what ended is gone)
    assert kept.read_journal(path).running == []
    _ok(second.run("%sched stop", timeout=120))
    assert kept.listing() == []


def test_a_journal_line_of_a_gigabyte_is_skipped_in_words_and_memory_stays_flat(kernels):
    first = kernels()
    cluster_id = _start_kept(first, engines=1)
    _kill(first)
    path = Path(kept.journal_path(cluster_id))
    huge = kept.Queued("old.1/t9", "enormous", "--name enormous", "x").encode(0)[:-3]
    with open(path, "r+b") as f:  # (not "ab": appending writes ignore the seek below)
        f.seek(0, os.SEEK_END)
        f.write(huge)
        f.seek((1 << 30) - 2, os.SEEK_CUR)  # (a hole: the test needs no GiB of disk)
        f.write(b'"}\n')
        f.write(kept.Queued("old.1/t10", "small", "--name small", "'small'").encode(0))
    second = kernels()
    run, _, grown = _connect_measured(second)
    assert (f"jupyter_sched: the journal of kept cluster {cluster_id}: a cell queued (name "
            "'enormous', id 'old.1/t9') was skipped: its line of 1.0 GiB is longer than the "
            "1.0 MiB an entry may be; %sched restore cannot offer it") in run.stderr
    assert "1 cell was waiting when the kernel stopped: small" in run.stdout
    assert grown < MEMORY, grown
    assert path.stat().st_size < 10_000  # (the line is gone with the compaction)
