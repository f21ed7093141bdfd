"""Engines on several hosts: two namespace hosts (tests/hosts.py), h1 and h2, each with its own
host name and address, each running two engines that see one declared GPU, and a controller in
this process's namespace, listening on every interface as on a real cluster, that they reach
over their network (tests/conftest_hosts.py).

The tests share one cluster and run in file order; the fault tests come last and leave the
hosts as the next one expects (the kill test starts h2's engines again). Where namespaces
cannot be made (not root, no iproute2) the tests that need them are skipped, saying why.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import hosts
import pytest
import sshd
from conftest_hosts import cluster_on_hosts, rendezvous, where
from waiting import wait_for

from jupyter_sched.notebook.cell_options import parse_on
from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120),
              pytest.mark.shares("hosts")]

H1 = {"JUPYTER_SCHED_DECLARE": "GPU=1,gpu_memory=16GiB"}
H2 = {"JUPYTER_SCHED_DECLARE": "GPU=1,gpu_memory=24GiB"}


@pytest.fixture(scope="module")
def net():
    reason = hosts.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with hosts.network("h1", "h2") as made:
        yield made


@pytest.fixture(scope="module")
def cluster(net):
    with cluster_on_hosts(net, {"h1": (2, H1), "h2": (2, H2)}) as made:
        made.sched.debug.validate = True
        yield made
        assert made.sched.debug.errors == []


# -- what the tasks run (engines import this module) ---------------------------------------------

def hold(directory: str, name: str) -> dict:
    """Say it started (a file named ``name``), then wait for ``name.go``."""
    Path(directory, name).write_text(socket.gethostname())
    deadline = time.monotonic() + 60
    while not Path(directory, f"{name}.go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} was never let go")
        time.sleep(0.02)
    return where()


def first_attempt_hangs(directory: str) -> dict:
    """The first attempt says where it runs and hangs; a retry returns at once."""
    first = Path(directory, "first")
    if not first.exists():
        first.write_text(socket.gethostname())
        time.sleep(120)
    return where()


# -- what an engine says about its host -----------------------------------------------------------


class FakeEngineApp:
    """ipyparallel's engine application, as an engine process has it."""

    registration_url = "tcp://10.1.2.3:51234"

    @classmethod
    def initialized(cls) -> bool:
        return True

    @classmethod
    def instance(cls) -> FakeEngineApp:
        return cls()


def test_an_engine_reports_the_address_it_reached_the_controller_from(monkeypatch):
    from ipyparallel.engine import app

    from jupyter_sched.executors.ipp import engines

    asked = []
    monkeypatch.setattr(engines, "host_address", lambda peer=None: asked.append(peer) or "x")
    assert engines.probe()["address"] == "x"
    assert asked == [None]  # not in an engine, and the kernel knows no address: the hostname's
    monkeypatch.setattr(app, "IPEngine", FakeEngineApp)
    # a controller listening on every interface ("*") gives the kernel no address; the
    # engine's own registration URL says how it reached the controller
    assert engines.registered_with() == "10.1.2.3"
    engines.probe(None)
    engines.probe("127.0.0.1")  # (the kernel's view of a controller on its own host)
    assert asked[1:] == ["10.1.2.3", "10.1.2.3"]
    for url, host in (("tcp://*:5", None), ("tcp://0.0.0.0:5", None), ("tcp://[::1]:5", "::1")):
        monkeypatch.setattr(FakeEngineApp, "registration_url", url)
        assert engines.registered_with() == host


# -- the hosts themselves --------------------------------------------------------------------------


