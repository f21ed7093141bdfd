"""Several hosts on one machine, for tests: Linux network and UTS namespaces.

Each :class:`Host` is a network namespace with its own address and a UTS namespace with its own
host name; commands run there through ``nsenter`` (which execs: the pid the caller sees is the
program's). The hosts plug into a switch (a bridge in a namespace of its own, so that nothing
of the machine's own firewall applies) and the switch into this process's namespace through one
veth pair, whose end here is the hosts' gateway: a controller listening on that address is
reachable from every host.

::

    this namespace             the switch's namespace        each host's namespace
    jsr<tag> 10.a.b.1/24 ───── uplink ─┐
                                       br0 ─┬─ p1 ────────── eth0 10.a.b.11  (h1)
                                            └─ p2 ────────── eth0 10.a.b.12  (h2)

Addresses come from a private /24 (10.200.0.0 to 10.215.255.255) that no address or route of
this machine overlaps, and exist only on links made here. :meth:`Network.close` kills every
process in the namespaces, then removes the namespaces and links; a network left by a killed
test run is removed by the next one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_PREFIX = "jsched-"
_NAME = re.compile(rf"^{_PREFIX}(\d+)-(\d+)-")
_counter = 0


def unavailable() -> str | None:
    """Why namespace hosts cannot be made here (one line), or None when they can."""
    if os.name != "posix" or not Path("/proc/self/ns/net").exists():
        return "namespace hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return "namespace hosts need root (ip netns, unshare, nsenter)"
    missing = [tool for tool in ("ip", "unshare", "nsenter", "hostname") if not shutil.which(tool)]
    if missing:
        return f"namespace hosts need {', '.join(missing)} (Debian: iproute2, util-linux)"
    name = f"{_PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip() or made.returncode}"
    _ip("netns", "del", name, check=False)
    return None


@dataclass
class Host:
    """One namespace host: its name (its host name), its address, its namespaces."""

    name: str
    address: str
    netns: str
    uts: str  # a file the UTS namespace is bound to
    port: str  # its link's end in the switch namespace

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on this host."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", f"--uts={self.uts}", "--", *argv]

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 30)
        return subprocess.run(self.command(argv), **kwargs)

    def pids(self) -> list[int]:
        """Processes running on this host now."""
        return _netns_pids(self.netns)


class Network:
    """Namespace hosts on one switch, and the gateway address here that they all reach."""

    def __init__(self, names: Sequence[str]) -> None:
        global _counter
        _counter += 1
        remove_stale()
        self.tag = f"{os.getpid()}-{_counter}"
        self.switch = f"{_PREFIX}{self.tag}-sw"
        self.uplink = f"jsr{os.getpid() % 100000}{_counter}"[:15]
        self.dir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{self.tag}-"))
        self.hosts: list[Host] = []
        self.namespaces: list[str] = []
        subnet = _free_subnet()
        addresses = subnet.hosts()
        self.gateway = str(next(addresses))
        self.prefixlen = subnet.prefixlen
        try:
            self._make_switch()
            for i, name in enumerate(names, 1):
                address = str(subnet.network_address + 10 + i)
                self.hosts.append(self._make_host(i, name, address))
        except BaseException:
            self.close()
            raise

    def __getitem__(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def _make_switch(self) -> None:
        self._netns(self.switch)
        sw = ("-n", self.switch)
        _ip(*sw, "link", "add", "br0", "type", "bridge")
        _ip("link", "add", self.uplink, "type", "veth", "peer", "name", "uplink", "netns",
            self.switch)
        _ip(*sw, "link", "set", "uplink", "master", "br0", "up")
        _ip(*sw, "link", "set", "br0", "up")
        _ip("addr", "add", f"{self.gateway}/{self.prefixlen}", "dev", self.uplink)
        _ip("link", "set", self.uplink, "up")

    def _make_host(self, i: int, name: str, address: str) -> Host:
        netns = f"{_PREFIX}{self.tag}-{name}"
        self._netns(netns)
        port = f"p{i}"
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", netns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", netns, "addr", "add", f"{address}/{self.prefixlen}", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.gateway)
        uts = self.dir / f"uts-{name}"
        uts.touch()
        _run(["unshare", f"--uts={uts}", "hostname", name])
        return Host(name, address, netns, str(uts), port)

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)

    # -- faults ----------------------------------------------------------------------------------

    def cut(self, host: Host) -> None:
        """Unplug ``host`` from the switch: it reaches nobody, nobody reaches it."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def plug(self, host: Host) -> None:
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def kill(self, host: Host, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process on ``host``; their pids."""
        pids = host.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    # -- the end ---------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        return [pid for ns in self.namespaces for pid in _netns_pids(ns)]

    def close(self) -> None:
        """Kill what runs on the hosts, remove the namespaces, links and files made here."""
        _kill_and_wait([pid for ns in self.namespaces for pid in _netns_pids(ns)])
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns, check=False)
        self.namespaces.clear()
        _ip("link", "del", self.uplink, check=False)  # gone with the switch, unless it failed
        for host in self.hosts:
            subprocess.run(["umount", host.uts], capture_output=True, check=False)
        for uts in self.dir.glob("uts-*"):  # a host whose making failed half way
            subprocess.run(["umount", str(uts)], capture_output=True, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def network(*names: str) -> Iterator[Network]:
    """Namespace hosts with these names, removed on the way out."""
    net = Network(names)
    try:
        yield net
    finally:
        net.close()


def remove_stale() -> None:
    """Remove the namespaces (and their processes) of test runs whose process has died."""
    listed = _ip("netns", "list", check=False).stdout.split()
    for name in listed:
        match = _NAME.match(name)
        if match and not _alive(int(match.group(1))):
            _kill_and_wait(_netns_pids(name))
            _ip("netns", "del", name, check=False)
    for path in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        match = _NAME.match(path.name + "-")
        if match and not _alive(int(match.group(1))):
            for uts in path.glob("uts-*"):
                subprocess.run(["umount", str(uts)], capture_output=True, check=False)
            shutil.rmtree(path, ignore_errors=True)


# -- helpers ------------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check=check)


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)!r} failed ({done.returncode}): "
                           f"{done.stderr.strip()}")
    return done


def _netns_pids(name: str) -> list[int]:
    done = _ip("netns", "pids", name, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()] if done.returncode == 0 else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_and_wait(pids: list[int], timeout: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            if not _alive(pid) or _zombie(pid):  # (their parents reap them)
                left.discard(pid)
        time.sleep(0.02)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 from 10.200.0.0 to 10.215.255.255 that no address or route here overlaps."""
    taken = []
    for what in (["route", "show", "table", "all"], ["addr", "show"]):
        done = _ip("-j", "-4", *what, check=False)
        with contextlib.suppress(ValueError):
            for item in json.loads(done.stdout or "[]"):
                for text in [item.get("dst")] + [a.get("local") for a in
                                                 item.get("addr_info", [])]:
                    if text and text != "default":
                        with contextlib.suppress(ValueError):
                            taken.append(ipaddress.ip_network(text, strict=False))
    start = os.getpid() * 7 + _counter
    for k in range(4096):
        n = (start + k) % 4096
        candidate = ipaddress.ip_network(f"10.{200 + n // 256}.{n % 256}.0/24")
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    raise RuntimeError("no /24 from 10.200.0.0 to 10.215.255.255 is free for namespace hosts")
