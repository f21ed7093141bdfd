"""The Jupyter Server extension: the host's leases, waits and GPUs with no kernel running
(``api/sched/host``, ``api/sched/metrics``) and the idle sampler. A shell at the top layer:
it imports the host and views layers, never the notebook's. Importing this package imports
nothing of Jupyter Server; :func:`_load_jupyter_server_extension` does."""

from __future__ import annotations

from typing import Any


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .extension import load

    load(serverapp)