def test_namespace_hosts_are_hosts_and_leave_nothing_behind_when_a_test_fails(net):
    # (net: to skip where namespaces cannot be made)
    made = []
    with pytest.raises(RuntimeError, match="a failing test"), hosts.network("a", "b") as other:
        made = [*other.namespaces, other.uplink, str(other.dir)]
        a, b = other.hosts
        assert a.run(["hostname"]).stdout.strip() == "a"
        assert a.run(["ip", "-4", "-o", "addr", "show", "eth0"]).stdout.split()[3] == \
            f"{a.address}/24"
        assert a.address != b.address and a.address.startswith("10.")
        reach = "import socket,sys; s=socket.socket(); s.settimeout(5); " \
                "print(s.connect_ex((sys.argv[1], 9)))"
        for target in (b.address, other.gateway):  # refused: there, but nothing listens
            assert a.run([sys.executable, "-c", reach, target]).stdout.strip() == "111"
        other.cut(b)
        assert a.run([sys.executable, "-c", reach, b.address]).stdout.strip() != "111"
        sleeper = subprocess.Popen(b.command(["sleep", "60"]))
        wait_for(lambda: b.pids() == [sleeper.pid], 10, "the process to enter host b")
        raise RuntimeError("a failing test")
    assert sleeper.wait(5) == -signal.SIGKILL
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not [n for n in made[:-2] if n in listed]
    assert f" {made[-2]}@" not in links and f" {made[-2]}:" not in links
    assert not Path(made[-1]).exists()


# -- engines through ipyparallel's SSH launcher ----------------------------------------------------


def test_the_profiles_launcher_settings_are_kept():
    import ipyparallel as ipp
    from traitlets.config import Config

    from jupyter_sched.executors.ipp.cluster import configured

    config = Config()
    config.LocalEngineSetLauncher.environment = {"A": "local"}
    config.SSHEngineSetLauncher.environment = {"A": "ssh", "PATH": "/opt/bin"}
    config.SSHEngineSetLauncher.engine_args = ["--IPEngine.use_mpi=False"]
    ssh = ipp.Cluster(engines="ssh", config=config)
    assert configured(ssh, "environment", {}) == {"A": "ssh", "PATH": "/opt/bin"}
    assert configured(ssh, "engine_args", []) == ["--IPEngine.use_mpi=False"]
    assert configured(ipp.Cluster(config=config), "environment", {}) == {"A": "local"}
    assert configured(ipp.Cluster(engines="slurm", config=config), "environment", {}) == {}


class _Loop:
    def run(self, coroutine):
        import asyncio

        return asyncio.run(coroutine)


@pytest.mark.parametrize("config_file", [None, "/elsewhere/jobs.sbatch"])
def test_a_batch_launchers_job_script_is_not_written_in_the_working_directory(
        tmp_path, config_file, monkeypatch):
    """ipyparallel writes a batch job's script in the working directory (a notebook's folder,
    where it would sit among the user's files) unless configured: it goes to the profile's
    log folder, beside the launcher's own output, and a configured place is kept."""
    import ipyparallel as ipp
    from traitlets.config import Config

    from jupyter_sched.executors.ipp.cluster import ClusterControl

    config = Config()
    if config_file:
        config.SlurmEngineSetLauncher.batch_file_name = config_file
    cluster = ipp.Cluster(engines="slurm", config=config, profile_dir=str(tmp_path),
                          cluster_id="abc")
    seen = {}

    async def start_engines(n, environment, **kwargs):
        seen.update(kwargs)
        return "set-1"

    monkeypatch.setattr(cluster, "start_engines", start_engines)
    monkeypatch.chdir(tmp_path)
    control = ClusterControl(cluster, owned=True, loop=_Loop())
    assert control.start_engines(2, {}) == "set-1"
    if config_file:
        assert "batch_file_name" not in seen  # the profile's own setting applies
    else:
        assert seen["batch_file_name"] == str(tmp_path / "log" / "ipengine-abc-0.sbatch")
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".sbatch"]


SSH_CONFIG = """
c.Cluster.controller_ip = "*"
c.Cluster.controller_location = {gateway!r}
c.SSHEngineSetLauncher.engines = {engines!r}
c.SSHLauncher.ssh_args = {args!r}
c.SSHLauncher.scp_args = {args!r}
c.SSHLauncher.remote_python = {python!r}
c.SSHLauncher.remote_profile_dir = {remote!r}
c.SSHEngineSetLauncher.environment = {{"PYTHONPATH": {pythonpath!r}}}
"""


