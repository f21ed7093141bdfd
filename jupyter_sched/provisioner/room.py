"""The kernels of one Jupyter server waiting for their GPU lease, in the host's order.

One :class:`WaitingRoom` per ledger in the server process (:meth:`WaitingRoom.of`). Every
provisioned kernel that starts asks it for its share (:meth:`WaitingRoom.take`); the room
records the waits of all of them in the ledger (the holder is the server process, each wait
naming its kernel and notebook), and grants them in order: between processes, users and
kernels by the ledger's host-wide order (a wait of another process ranked ahead reserves its
room); within this server, first come first served. It looks at the ledger when a share is
given back anywhere on the host (a datagram, :mod:`..host.ledger.wakes`), and every
:data:`LOOK` seconds besides (a lost wake costs time, not a start). A kernel shut down or
cancelled while it waits leaves the order at once.

Ledger calls run in a worker thread (``asyncio.to_thread``): the server's event loop never
waits for another process's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..host.discovery import HostInfo, discover_host
from ..host.enforce import LOGICAL, MPS
from ..host.ledger import Lease, Ledger, Refusal, WaitSpec, device_key
from ..host.ledger.fairness import GpuDemand, ordinal
from ..host.ledger.holders import Owner
from ..host.mps import detect_mps, mps_environment
from ..host.starts import register
from ..model.quantity import SCALE

log = logging.getLogger(__name__)

LOOK = 5.0
"""Seconds between two looks at the ledger of a waiting room that no wake reached."""

LEASE_ENV = "JUPYTER_SCHED_KERNEL_LEASE"
"""What a provisioned kernel holds, as JSON in its environment (:meth:`KernelLease.env`)."""


CANCELLED = "it stopped waiting for a GPU before it got one"  # (a cancel's default why)


class WaitCancelled(Exception):
    """A kernel's wait for its GPU ended before it got one (shut down, or cancelled); ``why``
    says which."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class KernelLease:
    """The leases one kernel holds, through the ledger that names it (``ledger``)."""

    kernel: str
    leases: tuple[Lease, ...]
    devices: dict[str, int]  # device key -> CUDA_VISIBLE_DEVICES entry
    held: str  # how a share is held (enforce.py's word; '' for whole GPUs)
    ledger: Ledger
    host: HostInfo
    extra: dict[str, str] = field(default_factory=dict)  # the share's enforcement variables

    def env(self) -> dict[str, str]:
        """The kernel's variables: its devices, its share's enforcement, and the lease."""
        visible = [str(self.devices[lease.device]) for lease in self.leases]
        gpus = [gpu for gpu in self.host.gpus
                if device_key(gpu, self.host.key) in {lease.device for lease in self.leases}]
        out = {"CUDA_VISIBLE_DEVICES": ",".join(visible), **self.extra}
        if gpus and all(gpu.declared for gpu in gpus):
            memory = gpus[0].memory
            out["JUPYTER_SCHED_DECLARE"] = f"GPU={len(gpus)}" + (
                f",gpu_memory={memory}" if memory else "")
        out[LEASE_ENV] = json.dumps({
            "ledger": str(self.ledger.path), "kernel": self.kernel, "held": self.held,
            "leases": [{"id": lease.id, "device": lease.device, "units": lease.units}
                       for lease in self.leases]}, sort_keys=True)
        return out

    def give_back(self) -> None:
        """Give every lease back and close the kernel's ledger (a lease already gone, taken
        back from an ended holder or given back before, is left be)."""
        try:
            for lease in self.leases:
                self.ledger.give(lease)
        finally:
            self.ledger.close()


@dataclass(eq=False)
class _Want:
    kernel: str
    label: str
    units: int
    count: int
    since: float
    future: asyncio.Future
    say: Callable[[str], None]
    said: str = ""


