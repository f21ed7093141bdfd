"""The server extension: ``GET {base_url}api/sched/host`` (JSON) and ``GET
{base_url}api/sched/metrics`` (Prometheus text), and the idle sampler.

Loaded by Jupyter Server through ``jupyter_sched._jupyter_server_extension_points`` (enabled by
the install: ``etc/jupyter/jupyter_server_config.d/jupyter_sched.json``). Its settings are
traitlets of :class:`HostView`, e.g. in ``jupyter_server_config.py``::

    c.HostView.idle_after = 1800      # seconds without work before a lease reads idle
    c.HostView.sample_every = 30      # seconds between looks at the leased GPUs (0: none)

It also makes a shutdown of a kernel whose start waits for its GPU end that wait
(:mod:`.starts`).

Both endpoints answer with no kernel running, to an authenticated user the server's
authorizer allows to read the resource ``sched``.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado.ioloop import PeriodicCallback
from traitlets import Float, Unicode
from traitlets.config import Configurable

from ..host.ledger.where import default_ledger
from ..host.nvml import Nvml, load_nvml
from ..host.starts import waiting_starts
from .look import HostLook, to_json
from .metrics import metrics_text
from .sampler import Sampler
from .starts import cancel_waits_on_shutdown

RESOURCE = "sched"
"""The resource name a Jupyter Server authorizer is asked about (action ``read``)."""


class HostView(Configurable):
    """Settings of the host view that the server extension serves."""

    ledger_path = Unicode(
        "", help="The lease ledger to show (default: this host's, as the kernels find it: "
                 "$JUPYTER_SCHED_LEASES, else the Jupyter runtime directory)").tag(config=True)
    idle_after = Float(
        900.0, min=0.0, help="Seconds without work (GPU utilisation at or below 5%, no task of "
                             "its holder running) after which a lease reads idle").tag(config=True)
    sample_every = Float(
        30.0, min=0.0, help="Seconds between the server's looks at the leased GPUs' "
                            "utilisation (0: no looks; no lease then reads idle)").tag(config=True)
    nvml = Unicode(
        "", help="Where GPU readings come from: empty for NVML, 'none' for no readings, or "
                 "'module:function' returning an object with the methods of "
                 "jupyter_sched.host.nvml.Nvml").tag(config=True)

    def make_nvml(self) -> Nvml | None:
        if not self.nvml:
            return load_nvml()
        if self.nvml == "none":
            return None
        module, sep, name = self.nvml.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"HostView.nvml {self.nvml!r} must be '', 'none' or "
                             "'module:function'")
        return getattr(importlib.import_module(module), name)()


class _Handler(APIHandler):
    auth_resource = RESOURCE

    @property
    def look(self) -> HostLook:
        return self.settings["jupyter_sched_look"]

    async def _looked(self) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(None, self.look.look)


class HostHandler(_Handler):
    @tornado.web.authenticated
    @authorized(resource=RESOURCE)
    async def get(self) -> None:
        host = await self._looked()
        # (a kernel whose start waits for its GPU is this server's too, before Jupyter lists it)
        kernels = set(self.kernel_manager.list_kernel_ids()) | waiting_starts()
        for row in (*host["leases"], *host["waits"]):
            row["this_server"] = bool(row["kernel"]) and row["kernel"] in kernels
        self.finish(to_json(host))


class MetricsHandler(_Handler):
    @tornado.web.authenticated
    @authorized(resource=RESOURCE)
    async def get(self) -> None:
        host = await self._looked()
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.finish(metrics_text(host))


def load(serverapp: Any) -> None:
    """Add the handlers to ``serverapp`` and start the sampler."""
    settings = HostView(parent=serverapp)
    look = HostLook(default_ledger(settings.ledger_path), settings.make_nvml(),
                    settings.idle_after)
    web_app = serverapp.web_app
    web_app.settings["jupyter_sched_look"] = look
    base = web_app.settings.get("base_url", "/").rstrip("/")
    web_app.add_handlers(".*$", [(f"{base}/api/sched/host", HostHandler),
                                 (f"{base}/api/sched/metrics", MetricsHandler)])
    cancel_waits_on_shutdown(serverapp.kernel_manager)
    if settings.sample_every > 0:
        sampler = Sampler(look)

        async def sample() -> None:
            await asyncio.get_running_loop().run_in_executor(None, sampler.sample)

        PeriodicCallback(sample, settings.sample_every * 1000).start()
    serverapp.log.info("jupyter_sched: the host view at %s/api/sched/host (ledger %s)",
                       base, look.path)


__all__ = ["RESOURCE", "HostHandler", "HostView", "MetricsHandler", "load"]
