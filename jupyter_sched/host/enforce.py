"""How a task's share of a GPU is held: the word every view shows, and the framework cap.

A share is a promise between schedulers; only something in the task's process makes it a
limit. Each task on a fraction of a GPU runs under one of:

* ``logical``: nothing caps it (kernel threads, engines without MPS or torch, or
  ``Scheduler.enforce = "logical"``): it can use the whole device;
* ``mps``: NVIDIA MPS caps its process (:mod:`.mps`: the variables set for the call, the
  control daemon serving the engine's user);
* ``torch``: a framework cap set in the task's process before it runs
  (``torch.cuda.set_per_process_memory_fraction``), for its memory only.

``Scheduler.enforce`` chooses: ``auto`` takes the strongest an engine has (MPS, else torch,
else logical); ``mps`` or ``torch`` use that one where the engine has it, and say ``logical``
where it does not: a share is never shown as capped when it is not. A whole GPU has no word:
nothing else may hold any of it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from collections.abc import Iterable, Iterator

from ..model.quantity import SCALE

log = logging.getLogger(__name__)

LOGICAL, MPS, TORCH = "logical", "mps", "torch"
CHOICES = ("auto", LOGICAL, MPS, TORCH)
"""What ``Scheduler.enforce`` takes."""


def check_enforce(value: object, what: str = "Scheduler.enforce") -> str:
    if not isinstance(value, str) or value not in CHOICES:
        raise ValueError(f"{what} {str(value)[:60]!r} is not one of {', '.join(CHOICES)}")
    return value


def enforcement(setting: str, mps: bool, torch: bool) -> str:
    """The word for a fraction of a GPU in a process where MPS serves (``mps``) and torch
    can be imported (``torch``), under ``Scheduler.enforce = setting``."""
    if setting in ("auto", MPS) and mps:
        return MPS
    if setting in ("auto", TORCH) and torch:
        return TORCH
    return LOGICAL


def word_for(devices: dict[int, int], word: str) -> str | None:
    """``word`` for a task holding ``devices`` ({index: units}), None when it holds no
    fraction of a GPU (nothing to enforce)."""
    return word if any(0 < units < SCALE for units in devices.values()) else None


def torch_importable() -> bool:
    """Whether torch can be imported here (without importing it)."""
    if "torch" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def torch_scope(shares: Iterable[tuple[int, int]], load: bool = False) -> Iterator[bool]:
    """``torch.cuda.set_per_process_memory_fraction`` at each ``(ordinal, units)`` share for
    the call, back to the whole device after; yields whether the caps are set. Only where
    this process has imported torch already, unless ``load`` (``Scheduler.enforce =
    "torch"``): an import costs seconds, and a task that never uses torch needs no cap."""
    shares = [(ordinal, units) for ordinal, units in shares if 0 < units < SCALE]
    if not shares or not (load or "torch" in sys.modules):
        yield False
        return
    try:
        import torch

        if not torch.cuda.is_available():
            yield False
            return
        for ordinal, units in shares:
            torch.cuda.set_per_process_memory_fraction(units / SCALE, ordinal)
    except Exception as err:  # (no torch, or no CUDA: the task runs uncapped, and says so)
        log.warning("torch memory cap not set: %s", err)
        yield False
        return
    try:
        yield True
    finally:
        for ordinal, _ in shares:
            with contextlib.suppress(Exception):
                torch.cuda.set_per_process_memory_fraction(1.0, ordinal)


__all__ = ["CHOICES", "LOGICAL", "MPS", "TORCH", "check_enforce", "enforcement",
           "torch_importable", "torch_scope", "word_for"]
