"""The host policy an administrator owns (jupyter_sched/host/policy.py): its file, its limit per
user inside the ledger's takes (also with real users), and the idle verdicts of whole-kernel
leases (host/reclaim.py), as properties of random traces."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_host_trust import GROUP_ENV, directory, go_on, people  # noqa: F401 (a fixture)

from jupyter_sched.host.ledger import Ledger, WaitSpec
from jupyter_sched.host.ledger.fairness import GpuDemand
from jupyter_sched.host.ledger.holders import Owner
from jupyter_sched.host.ledger.text import format_waits, look, picture_json
from jupyter_sched.host.policy import HostPolicy, PolicyFile, parse_policy, policy_path
from jupyter_sched.host.reclaim import KEEP, RECLAIM, WARN, IdleLook, replay, verdict

GPU = "declared:test-host:0"


def write_policy(ledger, data, mode: int = 0o644) -> os.PathLike:
    path = policy_path(ledger)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    path.chmod(mode)
    return path


# -- the file ---------------------------------------------------------------------------------


def test_the_policy_file_sits_beside_the_ledger(tmp_path):
    assert policy_path(tmp_path / "jupyter-sched-leases-dgx.db") == \
        tmp_path / "jupyter-sched-leases-dgx.policy.json"


def test_no_file_is_no_policy(tmp_path):
    file = PolicyFile(tmp_path / "l.db")
    assert file.current() == HostPolicy() and file.error is None
    assert HostPolicy().limit_of("ana") is None


@pytest.mark.parametrize(("data", "named"), [
    ({"max_shares_per_user": -1}, "max_shares_per_user = -1"),
    ({"max_shares_per_user": 1.5}, "max_shares_per_user = 1.5"),
    ({"max_shares": {"ana": "two"}}, "max_shares['ana'] = 'two'"),
    ({"max_shares": [1]}, "max_shares = [1]"),
    ({"idle_warn_after": float("nan")}, "idle_warn_after = nan"),
    ({"idle_warn_after": 0}, "idle_warn_after = 0"),
    ({"idle_warn_after": 60, "idle_reclaim_after": 30}, "idle_reclaim_after = 30.0"),
    ({"max_share_per_user": 1}, "unknown key 'max_share_per_user'"),
    ([], "must be a JSON object"),
])
def test_bad_content_is_refused_naming_the_file_and_the_key(data, named):
    with pytest.raises(ValueError) as err:
        parse_policy(data, "/etc/p.json")
    assert "/etc/p.json" in str(err.value) and named in str(err.value)


def test_a_bad_file_is_ignored_with_an_error_and_the_ledger_goes_on(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    path = write_policy(ledger.path, '{"max_shares_per_user": 1,')
    assert ledger.take(GPU, 2_500) and ledger.take(GPU, 2_500)  # (no limit applies)
    assert str(path) in ledger.policy.error and "not JSON" in ledger.policy.error
    ledger.close()


def test_a_file_others_may_write_is_not_trusted(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    write_policy(ledger.path, {"max_shares_per_user": 1}, mode=0o666)
    assert ledger.policy.current() == HostPolicy()
    assert "writable by others" in ledger.policy.error
    ledger.close()


def test_a_link_is_not_followed(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"max_shares_per_user": 1}))
    policy_path(ledger.path).symlink_to(real)
    assert ledger.policy.current() == HostPolicy()
    assert "not a regular file" in ledger.policy.error
    ledger.close()


def test_the_file_is_read_again_when_it_changes(tmp_path):
    file = PolicyFile(tmp_path / "l.db")
    path = write_policy(file.ledger, {"max_shares_per_user": 1})
    assert file.current().max_shares_per_user == 1
    path.write_text(json.dumps({"max_shares_per_user": 3, "max_shares": {"ana": 5}}))
    os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
    assert file.current().limit_of("bob") == 3 and file.current().limit_of("ana") == 5


# -- the limit in the ledger --------------------------------------------------------------------


def test_a_take_beyond_the_limit_is_refused_with_the_reason(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    write_policy(ledger.path, {"max_shares_per_user": 2})
    user = ledger.owner.user
    assert ledger.take(GPU, 2_500) and ledger.take(GPU, 2_500)
    refused = ledger.take(GPU, 2_500)
    assert not refused
    assert str(refused) == f"user {user} holds 2 of at most 2 GPU shares on this host"
    assert not ledger.take_all({GPU: 1, "declared:test-host:1": 1})  # (two shares, one left)
    ledger.give(ledger.held()[0])
    assert ledger.take(GPU, 2_500)
    ledger.close()


def test_a_user_at_the_limit_reserves_nothing_for_their_waits(tmp_path):
    path = tmp_path / "l.db"
    write_policy(path, {"max_shares": {"capped": 1}})
    capped = Ledger(path, owner=replace(Owner.current(), uid=4242, user="capped",
                                        holder="c" * 32))
    other = Ledger(path, owner=replace(Owner.current(), uid=4343, user="other",
                                       holder="d" * 32))
    assert capped.take(GPU, 5_000)
    capped.exchange((), [], waits=[WaitSpec("t", GpuDemand(5_000, 1, (GPU,)), 9, 0.0)])
    _, order = other.view()
    assert order.limited == {4242: "user capped holds 1 of at most 1 GPU shares on this host"}
    assert [w.user for w in order.waits] == ["capped"]
    assert other.take(GPU, 5_000)  # (the capped user's wait, ranked first, holds nothing back)
    reason = "user capped holds 1 of at most 1 GPU shares on this host"
    assert f"waits for the host policy: {reason}" in format_waits(order)
    assert [w["limit"] for w in picture_json(look(path))["waits"]] == [reason]
    for ledger in (capped, other):
        ledger.close()


# -- idle verdicts --------------------------------------------------------------------------------


POLICY = HostPolicy(idle_warn_after=60.0, idle_reclaim_after=120.0)


def test_a_lease_nobody_watches_is_never_idle():
    assert verdict(POLICY, 0.0, None, False, 0.0, 10_000.0) == KEEP


def test_a_running_kernel_is_never_idle():
    assert verdict(POLICY, 0.0, 1.0, True, 0.0, 10_000.0) == KEEP


def test_with_no_idle_times_nothing_is_reclaimed():
    assert verdict(HostPolicy(), 0.0, 1.0, False, 0.0, 10_000.0) == KEEP


@settings(max_examples=200, deadline=None)
@given(warn=st.floats(1, 1_000), more=st.floats(0, 1_000), step=st.floats(0.5, 50),
       looks=st.integers(1, 200))
def test_idle_at_zero_utilisation_is_warned_then_given_back_at_the_set_times(warn, more, step,
                                                                             looks):
    policy = HostPolicy(idle_warn_after=warn, idle_reclaim_after=warn + more)
    trace = [IdleLook(k * step, 0.0) for k in range(looks)]
    verdicts = replay(policy, 0.0, trace)
    for seen, said in zip(trace, verdicts, strict=True):
        expected = RECLAIM if seen.at >= warn + more else WARN if seen.at >= warn else KEEP
        assert said == expected, (seen, said)


utilisation = st.one_of(st.none(), st.floats(0, 100))


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.01, 100), utilisation, st.booleans()),
                      max_size=60),
       warn=st.floats(1, 500), more=st.floats(0, 500))
def test_a_lease_at_work_is_never_touched_and_any_touch_follows_a_quiet_spell(steps, warn,
                                                                              more):
    policy = HostPolicy(idle_warn_after=warn, idle_reclaim_after=warn + more)
    trace, now = [], 0.0
    for gap, used, running in steps:
        now += gap
        trace.append(IdleLook(now, used, running))
    verdicts = replay(policy, 0.0, trace)
    last_work = 0.0
    for seen, said in zip(trace, verdicts, strict=True):
        at_work = seen.running or (seen.utilisation is not None and seen.utilisation > 5)
        if at_work:
            last_work = seen.at
            assert said == KEEP
        if said != KEEP:
            # touched only after the set time without work, and only while watched
            assert seen.at - last_work >= warn
            assert any(s.utilisation is not None for s in trace[:trace.index(seen) + 1])
        if said == RECLAIM:
            assert seen.at - last_work >= warn + more


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.01, 100), st.floats(5.01, 100) | st.none(),
                                st.booleans()), max_size=60))
def test_busy_above_five_percent_or_running_is_never_touched(steps):
    trace, now = [], 0.0
    for gap, used, running in steps:
        now += gap
        trace.append(IdleLook(now, used if used is not None else 0.0, used is None or running))
    assert set(replay(HostPolicy(idle_warn_after=1, idle_reclaim_after=1), 0.0, trace)) <= {KEEP}


# -- with real users ----------------------------------------------------------------------------

AS_USER = """
import json, sys
from jupyter_sched.host.ledger import Ledger, WaitSpec
from jupyter_sched.host.ledger.fairness import GpuDemand
path, gpu, out = sys.argv[1], sys.argv[2], []
ledger = Ledger(path)
for units in json.loads(sys.argv[3]):
    got = ledger.take(gpu, units)
    out.append("taken" if got else str(got))