def where_and_what() -> tuple[str, str | None, str]:
    import jupyter_sched

    return socket.gethostname(), os.environ.get("PYTHONPATH"), jupyter_sched.__file__


def test_engines_started_over_ssh_are_nodes(net, tmp_path):
    reason = sshd.unavailable()
    if reason is not None:
        pytest.skip(reason)
    root = str(Path(__file__).resolve().parents[1])
    pythonpath = os.pathsep.join([root, str(Path(__file__).parent)])  # (tasks come from here)
    with sshd.ssh_servers(net.hosts) as args:
        profile = tmp_path / "profile"
        profile.mkdir()
        (profile / "ipcluster_config.py").write_text(SSH_CONFIG.format(
            gateway=net.gateway, engines={h.address: 1 for h in net.hosts}, args=args,
            python=sys.executable, remote=str(tmp_path / "remote"), pythonpath=pythonpath))
        sched = Scheduler(local_resources="GPU=0")
        try:
            sched.start_cluster(engines=2, launcher="ssh", profile_dir=str(profile))
            nodes = {n.name: n.slots for n in sched.snapshot(fresh=True).nodes}
            assert nodes == {"local": 0, "h1": 1, "h2": 1}
            # the environment the profile gives the engines reached them: this checkout's
            # jupyter_sched, not whatever the remote python finds
            host, seen, module = sched.submit(where_and_what, node="h2",
                                                    target="engines").result(timeout=30)
            assert (host, seen) == ("h2", pythonpath) and module.startswith(root)
            sched.stop_cluster()
            assert [n.name for n in sched.snapshot(fresh=True).nodes] == ["local"]
            wait_for(lambda: not [p for p in net.pids() if "ipyparallel" in
                                  " ".join(_cmdline(p))], 15, "the engines to exit")
        finally:
            sched.shutdown()


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


# -- hosts as nodes ---------------------------------------------------------------------------


def test_engines_on_one_host_are_one_node_and_each_host_is_its_own(cluster, net):
    nodes = cluster.nodes()
    assert sorted(nodes) == ["h1", "h2", "local"]
    for name in ("h1", "h2"):
        node = nodes[name]
        assert node.kind == "engines" and node.labels["host"] == name
        assert node.slots == 2
        assert node.total["GPU"] == 1  # two engines see it: counted once
    assert nodes["local"].slots == 0
    engines = cluster.executor.engines.values()
    assert sorted((e.node, e.hostname) for e in engines) == [("h1", "h1")] * 2 + [("h2", "h2")] * 2
    # each engine runs where it says it does
    by_host = {}
    for h in cluster.sched.map(lambda _: where(), range(8), target="engines"):
        seen = h.result(timeout=30)
        by_host.setdefault(h.node, set()).add(seen["host"])
    assert by_host and all(seen == {node} for node, seen in by_host.items())


def test_a_host_gpu_is_counted_once_however_many_engines_see_it(cluster, tmp_path):
    sched = cluster.sched
    a = sched.submit(hold, str(tmp_path), "a", resources={"GPU": 1}, node="h1", target="engines")
    wait_for((tmp_path / "a").exists, 30, "the first GPU task on h1")
    b = sched.submit(hold, str(tmp_path), "b", resources={"GPU": 1}, node="h1", target="engines")
    c = sched.submit(hold, str(tmp_path), "c", resources={"GPU": 1}, target="engines")
    wait_for((tmp_path / "c").exists, 30, "a GPU task on h2")
    assert c.node == "h2" and a.devices == c.devices == {"GPU": {0: 1.0}}
    # c, submitted after b, runs: the steps that placed it had b to place first, and left it
    wait_for(lambda: c.state == "running", 30, "c's start recorded")
    assert b.state == "queued" and not (tmp_path / "b").exists()  # h1's GPU is taken
    for name in ("a", "c"):
        (tmp_path / f"{name}.go").touch()
    wait_for((tmp_path / "b").exists, 30, "the second GPU task on h1 once the first ended")
    (tmp_path / "b.go").touch()
    for h in (a, b, c):
        assert h.result(timeout=30)["CUDA_VISIBLE_DEVICES"] == "0"


