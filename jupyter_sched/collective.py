"""A small all-reduce for the members of a gang, over TCP, with the standard library only.

Each member of ``%%sched --gang NAME:SIZE`` knows the gang's rendezvous: ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (in ``jupyter_sched.current_task().env``,
and in the environment on engines). That is all this needs::

    from jupyter_sched.collective import allreduce
    total = allreduce([loss, count])          # the element-wise sum over the gang's members
    best = allreduce(score, op="max")

Rank 0 listens on ``MASTER_ADDR:MASTER_PORT``; the others connect, send their value and get
the result back. Any process of the host may connect to that port, so each member also carries
the gang's secret (``JUPYTER_SCHED_GANG_SECRET``, set by the scheduler): rank 0 takes a
member's value only with it, and a connection without it is closed and ignored (it can neither
add a value nor hold the others up). Values are numbers or (nested) lists of numbers, the same
shape on every member; they are reduced in rank order, so every member gets the same,
reproducible result.
Every member must call ``allreduce`` the same number of times, with the same ``op``. It is for
small values (metrics, counters, a few parameters): use ``torch.distributed`` for tensors.

A member that does not show up within ``timeout`` seconds, a shape or an ``op`` that differs,
or a member that fails half-way raise on every member still waiting, with a message saying
which rank and what.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from functools import reduce
from typing import Any

from .executors.context import current_task

Number = int | float
Value = Number | list  # a number or a nested list of numbers

_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 64 * 1024 * 1024  # bytes; a larger length is not one of our messages
_RETRY = 0.05  # seconds between attempts to reach rank 0 while it is not listening yet
_GRACE = 2.0  # seconds the other ranks wait past the timeout for rank 0's verdict
_POLL = 0.1  # seconds a socket call blocks at most before it looks at the clock again
SECRET_ENV = "JUPYTER_SCHED_GANG_SECRET"  # the gang's secret: only its members know it

OPS: dict[str, Callable[[list[Number]], Number]] = {
    "sum": math.fsum,
    "mean": lambda xs: math.fsum(xs) / len(xs),
    "min": min,
    "max": max,
    "prod": lambda xs: reduce(lambda a, b: a * b, xs),
}


class CollectiveError(RuntimeError):
    """An all-reduce could not complete: a member disagreed, failed or sent something else."""


def allreduce(value: Value, op: str = "sum", *, timeout: float = 60.0,
              env: Mapping[str, str] | None = None) -> Value:
    """Reduce ``value`` over every member of the gang and return the result on each.

    ``op``: ``sum``, ``mean``, ``min``, ``max`` or ``prod``, element-wise for lists; ``sum``
    and ``mean`` of integers are exact (``mean`` returns a float). ``env``: where to read
    ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; by default the running
    task's (``current_task().env``), else ``os.environ``. ``timeout``: seconds for the whole
    call (``TimeoutError`` on rank 0 when the others do not come in time; they are told
    why, and wait at most a couple of seconds longer for that).
    """
    if op not in OPS:
        raise ValueError(f"op {op!r} is not a reduction; use one of {', '.join(OPS)}")
    shape = _shape(value, "value")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout {timeout!r} must be a positive number of seconds")
    env = _environment(env)
    rank, size, addr, port = rendezvous(env)
    if size == 1:
        return _reduce([value], op)
    deadline = time.monotonic() + timeout
    hello = {"rank": rank, "world_size": size, "op": op, "shape": shape, "value": value,
             "secret": str(env.get(SECRET_ENV, ""))}
    if rank == 0:
        return _lead(hello, addr, port, deadline, timeout)
    return _follow(hello, addr, port, deadline, timeout)


def rendezvous(env: Mapping[str, str] | None = None) -> tuple[int, int, str, int]:
    """``(rank, world_size, master_addr, master_port)``, checked, from ``env`` (default: the
    running task's environment, else ``os.environ``)."""
    env = _environment(env)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise CollectiveError(
            f"no gang rendezvous here: {', '.join(missing)} not set. Run this in a gang "
            "member (%%sched --gang NAME:SIZE), or pass env={'RANK': ..., 'WORLD_SIZE': ..., "
            "'MASTER_ADDR': ..., 'MASTER_PORT': ...}")
    size = _int(env, "WORLD_SIZE", 1)
    rank = _int(env, "RANK", 0)
    if rank >= size:
        raise CollectiveError(f"RANK={rank} must be below WORLD_SIZE={size}")
    port = _int(env, "MASTER_PORT", 1)
    if port > 65535:
        raise CollectiveError(f"MASTER_PORT={port} is not a TCP port (1 to 65535)")
    return rank, size, str(env["MASTER_ADDR"]), port


# -- rank 0 ---------------------------------------------------------------------------------------

def _environment(env: Mapping[str, str] | None) -> Mapping[str, str]:
    """``env``, else the running task's environment, else ``os.environ``."""
    if env is None:
        task = current_task()
        env = task.env if task is not None and "RANK" in task.env else os.environ
    return env


def _lead(hello: dict, addr: str, port: int, deadline: float, timeout: float) -> Value:
    size = hello["world_size"]
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    try:
        server = socket.create_server((addr, port), family=family, backlog=size)
    except OSError as err:
        raise CollectiveError(f"rank 0 cannot listen on MASTER_ADDR:MASTER_PORT "
                              f"{addr}:{port}: {err}") from None
    peers: dict[int, socket.socket] = {}
    values = {0: hello["value"]}
    try:
        with server:
            for conn, message in _hellos(server, hello.pop("secret"), deadline, timeout, size,
                                         peers):
                try:
                    other = _check_hello(message, hello, peers)
                except BaseException as err:
                    _send_quietly(conn, {"error": f"rank 0: {_describe(err)}"})
                    conn.close()
                    raise
                peers[other], values[other] = conn, message["value"]
        answer = {"value": _reduce([values[r] for r in range(size)], hello["op"])}
    except BaseException as err:
        answer = {"error": f"rank 0: {_describe(err)}"}
        raise
    finally:
        for conn in peers.values():
            with conn:
                _send_quietly(conn, answer)
    return answer["value"]


class _Dropped(Exception):
    """A connection that is not a member of this gang (no message, garbage, a wrong secret)."""


def _hellos(server: socket.socket, secret: str, deadline: float, timeout: float, size: int,
            peers: Mapping[int, socket.socket]) -> Iterator[tuple[socket.socket, dict]]:
    """Each member's hello as it comes, read from every connection at once: a connection that
    sends nothing cannot hold the others up, and one without the gang's secret (any local
    process may connect to MASTER_PORT) is closed and ignored, never counted. Short waits: a
    gang member stopped in a kernel thread stops between two of them."""
    reading: dict[socket.socket, bytearray] = {}
    server.setblocking(False)
    with selectors.DefaultSelector() as selector:
        selector.register(server, selectors.EVENT_READ)
        try:
            while len(peers) < size - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _late(timeout, size, peers)
                for key, _ in selector.select(min(left, _POLL)):
                    conn = key.fileobj
                    if conn is server:
                        _accepted(server, selector, reading, size)
                        continue
                    assert isinstance(conn, socket.socket)
                    try:
                        message = _message(conn, reading[conn])
                        if message is not None and secret and not hmac.compare_digest(
                                str(message.get("secret", "")).encode(), secret.encode()):
                            raise _Dropped
                    except _Dropped:
                        selector.unregister(conn)
                        del reading[conn]
                        conn.close()
                        continue
                    if message is not None:
                        selector.unregister(conn)
                        del reading[conn]
                        conn.setblocking(True)
                        yield conn, message
        finally:
            for conn in reading:
                conn.close()


def _accepted(server: socket.socket, selector: selectors.BaseSelector,
              reading: dict[socket.socket, bytearray], size: int) -> None:
    try:
        conn, _ = server.accept()
    except (BlockingIOError, InterruptedError):
        return
    if len(reading) >= 4 * size:  # (a flood of connections: the oldest goes)
        oldest = next(iter(reading))
        selector.unregister(oldest)
        del reading[oldest]
        oldest.close()
    conn.setblocking(False)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reading[conn] = bytearray()
    selector.register(conn, selectors.EVENT_READ)


def _message(conn: socket.socket, buffer: bytearray) -> dict | None:
    """What ``conn`` sent so far, read without waiting: its message once whole, else None."""
    try:
        chunk = conn.recv(1 << 20)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        raise _Dropped from None
    if not chunk:
        raise _Dropped
    buffer += chunk
    if len(buffer) < _HEADER.size:
        return None
    (length,) = _HEADER.unpack(buffer[:_HEADER.size])
    if length > _MAX_MESSAGE:
        raise _Dropped
    if len(buffer) < _HEADER.size + length:
        return None
    try:
        message = json.loads(bytes(buffer[_HEADER.size:_HEADER.size + length]))
    except ValueError:
        raise _Dropped from None
    if not isinstance(message, dict):
        raise _Dropped
    return message


def _late(timeout: float, size: int, peers: Mapping[int, socket.socket]) -> TimeoutError:
    missing = [r for r in range(1, size) if r not in peers]
    return TimeoutError(f"allreduce: rank{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(str, missing))} of {size} did not join within "
                        f"{timeout:g} s")


def _check_hello(message: dict, hello: dict, peers: Mapping[int, socket.socket]) -> int:
    if "error" in message:
        raise CollectiveError(f"a member failed: {message['error']}")
    other = message.get("rank")
    size = hello["world_size"]
    if isinstance(other, bool) or not isinstance(other, int) or not 0 < other < size \
            or other in peers:
        raise CollectiveError(f"a member says it is rank {other!r}: expected one of "
                              f"{[r for r in range(1, size) if r not in peers]}")
    if message.get("world_size") != size:
        raise CollectiveError(f"rank {other} has WORLD_SIZE={message.get('world_size')!r}, "
                              f"rank 0 has {size}")
    if message.get("op") != hello["op"]:
        raise CollectiveError(f"rank {other} reduces with op={message.get('op')!r}, "
                              f"rank 0 with op={hello['op']!r}")
    if message.get("shape") != hello["shape"]:
        raise CollectiveError(f"rank {other} sent a value of shape {message.get('shape')!r}, "
                              f"rank 0 one of shape {hello['shape']!r}")
    return other


# -- the other ranks ----------------------------------------------------------------------------

def _follow(hello: dict, addr: str, port: int, deadline: float, timeout: float) -> Value:
    conn = _connect(addr, port, deadline, timeout, hello["rank"])
    with conn:
        _send(conn, hello)
        # rank 0 gives up at the deadline and says why: wait a little longer for its word
        answer = _receive(conn, deadline + _GRACE, "rank 0")
    if "error" in answer:
        raise CollectiveError(f"allreduce failed: {answer['error']}")
    return answer["value"]


def _connect(addr: str, port: int, deadline: float, timeout: float,
             rank: int) -> socket.socket:
    last: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"allreduce: rank {rank} could not reach rank 0 at "
                               f"{addr}:{port} within {timeout:g} s ({last})")
        try:
            conn = socket.create_connection((addr, port), timeout=min(left, 1.0))
        except OSError as err:  # rank 0 is not listening yet
            last = err
            time.sleep(min(_RETRY, max(0.0, deadline - time.monotonic())))
            continue
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


