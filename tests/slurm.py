"""A real Slurm cluster on this machine, for tests: Debian's ``slurm-wlm`` and ``munge``.

:class:`SlurmCluster` generates a munge key, a ``slurm.conf`` and a ``gres.conf`` in a
directory of its own, and starts ``munged`` and ``slurmctld`` here and one ``slurmd`` on each
compute node: namespace hosts (tests/hosts.py), so that jobs run on hosts with their own names
and addresses, as on a real cluster. Every node has its GPUs as a generic resource
(``Gres=gpu:N``, device files that stand for them); a job that asks for them
(``--gres=gpu:N``) gets them in ``CUDA_VISIBLE_DEVICES`` as on a real cluster, and the
cluster's task prolog declares the node's GPUs, CPUs and memory to jupyter_sched
(``JUPYTER_SCHED_DECLARE``), standing in for the driver that would show real GPUs.

Slurm's commands find the cluster through ``SLURM_CONF`` (:meth:`SlurmCluster.environ`).
:meth:`SlurmCluster.close` cancels every job, stops the daemons and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from hosts import Host, Network

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "srun")
_PREFIX = "jsched-slurm-"


def unavailable() -> str | None:
    """Why a Slurm cluster cannot be started here (one line), or None when it can."""
    missing = [d for d in DAEMONS if not shutil.which(d)]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing; Debian: slurm-wlm, "
                "munge)")
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root"
    return None


TASK_PROLOG = """#!/bin/sh
# What a job's task has on this node, declared to jupyter_sched: the node's GPUs when the job
# was given some (Slurm set CUDA_VISIBLE_DEVICES to them; a real node's driver would show
# them), and the node's CPUs and memory as slurm.conf gives them
if [ -n "$CUDA_VISIBLE_DEVICES" ]; then gpus={gpus}; else gpus=0; fi
echo "export JUPYTER_SCHED_DECLARE=GPU=$gpus,CPU={cpus},memory={memory}MiB"
"""
MEMORY_MIB = 1024


class SlurmCluster:
    """munged and slurmctld here, a slurmd on each of ``nodes`` (namespace hosts), one
    partition ``debug`` with every node, ``gpus`` GPUs (GRES) and ``cpus`` CPUs per node."""

    def __init__(self, net: Network, nodes: Sequence[Host], *, gpus: int = 1,
                 cpus: int = 1) -> None:
        self.net = net
        self.nodes = list(nodes)
        remove_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        os.chmod(self.dir, 0o700)
        self.conf = self.dir / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.gpus, self.cpus = gpus, cpus
        try:
            self._write_config()
            self._start_munge()
            self._start_slurm()
        except BaseException:
            self.close()
            raise

    def environ(self) -> dict[str, str]:
        """What Slurm's commands need to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    # -- configuration ---------------------------------------------------------------------------

    def _write_config(self) -> None:
        d = self.dir
        key = d / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o600)
        prolog = d / "task_prolog.sh"
        prolog.write_text(TASK_PROLOG.format(gpus=self.gpus, cpus=self.cpus,
                                             memory=MEMORY_MIB))
        os.chmod(prolog, 0o755)
        (d / "plugstack.conf").write_text("")  # not the machine's /etc/slurm one
        (d / "state").mkdir()
        for node in self.nodes:
            (d / f"spool-{node.name}").mkdir()
        names = ",".join(n.name for n in self.nodes)
        lines = [*self._settings(prolog), *(
            f"NodeName={n.name} NodeAddr={n.address} CPUs={self.cpus} "
            f"RealMemory={MEMORY_MIB} Gres=gpu:{self.gpus} State=UNKNOWN" for n in self.nodes),
            f"PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP"]
        self.conf.write_text("\n".join(lines) + "\n")
        files = self._gpu_files()
        (d / "gres.conf").write_text("AutoDetect=off\n" + "".join(
            f"NodeName={n.name} Name=gpu File={files}\n" for n in self.nodes))

    def _settings(self, prolog: Path) -> list[str]:
        """slurm.conf but its nodes and partition: everything in this cluster's directory,
        the daemons as root, no accounting, no cgroups."""
        d = self.dir
        return [
            "ClusterName=jsched",
            f"SlurmctldHost={socket.gethostname()}({self.net.gateway})",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d / 'munge.socket'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool-%n'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd-%n.log'}",
            f"PlugStackConfig={d / 'plugstack.conf'}",
            f"TaskProlog={prolog}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",  # a node has what slurm.conf says
            "InactiveLimit=0",
            "KillWait=2",  # a cancelled job's processes get SIGKILL 2 s after SIGTERM
            "MinJobAge=2",
        ]

    def _gpu_files(self) -> str:
        """Device files standing for the GPUs (Slurm counts a GPU by its device file, and
        numbers it for CUDA_VISIBLE_DEVICES by the file's number): copies of /dev/null."""
        for i in range(self.gpus):
            os.mknod(self.dir / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        last = self.gpus - 1
        return str(self.dir / (f"nvidia[0-{last}]" if last else "nvidia0"))

    # -- daemons ---------------------------------------------------------------------------------

    def _start_munge(self) -> None:
        d = self.dir
        self._spawn(["munged", "--foreground", "--force", f"--key-file={d / 'munge.key'}",
                     f"--socket={d / 'munge.socket'}", f"--pid-file={d / 'munged.pid'}",
                     f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"])
        _wait(lambda: (d / "munge.socket").exists(), 10, "munged to listen", self._logs)

    def _start_slurm(self) -> None:
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for node in self.nodes:
            self._spawn(node.command(["slurmd", "-D", "-N", node.name, "-f", str(self.conf)]))
        _wait(self._nodes_idle, 60, "every slurmd to register", self._logs)

    def _spawn(self, argv: list[str]) -> None:
        env = {**os.environ, **self.environ()}
        log = open(self.dir / f"{Path(argv[0]).name}-{len(self.procs)}.out", "wb")  # noqa: SIM115
        with log:
            self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                               stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(proc.args)!r} exited ({proc.returncode}):\n"
                                   f"{self._logs()}")

    def _nodes_idle(self) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(proc.args)!r} exited ({proc.returncode}):\n"
                                   f"{self._logs()}")
        done = self.command(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

    def command(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm command for this cluster (``squeue``, ``sinfo``, ...)."""
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                              env={**os.environ, **self.environ()}, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)!r} failed: {done.stderr.strip()}")
        return done

    def jobs(self) -> list[str]:
        """Jobs Slurm still has (any state but ended)."""
        return self.command(["squeue", "-h", "-o", "%i %T %j"]).stdout.splitlines()

    def _logs(self) -> str:
        parts = []
        for path in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    # -- the end ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel every job, stop the daemons, remove the directory."""
        if any(p.poll() is None for p in self.procs) and self.conf.exists():
            with contextlib.suppress(Exception):
                self.command(["scancel", "--partition=debug"], check=False)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if os.environ.get("JSCHED_KEEP_SLURM"):
            print(self._logs())
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def slurm_cluster(net: Network, nodes: Sequence[Host], **kwargs) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(net, nodes, **kwargs)
    try:
        yield cluster
    finally:
        cluster.close()


def remove_stale() -> None:
    """Stop the daemons of clusters whose test run was killed, and remove their directories
    (the slurmd processes went with their namespace hosts: tests/hosts.py)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        owner = path.name[len(_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or Path(f"/proc/{owner}").exists():
            continue
        for pid_file in path.glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                if name in ("munged", "slurmctld", "slurmd"):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _wait(condition, timeout: float, what: str, logs) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}:\n{logs()}")
        time.sleep(0.2)
