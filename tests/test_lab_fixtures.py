"""The lab extension's tests read the kernel's real output: labextension/test/fixtures/ is what
``tests/lab_fixtures.py`` makes from a real scheduler, and it must be made again (and
committed) whenever what the kernel shows changes."""

from __future__ import annotations

import difflib
import itertools
import json

import lab_fixtures
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]  # (a child stands for bob)

MIME = "application/vnd.jupyter-sched.v1+json"


@pytest.fixture(scope="module")
def made() -> dict[str, str]:
    return lab_fixtures.make()


@pytest.mark.parametrize("name", ["bundles.json", "snapshot.json"])
def test_the_committed_fixture_is_what_the_kernel_shows_now(made, name):
    committed = (lab_fixtures.FIXTURES / name).read_text()
    if made[name] != committed:
        diff = difflib.unified_diff(committed.splitlines(True), made[name].splitlines(True),
                                    f"{name} (committed)", f"{name} (made now)")
        pytest.fail(f"labextension/test/fixtures/{name} is not what the kernel shows now: make "
                    "it again with `python tests/lab_fixtures.py`, check the extension's tests "
                    "against it (`cd labextension && npx jest`) and commit it; the first "
                    "differences:\n" + "".join(itertools.islice(diff, 40)), pytrace=False)


def test_the_fixture_holds_every_state_and_what_other_kernels_hold(made):
    bundles = json.loads(made["bundles.json"])
    status = bundles["status"][MIME]
    tasks = [*status["running"], *status["waiting"]]
    history = bundles["history"][MIME]["history"]
    assert {t["state"] for t in tasks} == {"running", "stopping", "queued", "held", "infeasible"}
    assert {t["state"] for t in history} == {"done", "failed", "cancelled"}
    assert all(t["text"] for t in [*tasks, *history])
    assert {t.get("enforced") for t in tasks if t["devices"]} == {"logical"}
    others = [o for d in status["nodes"][0]["devices"] for o in d["others"]]
    assert [(o["user"], o["pid"], o["share"]) for o in others] == [("bob", lab_fixtures.PID, 0.5)]
    assert "held by another kernel (pid 4242" in next(
        t["reason"] for t in tasks if t["state"] == "queued" and t["demand"].get("GPU"))
    assert [n["text"].split(" was ")[1][:7] for n in status["notices"]] == ["deleted"]
    assert lab_fixtures.HOSTILE in bundles["infeasible"]["text/plain"]
    assert [t["rank"] for t in bundles["gang"][MIME]["tasks"]] == [0, 1]
    assert [q.get("max_running") for q in status["queues"]] == [None, 1]
    data = json.loads(made["snapshot.json"])["data"]
    assert {row["state"] for row in data["timeline"]} == {"done", "running", "stopping"}
    assert data["history"] == history and not data["truncated"]
