"""Engines on several hosts.

An engine reports its host's address as the one it reached the controller from.
"""

from __future__ import annotations


class FakeEngineApp:
    """ipyparallel's engine application, as an engine process has it."""

    registration_url = "tcp://10.1.2.3:51234"

    @classmethod
    def initialized(cls) -> bool:
        return True

    @classmethod
    def instance(cls) -> FakeEngineApp:
        return cls()


def test_an_engine_reports_the_address_it_reached_the_controller_from(monkeypatch):
    from ipyparallel.engine import app

    from jupyter_sched.executors.ipp import engines

    asked = []
    monkeypatch.setattr(engines, "host_address", lambda peer=None: asked.append(peer) or "x")
    assert engines.probe()["address"] == "x"
    assert asked == [None]  # not in an engine, and the kernel knows no address: the hostname's
    monkeypatch.setattr(app, "IPEngine", FakeEngineApp)
    # a controller listening on every interface ("*") gives the kernel no address; the
    # engine's own registration URL says how it reached the controller
    assert engines.registered_with() == "10.1.2.3"
    engines.probe(None)
    engines.probe("127.0.0.1")  # (the kernel's view of a controller on its own host)
    assert asked[1:] == ["10.1.2.3", "10.1.2.3"]
    for url, host in (("tcp://*:5", None), ("tcp://0.0.0.0:5", None), ("tcp://[::1]:5", "::1")):
        monkeypatch.setattr(FakeEngineApp, "registration_url", url)
        assert engines.registered_with() == host
