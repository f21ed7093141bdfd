"""Shutting down a kernel whose start still waits for its GPU ends that wait.

Jupyter's own shutdown of a kernel still starting waits for the start to finish (or, where
kernels are not pending ones, knows no such kernel yet): a provisioned kernel waiting for its
lease could not be shut down. :func:`cancel_waits_on_shutdown` wraps the server's kernel
manager: a shutdown first ends the kernel's wait (:func:`..host.starts.cancel_start`), and the
start then fails with ``409`` and a message saying it was cancelled (``POST api/kernels``;
``POST api/sessions`` answers it inside its own error). Nothing was started, nothing is held.
"""

from __future__ import annotations

from typing import Any

import tornado.web
from jupyter_core.utils import ensure_async

from ..host.starts import StartCancelled, cancel_start


def cancel_waits_on_shutdown(manager: Any) -> None:
    """Wrap ``manager``'s ``shutdown_kernel`` and ``start_kernel`` (the server's kernel
    manager, on its event loop) as the module says."""
    shutdown, start = manager.shutdown_kernel, manager.start_kernel

    async def shutdown_kernel(kernel_id: str, *args: Any, **kwargs: Any) -> Any:
        if cancel_start(kernel_id) and kernel_id not in manager:
            return None  # (its start fails now: there is no kernel to shut down)
        return await ensure_async(shutdown(kernel_id, *args, **kwargs))

    async def start_kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            return await ensure_async(start(*args, **kwargs))
        except StartCancelled as err:
            raise tornado.web.HTTPError(409, str(err)) from None

    manager.shutdown_kernel = shutdown_kernel
    manager.start_kernel = start_kernel


__all__ = ["cancel_waits_on_shutdown"]
