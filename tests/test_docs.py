"""What the README and the user guide say agrees with the code: every setting is listed with
its default, the numbers they quote are the code's, every example notebook is listed."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from jupyter_sched.core.actions.pipeline import AHEAD
from jupyter_sched.runtime.scheduler import Scheduler

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "user-guide.md").read_text()
README = (ROOT / "README.md").read_text()

SETTING_ROW = re.compile(r"^\| `(\w+)` \| `([^`]*)` \| (.*) \|$", re.MULTILINE)


def _settings_tables() -> dict[str, str]:
    """``setting -> default`` from the guide's tables of settings."""
    return {name: default for name, default, _ in SETTING_ROW.findall(GUIDE)}


def test_every_setting_is_in_the_user_guide_with_its_default():
    listed = _settings_tables()
    traits = Scheduler.class_traits(config=True)
    missing = sorted(set(traits) - set(listed))
    assert missing == [], "add them to docs/user-guide.md's settings tables"
    for name, trait in traits.items():
        assert ast.literal_eval(listed[name]) == trait.default_value, name


HOST_VIEW_ROW = re.compile(r"^\| `HostView\.(\w+)` \| `([^`]*)` \| (.*) \|$", re.MULTILINE)


def test_every_host_view_setting_is_in_the_user_guide_with_its_default():
    from jupyter_sched.server.extension import HostView

    listed = {name: default for name, default, _ in HOST_VIEW_ROW.findall(GUIDE)}
    traits = HostView.class_traits(config=True)
    assert sorted(listed) == sorted(traits), "docs/user-guide.md, 'The host view'"
    for name, trait in traits.items():
        assert ast.literal_eval(listed[name]) == trait.default_value, name
        assert trait.help and trait.help[0].isupper(), name


def test_every_setting_has_help():
    for name, trait in Scheduler.class_traits(config=True).items():
        assert trait.help and trait.help[0].isupper(), name


def test_the_pipelines_bound_is_the_codes():
    help_text = Scheduler.class_traits()["pipeline"].help
    assert f"at most {AHEAD} an engine" in help_text
    row = next(line for line in GUIDE.splitlines() if line.startswith("| `pipeline` |"))
    assert f"at most {AHEAD} an engine" in row


def _shipped_notebooks() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "notebooks/*.ipynb"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    return sorted(Path(p).stem for p in listed.split())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_readme_lists_every_example_notebook():
    listed = set(re.findall(r"\]\(notebooks/([\w-]+)\.ipynb\)", README))
    assert sorted(set(_shipped_notebooks()) - listed) == []
    assert sorted(listed - set(_shipped_notebooks())) == []


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_guides_mistakes_in_a_magic_read_as_the_guide_shows():
    """Each mistake the guide shows, made in a real kernel: the one line it prints is the
    guide's, word for word."""
    from kernel_client import Kernel

    block = GUIDE.split("A mistake in a magic is one line naming the value")[1]
    lines = [line for line in block.split("```")[1].splitlines() if line.strip()]
    shown = list(zip(lines[::2], lines[1::2], strict=True))
    assert len(shown) >= 4 and all(magic.startswith("%") for magic, _ in shown), shown
    kernel = Kernel()
    try:
        assert kernel.run("%load_ext jupyter_sched").error is None
        for magic, said in shown:
            run = kernel.run(magic + ("\n1" if magic.startswith("%%") else ""))
            assert said in run.stderr.splitlines(), (magic, run.stderr)
    finally:
        kernel.close()
