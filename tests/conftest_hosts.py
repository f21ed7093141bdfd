"""An ipyparallel cluster whose engines run on namespace hosts (tests/hosts.py), the scheduler
of a kernel that uses it, and what tasks run on such engines (imported by
tests/test_multihost.py and tests/test_slurm.py).

The controller runs here, in the kernel's namespace, listening on every interface; engines find
it at the hosts' gateway address (``controller_location``), the way engines on a real cluster
find a controller on a login node. Engines are started through ipyparallel's local launcher with
a command that enters their host (``engine_cmd``), so their launcher reports their exit as it
does for any engine. Engines lease GPUs in a ledger directory of the cluster's own
(``$JUPYTER_SCHED_LEASES``), so that test runs side by side, whose hosts have the same names,
never share a ledger. The controller checks its engines' heartbeat every second and lets an
engine miss three before it drops it, so that a cut host is noticed in seconds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from conftest_ipp import engines_can_import_this_checkout
from hosts import Host, Network
from waiting import wait_for

from jupyter_sched.executors.ipp.cluster import ClusterControl
from jupyter_sched.runtime.scheduler import Scheduler

HEARTBEAT = ["--HeartMonitor.period=1000", "--HeartMonitor.max_heartmonitor_misses=3"]
ENGINE = [sys.executable, "-m", "ipyparallel.engine"]


# -- what tasks run (engines import this module) --------------------------------------------------

GANG = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def where() -> dict:
    """The host a task runs on, as the task sees it."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            **{k: os.environ.get(k) for k in (*GANG, "CUDA_VISIBLE_DEVICES")}}


def rendezvous() -> dict:
    """Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank connects and they swap
    their host names."""
    me = where()
    addr, port, rank = me["MASTER_ADDR"], int(me["MASTER_PORT"]), int(me["RANK"])
    if rank == 0:
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((addr, port))
            server.listen()
            server.settimeout(30)
            peers = []
            for _ in range(int(me["WORLD_SIZE"]) - 1):
                conn, _ = server.accept()
                with conn:
                    peers.append(conn.recv(64).decode())
                    conn.sendall(me["host"].encode())
        return {**me, "peers": peers}
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        conn.sendall(me["host"].encode())
        return {**me, "peers": [conn.recv(64).decode()]}


# -- a cluster on the hosts -----------------------------------------------------------------------


def engine_command(host: Host) -> list[str]:
    """An ipyparallel engine, run on ``host``: with this process's environment (the local
    launcher's way), less the GPUs this process may use, which are not that host's."""
    return host.command(["env", "-u", "CUDA_VISIBLE_DEVICES", *ENGINE])


@dataclass
class HostCluster:
    """A controller here, engines on namespace hosts, and a scheduler using them."""

    net: Network
    control: ClusterControl
    client: object
    sched: Scheduler
    executor: object = None
    ledgers: str = ""  # the directory of the hosts' lease ledgers (one file per host name)

    def start_engines(self, host: Host, n: int, env: Mapping[str, str] | None = None,
                      wait: bool = True) -> None:
        """Start ``n`` more engines on ``host`` and wait until they are slots."""
        before = set(self.client.ids)  # (dead engines stay until the controller drops them)
        env = {"JUPYTER_SCHED_LEASES": f"{self.ledgers}/", **(env or {})}
        self.control.start_engines(n, env, engine_cmd=engine_command(host))
        if wait:
            self.wait_for_engines(before, n)

    def wait_for_engines(self, before: set[int], n: int) -> None:
        """Wait until ``n`` engines not in ``before`` have registered (and, once the scheduler
        uses the cluster, are slots)."""
        # (not client.wait_for_engines: it gives up when any engine set of the cluster has
        # stopped, as one whose engines a test killed has)
        new = wait_for(lambda: len(set(self.client.ids) - before) >= n and
                       set(self.client.ids) - before, 60, f"{n} more engines")
        if self.executor is not None:
            wait_for(lambda: new <= set(self.executor.engines), 30,
                     f"engines {sorted(new)} to become slots")

    def nodes(self) -> dict[str, object]:
        return {n.name: n for n in self.sched.snapshot(fresh=True).nodes}

    def slots(self, node: str) -> int:
        view = self.nodes().get(node)
        return 0 if view is None else view.slots


@contextlib.contextmanager
def cluster_on_hosts(net: Network, engines: Mapping[str, tuple[int, Mapping[str, str]]],
                     **scheduler: object) -> Iterator[HostCluster]:
    """Start a controller here and ``engines`` (host name -> (count, environment)) on the
    hosts, connect a scheduler to them; stop everything after and check no engine is left."""
    with engines_can_import_this_checkout():
        control, client = ClusterControl.start(None, {
            "controller_ip": "*", "controller_location": net.gateway,
            "controller_args": list(HEARTBEAT)})
        sched = Scheduler(**{"local_resources": "GPU=0", **scheduler})
        ledgers = net.dir / "ledgers"
        ledgers.mkdir(exist_ok=True)
        cluster = HostCluster(net, control, client, sched, ledgers=str(ledgers))
        try:
            for name, (n, env) in engines.items():  # (they start side by side)
                cluster.start_engines(net[name], n, env, wait=False)
            cluster.wait_for_engines(set(), sum(n for n, _ in engines.values()))
            cluster.executor = sched.connect(control.cluster)
            yield cluster
        finally:
            sched.shutdown()
            control.stop()
            with contextlib.suppress(Exception):
                client.close()
            left = _wait_until_no_process(net)
    assert not left, f"processes left on the hosts after the cluster stopped: {left}"


def _wait_until_no_process(net: Network, timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in net.pids() if not _zombie(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _zombie(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