ledger.set_waits([WaitSpec("more", GpuDemand(2_500, 1, (gpu,)), 9, 0.0)])
print(json.dumps({"ready": out}), flush=True)
sys.stdin.readline()
print(json.dumps({"ok": out}))
"""


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_user_over_the_limit_waits_with_the_reason_while_another_is_unaffected(people):  # noqa: F811
    shared = directory(people, "gpus", 0o2770, people.gpus)
    path = shared / "l.db"
    write_policy(path, {"max_shares_per_user": 2})  # (root's, 0644: trusted)
    env = {GROUP_ENV: people.gpus}
    bob = people.start(people.bob, AS_USER, str(path), GPU, json.dumps([2_500, 2_500, 2_500]),
                       env=env)
    try:
        said = json.loads(bob.stdout.readline())["ready"]
        assert said[2] == f"user {people.bob.name} holds 2 of at most 2 GPU shares on this host"
        alice = people.run(people.alice, """
import json, sys
from jupyter_sched.host.ledger import Ledger
ledger = Ledger(sys.argv[1])
got = [bool(ledger.take(sys.argv[2], 2_500)) for _ in range(2)]
_, order = ledger.view()
print(json.dumps({"got": got, "waits": [[w.user, order.limited.get(w.uid, "")]
                                         for w in order.waits]}))
""", str(path), GPU, env=env)
        assert alice["got"] == [True, True]  # (bob's wait, first in order, reserves nothing)
        assert alice["waits"] == [[people.bob.name, said[2]]]
    finally:
        assert go_on(bob) == {"ok": said}