# -- gangs across hosts -------------------------------------------------------------------------


def test_a_strict_spread_gang_has_one_member_per_host_meeting_at_rank_0s_address(cluster, net):
    gang = cluster.sched.submit(rendezvous, gang=("ddp", 2), strategy="strict-spread",
                                target="engines")
    rank0, rank1 = gang.result(timeout=60)
    assert {rank0["host"], rank1["host"]} == {"h1", "h2"}
    assert [m.node for m in gang.members] == [rank0["host"], rank1["host"]]
    master = net[rank0["host"]].address
    assert rank0["MASTER_ADDR"] == rank1["MASTER_ADDR"] == master != "127.0.0.1"
    assert rank0["MASTER_PORT"] == rank1["MASTER_PORT"]
    assert (rank0["RANK"], rank1["RANK"]) == ("0", "1")
    assert rank0["LOCAL_RANK"] == rank1["LOCAL_RANK"] == "0"  # each alone on its host
    assert rank0["peers"] == [rank1["host"]] and rank1["peers"] == [rank0["host"]]


def test_a_strict_pack_gang_stays_on_one_host(cluster, net):
    gang = cluster.sched.submit(rendezvous, gang=("ddp", 2), strategy="strict-pack",
                                target="engines")
    rank0, rank1 = gang.result(timeout=60)
    assert rank0["host"] == rank1["host"] == gang.members[0].node == gang.members[1].node
    assert rank0["MASTER_ADDR"] == net[rank0["host"]].address
    assert (rank0["LOCAL_RANK"], rank1["LOCAL_RANK"]) == ("0", "1")
    assert rank0["peers"] == [rank0["host"]]


def test_a_strict_spread_gang_larger_than_the_hosts_waits(cluster):
    gang = cluster.sched.submit(where, gang=("ddp", 3), strategy="strict-spread",
                                target="engines")
    # (placed, or not, in the step that took it: each member says why it waits)
    wait_for(lambda: all(m.reason for m in gang.members), 10, "the members' reasons")
    assert {m.state for m in gang.members} <= {"queued", "infeasible"}
    gang.cancel()
    assert {m.state for m in gang.members} == {"cancelled"}


# -- choosing a host ------------------------------------------------------------------------------


@pytest.mark.parametrize(("on", "host"), [
    (["h2"], "h2"),                         # --on h2: the node
    (["host=h1"], "h1"),                    # --on host=h1: the host label
    (["engines,gpu.memory=24GiB"], "h2"),   # a GPU label
    (["gpu.memory=16GiB", "host=h1"], "h1"),
])
def test_on_chooses_a_host(cluster, on, host):
    placement = parse_on(on)  # what %%sched --on gives submit
    handles = [cluster.sched.submit(where, resources={"GPU": 0.25}, **placement)
               for _ in range(4)]
    assert {h.result(timeout=30)["host"] for h in handles} == {host}
    assert {h.node for h in handles} == {host}


def test_a_selector_no_host_matches_waits_and_says_so(cluster):
    h = cluster.sched.submit(where, labels={"host": "h3"}, target="engines")
    wait_for(lambda: h.reason, 10, "the reason it waits")  # (the step that took it said it)
    assert h.state in ("queued", "infeasible")
    h.cancel()


# -- stopping a task on another host (through the engine's nanny) --------------------------------


