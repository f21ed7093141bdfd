"""Provisioned kernels through a real Jupyter server's REST API (tests/lab_server.py, run from
this environment): six kernels at 0.5 on two declared GPUs, four start and two wait with their
place, and each waiting one starts when a kernel is shut down. The kernelspec is written by
``jupyter-sched kernelspec install``. benchmarks/bench_provisioner.py prints the latency."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from lab_server import Install, LabServer
from ledger_peer import Peer
from waiting import wait_for

from jupyter_sched.host.discovery import discover_host
from jupyter_sched.host.ledger import Ledger
from jupyter_sched.host.ledger.where import device_key, ledger_path
from jupyter_sched.model.quantity import SCALE


def start_server(tmp_path: Path, monkeypatch) -> LabServer:
    monkeypatch.setenv("JUPYTER_SCHED_DECLARE", "GPU=2")
    root = tmp_path / "root"
    root.mkdir()
    here = Install(Path(sys.prefix), Path(sys.executable), Path(), "")
    server = LabServer(here, root, tmp_path)
    server.wait_ready()
    done = subprocess.run(["jupyter-sched", "kernelspec", "install", "--gpus", "0.5", "--name",
                           "half", "--user"], env=server.env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return server


def call(server: LabServer, path: str, method: str = "GET", body: object = None) -> object:
    request = urllib.request.Request(
        f"{server.url}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {server.token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


class Starts:
    """Kernels started through ``POST api/kernels``, each in a thread of its own (the request
    answers once the kernel runs: after its wait)."""

    def __init__(self, server: LabServer) -> None:
        self.server = server
        self.ids: dict[int, str] = {}
        self.refused: dict[int, tuple[int, str]] = {}  # k -> (status, message) of a failed start
        self.threads: list[threading.Thread] = []

    def start(self, k: int) -> None:
        def post() -> None:
            try:
                self.ids[k] = call(self.server, "/api/kernels", "POST", {"name": "half"})["id"]
            except urllib.error.HTTPError as err:
                self.refused[k] = (err.code, json.loads(err.read() or b"{}").get("message", ""))

        thread = threading.Thread(target=post, daemon=True)
        thread.start()
        self.threads.append(thread)


def deleted(server: LabServer, kernel: str) -> bool:
    try:
        call(server, f"/api/kernels/{kernel}", "DELETE")
    except urllib.error.HTTPError as err:
        return err.code == 404
    return True


def kernel_pid(server: LabServer, kernel: str) -> int:
    """The pid of the kernel process of ``kernel`` (its connection file names it)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if f"kernel-{kernel}.json".encode() in cmdline:
                return int(entry.name)
    raise AssertionError(f"no process of kernel {kernel}")


def picture(server: LabServer) -> tuple[list, list]:
    files = server.ledger_files()
    if not files:
        return [], []
    with Ledger.to_read(files[0]) as ledger:
        leases, order = ledger.view()
    return leases, order.waits