# -- messages: a 4-byte length, then JSON -------------------------------------------------------

def _send(conn: socket.socket, message: dict) -> None:
    data = json.dumps(message, allow_nan=True).encode()
    conn.sendall(_HEADER.pack(len(data)) + data)


def _send_quietly(conn: socket.socket, message: dict) -> None:
    try:
        conn.settimeout(1.0)
        _send(conn, message)
    except OSError:  # the member is gone; it fails on its own
        pass


def _receive(conn: socket.socket, deadline: float, who: str) -> dict:
    (length,) = _HEADER.unpack(_read(conn, _HEADER.size, deadline, who))
    if length > _MAX_MESSAGE:
        raise CollectiveError(f"{who} sent a message of {length} bytes: not an allreduce "
                              f"message (at most {_MAX_MESSAGE})")
    try:
        message = json.loads(_read(conn, length, deadline, who))
    except ValueError:
        raise CollectiveError(f"{who} sent something that is not an allreduce message") from None
    if not isinstance(message, dict):
        raise CollectiveError(f"{who} sent {message!r}: not an allreduce message")
    return message


def _read(conn: socket.socket, count: int, deadline: float, who: str) -> bytes:
    chunks, got = [], 0
    while got < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"allreduce: {who} did not answer in time")
        conn.settimeout(min(left, _POLL))  # short waits, as in _accept
        try:
            chunk = conn.recv(min(count - got, 1 << 20))
        except TimeoutError:
            continue
        if not chunk:
            raise CollectiveError(f"allreduce: {who} closed the connection "
                                  "(did it fail or stop?)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- values -------------------------------------------------------------------------------------

def _shape(value: Any, where: str) -> list | None:
    """None for a number, else the list of the element shapes (so nesting must agree)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, list, tuple)):
        raise TypeError(f"{where} {value!r} must be a number or a list of numbers")
    if isinstance(value, (list, tuple)):
        return [_shape(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return None


def _reduce(values: list, op: str) -> Value:
    first = values[0]
    if isinstance(first, (list, tuple)):
        return [_reduce([v[i] for v in values], op) for i in range(len(first))]
    if op == "sum" and all(isinstance(v, int) for v in values):
        return sum(values)  # exact for integers; fsum would give a float
    return OPS[op](values)


def _int(env: Mapping[str, str], name: str, least: int) -> int:
    raw = env[name]
    try:
        number = int(str(raw).strip())
    except ValueError:
        raise CollectiveError(f"{name}={raw!r} must be a whole number") from None
    if number < least:
        raise CollectiveError(f"{name}={raw!r} must be at least {least}")
    return number


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


__all__ = ["OPS", "CollectiveError", "allreduce", "rendezvous"]
