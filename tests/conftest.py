"""Test settings shared by every test module."""

from __future__ import annotations

import os

from hypothesis import settings

# In CI the property tests draw the same examples every run (derandomized): a run is judged on
# the code, not on the luck of the draw. Elsewhere they draw fresh examples each time, which is
# how new counterexamples are found.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
