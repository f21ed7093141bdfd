"""An SSH server on each of some namespace hosts (tests/hosts.py), for ipyparallel's SSH
launcher: a host key and a client key generated in a directory of its own, ``sshd`` on port 22
of each host, and the ``ssh`` arguments that log in to them as this user with that key (over
one shared connection per host, closed on the way out).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from hosts import Host

SSHD = "/usr/sbin/sshd"
PRIVSEP = Path("/run/sshd")  # sshd refuses to start without it

CONFIG = """\
Port 22
ListenAddress {address}
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/authorized_keys
PidFile {dir}/sshd-{name}.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
"""


def unavailable() -> str | None:
    missing = [t for t in (SSHD, "ssh", "scp", "ssh-keygen") if not shutil.which(t)]
    if missing:
        return f"the SSH launcher test needs {', '.join(missing)} (Debian: openssh-server)"
    return None


@contextlib.contextmanager
def ssh_servers(hosts: Sequence[Host]) -> Iterator[list[str]]:
    """sshd on each host; yields the ssh (and scp) arguments that log in to them."""
    directory = Path(tempfile.mkdtemp(prefix="jsched-ssh-"))
    made_privsep = not PRIVSEP.exists()
    procs: list[subprocess.Popen] = []
    try:
        for key in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(directory / key)], check=True, capture_output=True)
        (directory / "authorized_keys").write_text((directory / "id.pub").read_text())
        PRIVSEP.mkdir(mode=0o755, exist_ok=True)
        for host in hosts:
            config = directory / f"sshd_config-{host.name}"
            config.write_text(CONFIG.format(address=host.address, dir=directory,
                                            name=host.name))
            with open(directory / f"sshd-{host.name}.log", "wb") as log:
                procs.append(subprocess.Popen(host.command([SSHD, "-D", "-e", "-f", str(config)]),
                                              stdin=subprocess.DEVNULL, stderr=log))
        # one connection per host, shared by the launcher's many ssh and scp calls
        args = ["-i", str(directory / "id"), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
                "-o", f"ControlPath={directory}/master-%C", "-o", "ControlPersist=60"]
        for host in hosts:
            _wait_for_login(args, host, directory)
        yield args
    finally:
        for host in hosts:  # the shared connections' processes here
            with contextlib.suppress(Exception):
                subprocess.run(["ssh", "-o", f"ControlPath={directory}/master-%C", "-O", "exit",
                                host.address], capture_output=True, timeout=10)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if made_privsep:
            with contextlib.suppress(OSError):
                PRIVSEP.rmdir()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_for_login(args: list[str], host: Host, directory: Path) -> None:
    deadline = time.monotonic() + 15
    while True:
        done = subprocess.run(["ssh", *args, host.address, "true"], capture_output=True,
                              text=True, timeout=15, env={**os.environ, "SSH_AUTH_SOCK": ""})
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            log = (directory / f"sshd-{host.name}.log").read_text(errors="replace")
            raise RuntimeError(f"cannot log in to {host.name} with ssh: {done.stderr.strip()}"
                               f"\n{log[-1500:]}")
        time.sleep(0.2)