def run(server: LabServer, starts: Starts) -> dict:
    """Start six kernels one by one (each once the one before holds its lease or waits), shut
    the first two down in turn; what was seen."""
    seen: dict = {}
    for k in range(6):
        starts.start(k)
        wait_for(lambda k=k: sum(map(len, picture(server))) == k + 1, 120,
                 f"kernel {k} holding its lease or waiting", explain=server.output)
    wait_for(lambda: len(starts.ids) == 4, 60, "four kernels running")
    leases, waits = picture(server)
    seen["leases"] = sorted(lease.owner.kernel for lease in leases)
    seen["waits"] = [wait.kernel for wait in waits]
    seen["latency"] = []
    for k in (0, 1):
        before = time.time()
        call(server, f"/api/kernels/{starts.ids[k]}", "DELETE")
        waiter = seen["waits"][k]
        lease = wait_for(lambda w=waiter: next((lease for lease in picture(server)[0]
                                                if lease.owner.kernel == w), None), 60,
                         f"waiting kernel {waiter} holding its lease")
        seen["latency"].append(lease.taken - before)
    for thread in starts.threads:
        thread.join(60)
    return seen


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_six_kernels_at_half_on_two_gpus_four_start_two_wait_then_start_in_order(
        tmp_path, monkeypatch):
    server = start_server(tmp_path, monkeypatch)
    try:
        starts = Starts(server)
        seen = run(server, starts)
        assert sorted(starts.ids) == list(range(6)) and len(set(starts.ids.values())) == 6
        assert seen["leases"] == sorted(starts.ids[k] for k in range(4))
        assert seen["waits"] == [starts.ids[4], starts.ids[5]]  # (their order: when they came)
        log = server.log_path.read_text(errors="replace")
        assert f"kernel {starts.ids[4]}: waiting for a GPU: 1st on this host" in log
        assert f"kernel {starts.ids[5]}: waiting for a GPU: 2nd on this host" in log
        assert sorted(lease.owner.kernel for lease in picture(server)[0]) == \
            sorted(starts.ids[k] for k in range(2, 6))
        assert picture(server)[1] == []
        # kill -9: the lease is given back at once, and the restart the server makes after a
        # crash takes one anew
        crashed = starts.ids[2]
        before = next(lease.id for lease in picture(server)[0] if lease.owner.kernel == crashed)
        os.kill(kernel_pid(server, crashed), signal.SIGKILL)
        wait_for(lambda: any(lease.owner.kernel == crashed and lease.id != before
                             for lease in picture(server)[0]), 60,
                 "the crashed kernel restarted with a lease of its own", explain=server.output)
        assert "ended by itself: its GPU lease is given back" in server.output()
        for k in range(2, 6):  # (a kernel still restarting answers 500: asked again)
            wait_for(lambda k=k: deleted(server, starts.ids[k]), 60, f"kernel {k} shut down")
        assert picture(server) == ([], [])
    finally:
        server.stop()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_shutting_down_a_kernel_waiting_for_its_gpu_cancels_its_wait(tmp_path, monkeypatch):
    server = start_server(tmp_path, monkeypatch)
    host = discover_host()  # (the two GPUs the server declares)
    path = ledger_path("", {"JUPYTER_SCHED_LEASES": f"{server.leases}{os.sep}"})
    peers = [Peer(path, f"other{k}.ipynb") for k in range(2)]
    try:
        held = [peer("take", device_key(gpu, host.key), SCALE, "train")
                for peer, gpu in zip(peers, host.gpus, strict=True)]
        assert all(isinstance(lease, int) for lease in held), held
        starts = Starts(server)
        for k in range(3):  # three kernels wait behind the two holders, in this order
            starts.start(k)
            wait_for(lambda k=k: len(picture(server)[1]) == k + 1, 120,
                     f"kernel {k} waiting", explain=server.output)
        order = [wait.kernel for wait in picture(server)[1]]
        assert len(set(order)) == 3
        waits = call(server, "/api/sched/host")["waits"]  # (this server's, before it lists them)
        assert [(w["kernel"], w["this_server"]) for w in waits] == [(k, True) for k in order]
        call(server, f"/api/kernels/{order[1]}", "DELETE")  # (204: answered at once)
        wait_for(lambda: 1 in starts.refused, 60, "the cancelled start to answer")
        status, message = starts.refused[1]
        assert status == 409 and "was cancelled" in message and order[1] in message, message
        assert "it was shut down while it waited for a GPU" in message, message
        assert [wait.kernel for wait in picture(server)[1]] == [order[0], order[2]]
        assert server.leftover_kernels() == []  # (no kernel process was ever started)
        assert [wait["kernel"] for wait in call(server, "/api/sched/host")["waits"]] == [
            order[0], order[2]]
        peers[0]("give", held[0])  # the two others start, in their order, on the GPU freed
        wait_for(lambda: sorted(starts.ids) == [0, 2], 60, "the two others started")
        assert sorted(lease.owner.kernel for lease in picture(server)[0]
                      if lease.owner.kernel) == sorted([order[0], order[2]])
        for k in (0, 2):
            call(server, f"/api/kernels/{starts.ids[k]}", "DELETE")
        peers[1]("give", held[1])
        assert picture(server) == ([], [])
        for thread in starts.threads:
            thread.join(60)
    finally:
        for peer in peers:
            peer.close()
        server.stop()
