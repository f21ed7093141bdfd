"""Engines through Slurm: a real Slurm cluster (tests/slurm.py) whose two compute nodes, sn1
and sn2, are namespace hosts (tests/hosts.py) with one GPU each as a generic resource. The
scheduler starts engines with ipyparallel's own Slurm launcher (``start_cluster(engines=2,
launcher="slurm")``, and ``%sched start --engines 2 --launcher slurm`` in notebooks/slurm.ipynb)
configured the way a site configures it: an ipyparallel profile whose ``ipcluster_config.py``
makes the controller listen where compute nodes reach it and asks Slurm for a GPU per node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import hosts
import psutil
import pytest
import slurm
from conftest_hosts import rendezvous, where
from conftest_ipp import engines_can_import_this_checkout
from waiting import wait_for

from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240),
              pytest.mark.shares("hosts")]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

IPCLUSTER_CONFIG = '''\
# Engines run on Slurm's compute nodes: the controller listens on every interface and tells
# the engines the address they reach this host at.
c.Cluster.controller_ip = "*"
c.Cluster.controller_location = {location!r}
# A node lost with its engines (a job cancelled, a node down) is noticed when they miss
# heartbeats: after 4 s rather than ipyparallel's 30.
c.Cluster.controller_args = ["--HeartMonitor.period=1000",
                             "--HeartMonitor.max_heartmonitor_misses=3"]

# One engine per task, one GPU per node (Slurm sets CUDA_VISIBLE_DEVICES to it).
c.SlurmEngineSetLauncher.batch_template = """#!/bin/sh
#SBATCH --job-name=ipengine-{{cluster_id}}
#SBATCH --ntasks={{n}}
#SBATCH --gres=gpu:1
#SBATCH --output={{output_file}}
srun {{program_and_args}}
"""
c.SlurmEngineSetLauncher.batch_file_name = {batch_file!r}
'''


@pytest.fixture(scope="module", autouse=True)
def ledgers(tmp_path_factory):
    """GPU leases on the Slurm nodes in a directory of this module's own (sbatch passes the
    environment on): test runs side by side, whose nodes have the same names, never share."""
    directory = tmp_path_factory.mktemp("ledgers")
    old = os.environ.get("JUPYTER_SCHED_LEASES")
    os.environ["JUPYTER_SCHED_LEASES"] = f"{directory}/"
    yield directory
    if old is None:
        os.environ.pop("JUPYTER_SCHED_LEASES", None)
    else:
        os.environ["JUPYTER_SCHED_LEASES"] = old


@pytest.fixture(scope="module")
def net():
    reason = hosts.unavailable()
    if reason is not None:
        pytest.skip(f"Slurm's compute nodes are namespace hosts: {reason}")
    with hosts.network("sn1", "sn2") as made:
        yield made


@pytest.fixture(scope="module")
def cluster(net):
    reason = slurm.unavailable()
    if reason is not None:
        pytest.skip(reason)
    try:
        made = slurm.SlurmCluster(net, net.hosts, gpus=1, cpus=1)
    except (OSError, RuntimeError) as err:
        pytest.skip(f"Slurm cannot start here: {str(err).splitlines()[0]}")
    old = os.environ.get("SLURM_CONF")
    os.environ.update(made.environ())  # sbatch, squeue and scancel find it
    try:
        yield made
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        made.close()


def where_in_job() -> tuple[dict, str | None]:
    return where(), os.environ.get("SLURM_JOB_ID")


def ipython_profile(directory: Path, location: str) -> Path:
    """An IPython profile whose ipcluster_config.py sets up clusters for this Slurm."""
    profile = directory / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipcluster_config.py").write_text(IPCLUSTER_CONFIG.format(
        location=location, batch_file=str(directory / "engines.sbatch")))
    return profile


def engine_processes(net) -> list[str]:
    found = []
    for pid in net.pids():
        try:
            line = " ".join(psutil.Process(pid).cmdline())
        except psutil.NoSuchProcess:
            continue
        if "ipyparallel" in line:
            found.append(f"{pid}: {line}")
    return found


def assert_nothing_left(cluster, net) -> None:
    wait_for(lambda: not cluster.jobs(), 30, "squeue to show no job")
    wait_for(lambda: not engine_processes(net), 15, "the engines to exit")


def test_engines_started_through_slurm_are_nodes_and_run_tasks(cluster, net, tmp_path):
    profile = ipython_profile(tmp_path, net.gateway)
    sched = Scheduler(local_resources="GPU=0")
    try:
        with engines_can_import_this_checkout():  # (sbatch passes the environment on)
            t0 = time.monotonic()
            executor = sched.start_cluster(engines=2, launcher="slurm", profile_dir=str(profile))
            started = time.monotonic() - t0
        controller = executor.cluster.controller.pid
        [job] = cluster.jobs()
        job_id, state, name = job.split()
        assert state == "RUNNING" and name == f"ipengine-{executor.cluster.cluster_id}"
        nodes = {n.name: n for n in sched.snapshot(fresh=True).nodes}
        assert sorted(nodes) == ["local", "sn1", "sn2"]
        for name in ("sn1", "sn2"):
            node = nodes[name]
            assert node.kind == "engines" and node.slots == 1
            assert node.total == {"CPU": 1, "memory": slurm.MEMORY_MIB * 2**20, "GPU": 1}
        # pinned to the GPU Slurm gave the job on its node
        assert sorted((e.node, e.pinned, e.visible) for e in executor.engines.values()) == [
            ("sn1", True, (0,)), ("sn2", True, (0,))]

        handles = [sched.submit(where_in_job, resources={"GPU": 1}, node=name, target="engines")
                   for name in ("sn1", "sn2")]
        for name, h in zip(("sn1", "sn2"), handles, strict=True):
            seen, task_job = h.result(timeout=60)
            assert seen["host"] == name and seen["CUDA_VISIBLE_DEVICES"] == "0"
            assert task_job == job_id
        gang = sched.submit(rendezvous, gang=("ddp", 2), strategy="strict-spread",
                            target="engines")
        rank0, rank1 = gang.result(timeout=60)
        assert {rank0["host"], rank1["host"]} == {"sn1", "sn2"}
        assert rank0["MASTER_ADDR"] == net[rank0["host"]].address
        assert rank1["peers"] == [rank0["host"]]

        sched.stop_cluster()
        assert [n.name for n in sched.snapshot(fresh=True).nodes] == ["local"]
        assert_nothing_left(cluster, net)
        assert not psutil.pid_exists(controller) or psutil.Process(controller).status() == \
            psutil.STATUS_ZOMBIE
    finally:
        sched.shutdown()
    assert started < 90


def test_a_job_slurm_ends_takes_its_engines_and_their_tasks_away(cluster, net, tmp_path):
    profile = ipython_profile(tmp_path, net.gateway)
    sched = Scheduler(local_resources="GPU=0")
    try:
        with engines_can_import_this_checkout():
            sched.start_cluster(engines=2, launcher="slurm", profile_dir=str(profile))
        h = sched.submit(time.sleep, 120, node="sn2", target="engines")
        wait_for(lambda: h.state == "running", 30, "the task to start on sn2")
        [job] = cluster.jobs()
        cluster.command(["scancel", job.split()[0]])  # the allocation ends (time limit, admin)
        with pytest.raises(Exception, match="on host sn2"):
            h.result(timeout=30)
        assert h.state == "failed" and "on host sn2" in h.reason
        wait_for(lambda: [n.name for n in sched.snapshot(fresh=True).nodes] == ["local"], 30,
                 "both Slurm nodes to leave")
        sched.stop_cluster()
        assert_nothing_left(cluster, net)
    finally:
        sched.shutdown()


def test_the_slurm_notebook_passes_nbval(cluster, net, tmp_path):
    pytest.importorskip("nbval")
    ipython_profile(tmp_path / "ipython", net.gateway)
    env = dict(os.environ)
    checks = ROOT / "tests" / "notebook_checks"  # the examples' nbval checks, for this one too
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), str(checks), env.get("PYTHONPATH")]))
    env["IPYTHONDIR"] = str(tmp_path / "ipython")  # the kernel's profile: the site's config
    result = subprocess.run(  # (a plain nbval run: tests/test_notebooks.py says why)
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
         "--nbval", "--nbval-current-env", "-p", "nbval_displays", "--nbval-sanitize-with",
         str(checks / "sanitize.cfg"), str(NOTEBOOKS / "slurm.ipynb")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert_nothing_left(cluster, net)
    # nor the controller, nor the watch on it: they ran in the kernel's profile
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 15,
             "the cluster's processes on this host to exit")


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or ())
        if text in line:
            found.append(f"{proc.info['pid']}: {line}")
    return found
