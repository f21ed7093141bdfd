"""Kernel starts of this process that wait for their GPU, for whoever shuts kernels down.

A kernel provisioner that waits for a lease before its kernel exists registers its waiting
rooms here (:func:`register`: anything with a ``waiting`` list of kernel ids and a
``cancel(kernel_id) -> bool``); the server extension, which shuts kernels down and must not know
the provisioner, asks here which kernels wait (:func:`waiting_starts`) and ends a wait
(:func:`cancel_start`). A start so ended raises :class:`StartCancelled`. Both sides run on the
server's event loop; nothing here locks or waits.
"""

from __future__ import annotations

from typing import Protocol


class WaitingStarts(Protocol):
    """What registers here: a provisioner's waiting room."""

    @property
    def waiting(self) -> list[str]: ...

    def cancel(self, kernel: str, why: str) -> bool: ...


_rooms: list[WaitingStarts] = []


class StartCancelled(RuntimeError):
    """A kernel's start ended while it waited for its GPU (it was shut down or cancelled)."""


def register(room: WaitingStarts) -> None:
    """Make ``room``'s waiting starts known here (once each)."""
    if not any(known is room for known in _rooms):
        _rooms.append(room)


def waiting_starts() -> set[str]:
    """The ids of the kernels whose start waits, in every room registered."""
    return {kernel for room in list(_rooms) for kernel in room.waiting}


SHUT_DOWN = "it was shut down while it waited for a GPU"


def cancel_start(kernel: str, why: str = SHUT_DOWN) -> bool:
    """End the wait of ``kernel``'s start, wherever it waits, saying ``why``: whether it
    waited."""
    return any([room.cancel(kernel, why) for room in list(_rooms)])


__all__ = ["SHUT_DOWN", "StartCancelled", "WaitingStarts", "cancel_start", "register",
           "waiting_starts"]
