"""Test settings shared by every test module."""

from __future__ import annotations

import logging
import os
import warnings

import pytest
from hypothesis import settings

# In CI the property tests draw the same examples every run (derandomized): a run is judged on
# the code, not on the luck of the draw. Elsewhere they draw fresh examples each time, which is
# how new counterexamples are found.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def quiet(caplog):
    """Fail the test if anything warns or logs above DEBUG (no NVML must be a quiet state)."""
    caplog.set_level(logging.DEBUG, logger="jupyter_sched")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield caplog
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert [r.getMessage() for r in records if r.levelno > logging.DEBUG] == []
