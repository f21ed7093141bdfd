"""Gangs on engines: the members wait for a port on rank 0's host, then go together.

The core starts a gang's members in one batch, rank 0 first. Rank 0's engine is asked for a
free TCP port (``MASTER_PORT``; its address is ``MASTER_ADDR``); the members are held until it
answers and then sent, each with ``LOCAL_RANK``, its place among the members on its host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..base import GANG_SECRET_ENV, gang_secret
from .connection import Connection
from .faults import engine_died
from .futures import Reply
from .on_engine import FREE_PORT
from .pipeline import Pipeline
from .state import Engine, Guard, Outbox, Run

_KEPT = 256  # gangs kept at most (those with members on other engines are never whole here)


@dataclass
class _Gang:
    """One gang instance's members on our engines, sent once rank 0's host named a port."""

    key: str
    master: Engine | None
    members: list[Run] = field(default_factory=list)
    address: str | None = None
    port: int | None = None
    failed: str | None = None


class Gangs:
    """The gangs whose members are held for their port.

    Threads: the runtime thread (``join``, lock held), the client's IO thread (rank 0's engine
    answers). Its table of gangs changes under the executor's lock.
    """

    def __init__(self, guard: Guard, connection: Connection, pipeline: Pipeline,
                 send: Callable[[Run, Outbox], None]) -> None:
        self._guard = guard
        self._connection = connection
        self._pipeline = pipeline
        self._send = send
        self._gangs: dict[str, _Gang] = {}

    def join(self, run: Run, out: Outbox) -> None:
        """Hold a gang member until rank 0's host has named a free port (lock held)."""
        start = run.start
        key = run.record.gang_id or f"{start.gang}/{start.master_node}/{start.world_size}"
        gang = self._gangs.get(key)
        if gang is None or start.rank == 0:
            if start.rank == 0:
                gang = _Gang(key, run.engine)
                self._ask_port(gang)
            else:  # the core starts rank 0 first, and never splits a gang between
                # kernel threads and engines
                gang = _Gang(key, None, failed=f"gang {start.gang!r}: its rank 0 is not on "
                             "these engines (it could not start, or runs on other engines)")
            self._gangs[key] = gang
            if len(self._gangs) > _KEPT:
                del self._gangs[next(iter(self._gangs))]
        gang.members.append(run)
        if len(gang.members) >= (start.world_size or 1):
            self._gangs.pop(key, None)  # every member is here
        if gang.port is not None:
            self._release(gang, run, out)
        elif gang.failed is not None:
            self._pipeline.remove(run)
            out.fail(run.task, RuntimeError(gang.failed), gang.failed, attempt=start.attempt)

    def _ask_port(self, gang: _Gang) -> None:
        def hook(future: Reply) -> None:
            future.add_done_callback(lambda f: self._port_known(gang, f.result()))

        try:
            self._connection.apply(gang.master.eid, FREE_PORT, [], hook)
        except Exception as err:
            gang.failed = f"no port on rank 0's host: {type(err).__name__}: {err}"

    def _port_known(self, gang: _Gang, reply: Any) -> None:
        """IO thread: rank 0's engine named a port (or died)."""
        with self._guard as out:
            if isinstance(reply, BaseException):
                gang.failed = f"no port on rank 0's host: {type(reply).__name__}: {reply}"
                if engine_died(reply):  # (its death fails rank 0 as lost)
                    return
                for run in gang.members:
                    if not run.done and run.future is None:
                        self._pipeline.remove(run)
                        out.fail(run.task, RuntimeError(gang.failed), gang.failed,
                                 attempt=run.start.attempt)
            else:
                gang.port = int(reply)
                gang.address = gang.master.info.address
                for run in gang.members:
                    self._release(gang, run, out)

    def _release(self, gang: _Gang, run: Run, out: Outbox) -> None:
        """Send a gang member, with its master address and port and the gang's secret (lock
        held)."""
        if run.done or run.future is not None or run.call is None or run.stopping is not None:
            return
        same_host = [m for m in gang.members if m.engine.node == run.engine.node]
        address = gang.address or "127.0.0.1"
        run.env.update(MASTER_ADDR=address, MASTER_PORT=str(gang.port),
                       LOCAL_RANK=str(same_host.index(run)))
        run.env[GANG_SECRET_ENV] = gang_secret(gang.key, address, int(gang.port or 0))
        self._send(run, out)  # run.env is the meta's env: the engine sees the update


__all__ = ["Gangs"]