class WaitingRoom:
    """The waits of this process's kernels for GPU leases in the ledger at ``path``."""

    _rooms: dict[str, WaitingRoom] = {}
    _lock = threading.Lock()

    def __init__(self, path: Path, host: HostInfo | None = None) -> None:
        self.path = path
        self.host = host or discover_host()
        self.devices = {device_key(gpu, self.host.key): (gpu.uuid if gpu.uuid and
                                                        not gpu.declared else gpu.index)
                        for gpu in self.host.gpus}
        self.ledger = Ledger(path, connect=False)
        self._wants: list[_Want] = []
        self._runner: asyncio.Task | None = None
        self._woken: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recorded: set[str] = set()  # the kernels whose waits the ledger has now
        self._rounds: list[asyncio.Future] = []  # told when the runner's next look is done

    @classmethod
    def of(cls, path: Path) -> WaitingRoom:
        """This process's room for the ledger at ``path``."""
        key = f"{os.getpid()}:{Path(path).absolute()}"
        with cls._lock:
            room = cls._rooms.get(key)
            if room is None:
                room = cls._rooms[key] = cls(Path(path))
                register(room)  # (a kernel shut down while it waits: the server asks)
            return room

    @property
    def settled(self) -> bool:
        """Whether nothing waits and no grant is under way (a grant in flight for a start
        cancelled meanwhile is given back before the room settles)."""
        return not self._wants and (self._runner is None or self._runner.done())

    @property
    def waiting(self) -> list[str]:
        """The kernels waiting, first first."""
        return [want.kernel for want in self._wants]

    async def take(self, kernel: str, label: str, units: int, count: int,
                   say: Callable[[str], None] = log.info) -> KernelLease:
        """The kernel's leases once it is its turn and its share is free (``count`` devices of
        ``units`` each); ``say`` hears where it waits whenever that changes. Raises
        :class:`WaitCancelled` when :meth:`cancel` ends the wait, ValueError when the host has
        too few GPUs for it ever."""
        if count > len(self.devices) or not self.devices:
            raise ValueError(f"the kernel asks for {count if units == SCALE else units / SCALE:g}"
                             f" GPU(s) and this host has {len(self.devices)} (JUPYTER_SCHED_"
                             f"DECLARE or CUDA_VISIBLE_DEVICES of the server decide which)")
        loop = asyncio.get_running_loop()
        want = _Want(kernel, label, units, count, time.time(), loop.create_future(), say)
        self._wants.append(want)
        self._start(loop)
        self._woken.set()  # type: ignore[union-attr]
        try:
            return await asyncio.shield(want.future)
        except BaseException:
            self._drop(want)
            await self._unrecorded(kernel)
            raise

    async def _unrecorded(self, kernel: str) -> None:
        """Until the ledger no longer has ``kernel``'s wait (a start that fails says so once
        its wait has left the host's order), at most :data:`LOOK` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LOOK
        while kernel in self._recorded and self._runner is not None and \
                not self._runner.done() and loop.time() < deadline:
            round_done = loop.create_future()
            self._rounds.append(round_done)
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(round_done), deadline - loop.time())

    def cancel(self, kernel: str, why: str = CANCELLED) -> bool:
        """End ``kernel``'s wait (its start raises :class:`WaitCancelled` with ``why``):
        whether it waited. Call on the room's event loop."""
        for want in list(self._wants):
            if want.kernel == kernel:
                if not want.future.done():
                    want.future.set_exception(WaitCancelled(why))
                self._drop(want)
                return True
        return False

    def _drop(self, want: _Want) -> None:
        if want in self._wants:
            self._wants.remove(want)
            if self._woken is not None:
                self._woken.set()  # (its wait leaves the ledger's order)
        if want.future.done() and not want.future.cancelled() and \
                want.future.exception() is None:
            # granted while its start was being cancelled: give it back
            asyncio.get_running_loop().run_in_executor(None, want.future.result().give_back)
        elif not want.future.done():
            want.future.cancel()

    # -- the runner ---------------------------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._runner is not None and not self._runner.done() and self._loop is loop:
            return
        self._loop = loop
        self._woken = asyncio.Event()
        self.ledger.mine.wakes.listen(self._wake)
        self._runner = loop.create_task(self._run())

    def _wake(self, healed: bool) -> None:  # (the wakes' thread)
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(woken.set)

    async def _run(self) -> None:
        woken = self._woken
        assert woken is not None
        recorded = False
        try:
            while self._wants or recorded:
                woken.clear()
                wants = list(self._wants)
                try:
                    got, places = await asyncio.to_thread(self._grant, wants)
                except Exception as err:  # (a ledger that cannot be used now: say so, go on)
                    log.warning("the GPU lease ledger %s: %s", self.path, err)
                    got, places = {}, {}
                else:
                    self._recorded = {want.kernel for want in wants if want not in got}
                rounds, self._rounds = self._rounds, []
                for round_done in rounds:
                    if not round_done.done():
                        round_done.set_result(None)
                recorded = bool(set(wants) - set(got))
                for want in wants:
                    if want in got:
                        if want in self._wants and not want.future.done():
                            self._wants.remove(want)
                            want.future.set_result(got[want])
                        else:  # (cancelled meanwhile)
                            await asyncio.to_thread(got[want].give_back)
                    elif want in places and places[want] != want.said:
                        want.said = places[want]
                        want.say(places[want])
                if not self._wants and not recorded:
                    break
                if any(w not in wants for w in self._wants) or (
                        set(wants) - set(self._wants)):
                    continue  # (came or went meanwhile: look again at once)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(woken.wait(), LOOK)
        finally:
            self._recorded = set()
            self.ledger.mine.wakes.unlisten(self._wake)

    # -- inside the worker thread ------------------------------------------------------------

    def _grant(self, wants: list[_Want]) -> tuple[dict[_Want, KernelLease], dict[_Want, str]]:
        """Take for each of ``wants`` in turn until one is refused (first come, first served
        in this server), record the rest as waits, and say where each waits."""
        got: dict[_Want, KernelLease] = {}
        refused: Refusal | None = None
        for want in wants:
            result = self._take(want)
            if isinstance(result, Refusal):
                refused = result
                break
            got[want] = result
        rest = [want for want in wants if want not in got]
        self.ledger.set_waits([WaitSpec(f"kernel {want.kernel}", GpuDemand(
            want.units, want.count, tuple(self.devices)), 0, want.since, want.kernel,
            want.label) for want in rest])
        if not rest:
            return got, {}
        _, order = self.ledger.view()
        places = {}
        for want in rest:
            place = next((k + 1 for k, wait in enumerate(order.waits)
                          if wait.kernel == want.kernel), 0)
            why = refused.describe() if refused is not None and want is rest[0] else \
                "behind the kernels of this server that wait before it"
            places[want] = (f"waiting for a GPU: {ordinal(place)} on this host; {why}"
                            if place else f"waiting for a GPU: {why}")
        return got, places

    def _take(self, want: _Want) -> KernelLease | Refusal:
        owner = replace(Owner.current(), kernel=want.kernel, label=want.label)
        ledger = Ledger(self.path, owner=owner)
        try:
            leases, _ = ledger.view()
            used = dict.fromkeys(self.devices, 0)
            for lease in leases:
                if lease.device in used:
                    used[lease.device] += lease.units
            held = self._enforcement(want.units)
            task = f"kernel {want.kernel}"
            if want.units >= SCALE:  # whole GPUs: the least held ones
                chosen = sorted(used, key=lambda d: (used[d], d))[:want.count]
                result = ledger.take_all(dict.fromkeys(chosen, SCALE), task=task)
            else:  # a share: the fullest device it fits on, so whole GPUs stay free
                fits = sorted(used, key=lambda d: (SCALE - used[d] < want.units, -used[d], d))
                result = Refusal(fits[0], want.units, SCALE - used[fits[0]])
                for device in fits:
                    result = ledger.take(device, want.units, task=task, held=held)
                    if not isinstance(result, Refusal):
                        result = (result,)
                        break
                    if result.limit:
                        break
            if isinstance(result, Refusal):
                ledger.close()
                return result
            return KernelLease(want.kernel, tuple(result), dict(self.devices), held, ledger,
                               self.host, self._extra(want.units, result))
        except BaseException:
            ledger.close()
            raise

    @staticmethod
    def _enforcement(units: int) -> str:
        """How a share is held: MPS where a daemon serves this user, else only logically (a
        kernel runs code of its own: no framework cap is set in it for it)."""
        if units >= SCALE:
            return ""
        return MPS if detect_mps().running else LOGICAL

    def _extra(self, units: int, leases: tuple[Lease, ...]) -> dict[str, str]:
        if units >= SCALE:
            return {}
        mps = detect_mps()
        gpu = next((g for g in self.host.gpus
                    if device_key(g, self.host.key) == leases[0].device), None)
        return mps_environment(units, 0, gpu.memory if gpu else None, mps)


__all__ = ["LEASE_ENV", "LOOK", "KernelLease", "WaitCancelled", "WaitingRoom"]