def test_stopping_a_task_on_another_host_interrupts_it_there(cluster, tmp_path):
    h = cluster.sched.submit(hold, str(tmp_path), "x", node="h2", target="engines")
    wait_for((tmp_path / "x").exists, 30, "the task to start on h2")
    engine = next(e for e in cluster.executor.engines.values() if e.slot == h.slot)
    t0 = time.monotonic()
    h.cancel()
    wait_for(h.done, 10, "the task to stop")
    assert h.state == "cancelled"
    assert time.monotonic() - t0 < cluster.executor.stop_grace  # interrupted, not killed
    assert engine.eid in cluster.executor.engines  # its engine lives on
    assert cluster.sched.submit(where, node="h2", target="engines").result(timeout=30)


# -- faults ----------------------------------------------------------------------------------------


def test_a_hosts_engines_killed_fail_its_tasks_naming_it_and_the_node_leaves(cluster, net,
                                                                             tmp_path):
    sched = cluster.sched
    gang = sched.submit(hold, str(tmp_path), "gang", gang=("ddp", 2), strategy="strict-spread",
                        target="engines")
    lone = sched.submit(first_attempt_hangs, str(tmp_path), labels={"host": "h2"}, retries=1,
                        target="engines")
    wait_for(lambda: (tmp_path / "first").exists() and (tmp_path / "gang").exists(), 30,
             "the tasks to start")
    member_on_h2 = next(m for m in gang.members if m.node == "h2")
    killed = net.kill(net["h2"])
    assert killed
    with pytest.raises(Exception, match="on host h2"):
        gang.result(timeout=20)
    wait_for(lambda: all(m.done() for m in gang.members), 10, "the whole gang to end")
    assert member_on_h2.state == "failed" and "on host h2" in member_on_h2.reason
    assert "died" in member_on_h2.reason
    (tmp_path / "gang.go").touch()
    wait_for(lambda: "h2" not in cluster.nodes(), 10, "node h2 to leave")
    # the lone task was lost with its engine: its retry waits for a host labelled h2 (the
    # step that took the loss placed it, or said why not)
    wait_for(lambda: lone.state != "running" and lone.reason, 10, "the retry's reason")
    assert lone.state in ("queued", "infeasible")
    # h2 comes back: its engines join as node h2 again, the retry runs there
    cluster.start_engines(net["h2"], 2, H2)
    assert lone.result(timeout=30)["host"] == "h2"
    assert cluster.nodes()["h2"].total["GPU"] == 1


def test_a_hosts_network_cut_fails_its_tasks_naming_it_and_the_node_leaves(cluster, net,
                                                                           tmp_path):
    sched = cluster.sched
    gang = sched.submit(hold, str(tmp_path), "gang", gang=("ddp", 2), strategy="strict-spread",
                        target="engines")
    moved = sched.submit(first_attempt_hangs, str(tmp_path), node="h1", retries=1,
                         target="engines")
    wait_for(lambda: (tmp_path / "first").exists() and (tmp_path / "gang").exists(), 30,
             "the tasks to start")
    t0 = time.monotonic()
    net.cut(net["h1"])
    try:
        with pytest.raises(Exception, match="on host h1"):
            gang.result(timeout=30)
        noticed = time.monotonic() - t0
        wait_for(lambda: all(m.done() for m in gang.members), 10, "the whole gang to end")
        on_h1 = next(m for m in gang.members if m.node == "h1")
        assert on_h1.state == "failed" and "on host h1" in on_h1.reason
        wait_for(lambda: "h1" not in cluster.nodes(), 10, "node h1 to leave")
        assert noticed < 15
        (tmp_path / "gang.go").touch()
        # the task pinned to h1 was lost; its retry waits for h1
        assert moved.state in ("queued", "infeasible"), moved.reason
        moved.cancel()
        assert sched.submit(where, target="engines").result(timeout=30)["host"] == "h2"
    finally:
        net.plug(net["h1"])
        net.kill(net["h1"])  # its engines were dropped: they are of no use any more
