"""What runs on an engine for its host's sake: the task's leases in the host's ledger, and the
MPS variables that cap a task to its share.

:func:`host_call` wraps the task's own wrapper (:func:`.on_engine.engine_call` or
``engine_cell``) when the task needs either. ``host`` is a dict of plain values the kernel
makes (:func:`.leases.host_meta`)::

    {"task": "t7", "node": "h1", "label": "engine for notebook a.ipynb on login1",
     "ledger": "",                     # the kernel's ledger_path setting; "": as resolved here
     "shares": {"GPU-8932f937-...": 5000},          # to lease, {device key: units}
     "devices": {"GPU-8932f937-...": 0},            # every GPU of the node, {key: node index}
     "mps": [(0, 5000, 17179869184)]}               # (ordinal here, units, device memory)

Before the task's code runs (its MPS variables or torch cap set), the leases are taken all or
nothing in this host's ledger, held by this engine process and saying how the share is held, as
the reply does (``enforced``: :mod:`jupyter_sched.host.enforce`); when the call ends they are
given back (also when it raised or was interrupted; an engine killed meanwhile leaves them to
the ledger's sweep, which knows the engine process has ended). A refusal does not run the task
(its variables and cap are undone): the reply is ``(REFUSED, head, b"")``, ``head`` holding
the refusal's text (``reason``) and what others hold of the node's devices (``holdings``).
:func:`host_holdings` reads the latter alone, for the kernel's re-reads while work waits for
the host.

MPS (:mod:`jupyter_sched.host.mps`): when a control daemon serves this engine's user, a task on
a fraction of a GPU runs with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` for its share, set for the call and restored after. CUDA
reads them when a process first initialises it: they cap the engine from its first CUDA task on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...host.enforce import LOGICAL, MPS, TORCH, torch_scope
from ...host.ledger import Lease, Ledger, LedgerError, Refusal, default_ledger
from ...host.ledger.errors import LedgerBusy, LedgerFull
from ...host.mps import MEMORY_ENV, THREADS_ENV, MpsStatus, detect_mps, mps_environment
from ...model.quantity import SCALE

log = logging.getLogger(__name__)

REFUSED = "refused"  # a reply's status: the host's ledger refused the task's shares
ERRORS = (LedgerError, sqlite3.Error, OSError)
STALLS = (LedgerBusy, LedgerFull)
WAIT = 0.5  # seconds an engine's call waits at most for another process's lock on the ledger
MPS_RECHECK = 5.0  # seconds an MPS detection is trusted (a daemon may start or stop)

_lock = threading.Lock()
_ledgers: dict[str, Ledger] = {}
_held: list[tuple[Ledger, Lease]] = []  # taken for the call that runs now
_mps: list = [None, -1e9]  # (status, when detected)


def host_call(host: Mapping[str, Any], wrapper: Callable, /, *args: Any) -> tuple:
    """``wrapper(*args)`` holding the task's leases on this host, with its MPS variables; the
    leases say how the share is held, as the reply does (``head["enforced"]``)."""
    give_back()
    warm = cuda_loaded()  # CUDA read its MPS variables already: this process's cap is fixed
    with contextlib.ExitStack() as scopes:
        capped = scopes.enter_context(mps_scope(host.get("mps", ())))
        held = scopes.enter_context(torch_scope(() if capped else host.get("torch", ()),
                                                load=bool(host.get("load_torch"))))
        cap = _cap_of(host.get("mps", ()), capped)
        word = None
        if host.get("mps") or host.get("torch"):
            # as it is: an MPS cap is this task's only when this call fixes the process's
            # cap, or the cap fixed before is the same
            mps_held = capped and (not warm or _cuda_cap[0] in (None, cap))
            word = MPS if mps_held else TORCH if held else LOGICAL
        note, refused = _take(host, word or LOGICAL)  # (a whole GPU's lease has no word)
        if refused is not None:
            return REFUSED, refused, b""
        try:
            reply = wrapper(*args)
        finally:
            give_back()
    fixed = None
    if not warm and _cuda_cap[0] is None and cuda_loaded() and mps_status().running:
        _cuda_cap[0] = fixed = cap  # this call's task was the first to use CUDA here
    if isinstance(reply, tuple) and len(reply) > 1 and isinstance(reply[1], dict):
        head = reply[1]
        if word is not None:
            head["enforced"] = word
        if fixed is not None:
            head["cap"] = fixed  # the engine's cap from now on (its slot's, in the core)
        if note:
            head["ledger"] = note
    return reply


def _take(host: Mapping[str, Any], word: str | None) -> tuple[str, dict[str, Any] | None]:
    """Take the task's leases (held as ``word`` says) for the call: ``(note, None)``, the note
    saying why the task runs unleased (a ledger that cannot be used), or ``("", head)`` of a
    refusal."""
    if not host.get("shares"):
        return "", None
    try:
        ledger = open_ledger(host.get("ledger", ""))
        # an engine holds leases only during a call, and runs one call at a time: any it
        # holds now were left by a call interrupted between taking and holding them
        ledger.give_mine()
        got = ledger.take_all(dict(host["shares"]), task=host.get("task", ""),
                              label=host.get("label") or None, held=word or "")
    except STALLS as err:  # held up (a lock, a full disk): the task waits, it never runs
        return "", stalled_head(host, err)  # unleased while others may hold its share
    except ERRORS as err:  # the task runs unleased, as a kernel with no ledger would
        return f"{type(err).__name__}: {err}", None
    if isinstance(got, Refusal):
        return "", refusal_head(ledger, host, got)
    with _lock:
        _held.extend((ledger, lease) for lease in got)
    return "", None


def host_holdings(host: Mapping[str, Any]) -> dict[str, Any]:
    """What the processes of this host hold of the node's devices (ended holders swept first):
    ``{"holdings": [...]}`` (see :func:`holdings`), or ``{"error": text}``."""
    try:
        ledger = open_ledger(host.get("ledger", ""))
        ledger.sweep()
        return {"holdings": holdings(ledger, host.get("devices", {}))}
    except STALLS as err:
        return {"holdings": stalled_head(host, err)["holdings"]}
    except ERRORS as err:
        return {"error": f"{type(err).__name__}: {err}"}


def stalled_head(host: Mapping[str, Any], err: BaseException) -> dict[str, Any]:
    """A refusal while this host's ledger is held up by another process (or a full disk):
    every GPU of the node counts as held, by the stall, until it ends."""
    why = f"the GPU ledger of {host.get('node')} is held up ({err})"
    devices = dict(host.get("devices", {}))
    first = next(iter(host.get("shares") or devices), "")
    return {"reason": f"{why}; GPU tasks there wait", "device": first, "taken": SCALE,
            "holdings": [(key, SCALE, 0, "", why) for key in devices]}


def give_back() -> None:
    """Give back every lease taken for a call of this engine."""
    with _lock:
        held = list(_held)
        _held.clear()
    for ledger, lease in held:
        try:
            ledger.give(lease)
        except ERRORS as err:  # the sweep takes it back once this engine has ended
            log.warning("giving back lease %d of %s: %s", lease.id, lease.device, err)


def open_ledger(configured: str) -> Ledger:
    """This host's ledger: the file the kernel's settings name, else the one every kernel of
    this host finds (``$JUPYTER_SCHED_LEASES``, else the Jupyter runtime directory's)."""
    path = default_ledger(configured)
    key = str(path)
    with _lock:
        ledger = _ledgers.get(key)
        if ledger is None:
            ledger = _ledgers[key] = Ledger(path, timeout=WAIT)
        return ledger


def holdings(ledger: Ledger, devices: Mapping[str, int]) -> list[tuple]:
    """``(device key, units, pid, host key, who)`` of each lease on ``devices``; ``who`` names
    the holder for people (``pid 4242, user bob, notebook b.ipynb, task t3``)."""
    found = []
    for lease in ledger.held():
        if lease.device in devices:
            owner = lease.owner
            who = ", ".join(part for part in (f"pid {owner.pid}", f"user {owner.user}",
                                              owner.label,
                                              f"task {lease.task}" if lease.task else "")
                            if part)
            found.append((lease.device, lease.units, owner.pid, owner.host, who))
    return found


def refusal_head(ledger: Ledger, host: Mapping[str, Any], refusal: Refusal) -> dict[str, Any]:
    devices = host.get("devices", {})
    index = devices.get(refusal.device)
    name = f"GPU {index} on {host.get('node')}" if index is not None else None
    try:
        held = holdings(ledger, devices)
    except ERRORS:
        held = [(lease.device, lease.units, lease.owner.pid, lease.owner.host, "")
                for lease in refusal.holders]
    return {"reason": refusal.describe(name), "holdings": held, "device": refusal.device,
            "taken": SCALE - refusal.free}


# -- MPS -------------------------------------------------------------------------------------------

_cuda_cap: list[int | None] = [None]  # the cap (units) this engine's first CUDA task fixed


def cuda_loaded() -> bool:
    """Whether this process has loaded the CUDA driver (``libcuda.so`` mapped): from then on
    the MPS variables it read are its cap, whatever the environment says."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return any(b"libcuda.so" in line for line in maps)
    except OSError:
        return False


def _cap_of(mps: Iterable, env: Mapping[str, str]) -> int:
    """The cap a call set, in units: its smallest share when MPS variables were set (one
    percentage per process: the smallest share's), else the whole device."""
    if not env:
        return SCALE
    shares = [units for _, units, _ in mps]
    return min(shares) if shares else SCALE


def mps_status(now: float | None = None) -> MpsStatus:
    """Whether MPS serves this engine, detected at most every ``MPS_RECHECK`` seconds."""
    now = time.monotonic() if now is None else now
    with _lock:
        status, when = _mps
        if status is not None and now - when < MPS_RECHECK:
            return status
    status = detect_mps()
    with _lock:
        _mps[:] = [status, now]
    return status


def mps_variables(shares: Iterable[tuple[int, int, int | None]],
                  status: MpsStatus) -> dict[str, str]:
    """The MPS variables for ``(ordinal, units, memory)`` shares; none for whole devices."""
    env: dict[str, str] = {}
    limits = []
    for ordinal, units, memory in shares:
        part = mps_environment(units, ordinal, memory, status)
        if THREADS_ENV in part:  # one percentage per process: the smallest share's
            old = env.get(THREADS_ENV)
            env[THREADS_ENV] = min(part[THREADS_ENV], old, key=int) if old else part[THREADS_ENV]
        if MEMORY_ENV in part:
            limits.append(part[MEMORY_ENV])
    if limits:
        env[MEMORY_ENV] = ",".join(limits)
    return env


@contextlib.contextmanager
def mps_scope(shares: Iterable[tuple[int, int, int | None]]):
    """The MPS variables of ``shares`` in the environment for the call, restored after."""
    shares = list(shares)
    env = mps_variables(shares, mps_status()) if shares else {}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


__all__ = ["ERRORS", "REFUSED", "give_back", "holdings", "host_call", "host_holdings",
           "mps_scope", "mps_status", "mps_variables", "open_ledger"]
