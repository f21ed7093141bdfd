"""The core as built: compiled with mypyc (hatch_build.py) unless JUPYTER_SCHED_PURE was set,
and never older than its sources. An editable install compiles in place; a compiled module
is loaded before its .py, so sources edited since would be silently ignored."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)

ROOT = Path(__file__).resolve().parent.parent
STAMP = ROOT / "jupyter_sched" / "_compiled.json"
COMPILE = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
    "hooks"]["custom"]["compile"]


def _module(path: str):
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def _compiled(path: str) -> bool:
    return not _module(path).__file__.endswith(".py")


def test_the_compiled_core_is_as_new_as_its_sources():
    loaded = [p for p in COMPILE if _compiled(p)]
    if not loaded:
        pytest.skip("the core runs as plain Python (JUPYTER_SCHED_PURE=1, or no C compiler)")
    assert loaded == COMPILE, "only some of the core's modules are compiled"
    if not STAMP.exists():  # an installed wheel: its sources are the ones it was built from
        assert not str(_module(COMPILE[0]).__file__).startswith(str(ROOT))
        return
    built = json.loads(STAMP.read_text())
    stale = [p for p in COMPILE
             if built.get(p) != hashlib.sha256((ROOT / p).read_bytes()).hexdigest()]
    assert not stale, (f"{', '.join(stale)} changed since the core was compiled: run "
                       "`pip install -e .` again (or JUPYTER_SCHED_PURE=1 pip install -e . "
                       "to run the sources as they are)")


def test_what_users_give_the_core_stays_interpreted():
    """Where user input enters, a wrong type must be a ValueError naming it, not a compiled
    module's TypeError: those modules are never compiled."""
    for path in ("jupyter_sched/core/events.py", "jupyter_sched/core/intake.py",
                 "jupyter_sched/core/errors.py", "jupyter_sched/model/specs.py",
                 "jupyter_sched/model/resources.py", "jupyter_sched/model/quantity.py",
                 "jupyter_sched/model/limits.py"):
        assert path not in COMPILE
        assert _module(path).__file__.endswith(".py"), path
