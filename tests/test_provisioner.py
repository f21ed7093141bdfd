"""The kernel provisioner (jupyter_sched/provisioner/), driven through jupyter_client's own
kernel manager with real processes: a stand-in kernelspec whose argv is ``sleep`` (a process
the provisioner starts, gives its lease's variables and watches, at a fraction of a kernel's
cost), on two declared GPUs.

The provisioner runs on the event loop of the process that manages its kernels (a Jupyter
server; here each test's ``asyncio.run``), so these tests wait with :func:`until`, the event
loop's form of waiting.wait_for: a condition polled until it holds, with a deadline."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest
from jupyter_client.manager import AsyncKernelManager
from waiting import wait_for

import jupyter_sched.provisioner as provisioner
from jupyter_sched.host.ledger import Ledger, default_ledger
from jupyter_sched.host.policy import policy_path
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.provisioner.idle import IdleCheck
from jupyter_sched.provisioner.kernelspec import kernel_json
from jupyter_sched.provisioner.room import LEASE_ENV, WaitingRoom

SLEEP = "/bin/sleep"


@pytest.fixture
def specs(tmp_path, monkeypatch):
    """Kernelspecs of stand-in kernels at 0.25, 0.5, 1 and 2 GPUs on two declared GPUs."""
    data = tmp_path / "data"
    for name, gpus in (("quarter", 0.25), ("half", 0.5), ("one", 1), ("two", 2)):
        folder = data / "kernels" / name
        folder.mkdir(parents=True)
        spec = kernel_json(gpus, base={"argv": [SLEEP, "600"], "display_name": name,
                                       "language": "none"})
        spec["argv"] = [SLEEP, "600"]  # (no kernel to load the notices extension)
        (folder / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PATH", str(data))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_SCHED_DECLARE", "GPU=2")
    return data


def manager(name: str) -> AsyncKernelManager:
    km = AsyncKernelManager(kernel_name=name)
    km.shutdown_wait_time = 0.2
    return km


async def until(condition, timeout: float = 20.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.01)
    return value


def ledger() -> Ledger:
    return Ledger(default_ledger())


def nothing_held(look: Ledger) -> bool:
    """No lease and no wait in the ledger."""
    return not look.held() and not look.view()[1].waits


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if item)


def alive(km: AsyncKernelManager) -> bool:
    process = km.provisioner.process if km.provisioner else None
    if process is None or process.poll() is not None:
        return False
    with open(f"/proc/{process.pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] != "Z"


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_kernel_starts_holding_its_share_and_gives_it_back(specs):
    async def scenario():
        km = manager("half")
        await km.start_kernel(env={**os.environ, "JPY_SESSION_NAME": "/work/train.ipynb"})
        env = environ(km.provisioner.process.pid)
        held = json.loads(env[LEASE_ENV])
        with ledger() as look:
            (lease,) = look.held()
            assert (lease.units, lease.owner.kernel, lease.owner.label, lease.held) == \
                (5_000, km.kernel_id, "notebook train.ipynb", "logical")
            assert held["leases"] == [{"id": lease.id, "device": lease.device, "units": 5_000}]
            assert env["CUDA_VISIBLE_DEVICES"] == lease.device.rpartition(":")[2]
            assert env["JUPYTER_SCHED_DECLARE"] == "GPU=1"
            await km.shutdown_kernel(now=True)
            assert look.held() == []

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_restart_keeps_the_lease_and_a_kill_gives_it_back_at_once(specs):
    async def scenario():
        km = manager("one")
        await km.start_kernel()
        with ledger() as look:
            (before,) = look.held()
            await km.restart_kernel(now=True)
            assert look.held() == [before]  # (the same lease, the same device)
            os.kill(km.provisioner.process.pid, signal.SIGKILL)
            await until(lambda: not look.held(), what="the killed kernel's lease given back")
            await km.shutdown_kernel(now=True)

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_kernels_wait_in_order_with_their_place_and_a_cancel_ends_a_wait(specs):
    async def scenario():
        first, second, third = manager("two"), manager("one"), manager("one")
        await first.start_kernel()
        waiting = [asyncio.create_task(km.start_kernel()) for km in (second, third)]
        with ledger() as look:
            await until(lambda: len(look.view()[1].waits) == 2, what="two waits")
            assert [w.kernel for w in look.view()[1].waits] == \
                [second.kernel_id, third.kernel_id]
            assert provisioner.waiting() == [second.kernel_id, third.kernel_id]
            assert provisioner.cancel(third.kernel_id)
            with pytest.raises(RuntimeError, match="stopped waiting for a GPU"):
                await waiting[1]
            await until(lambda: [w.kernel for w in look.view()[1].waits] ==
                        [second.kernel_id], what="the cancelled wait gone")
            await first.shutdown_kernel(now=True)
            await waiting[0]
            assert [lease.owner.kernel for lease in look.held()] == [second.kernel_id]
            await second.shutdown_kernel(now=True)
            assert nothing_held(look)

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_start_cancelled_while_it_waits_leaves_nothing(specs):
    async def scenario():
        first, second = manager("two"), manager("half")
        await first.start_kernel()
        start = asyncio.create_task(second.start_kernel())
        with ledger() as look:
            await until(lambda: look.view()[1].waits, what="a wait")
            start.cancel()
            await asyncio.gather(start, return_exceptions=True)
            await until(lambda: not look.view()[1].waits, what="the wait gone")
            await first.shutdown_kernel(now=True)
            assert look.held() == []

    asyncio.run(scenario())


def test_a_bad_share_in_a_kernelspec_names_it(specs):
    folder = specs / "kernels" / "bad"
    folder.mkdir()
    spec = json.loads((specs / "kernels" / "half" / "kernel.json").read_text())
    spec["metadata"]["kernel_provisioner"]["config"]["gpus"] = 1.5
    (folder / "kernel.json").write_text(json.dumps(spec))

    async def scenario():
        with pytest.raises(ValueError, match=r"gpus of provisioner .* 1\.5 is more than one GPU"):
            await manager("bad").start_kernel()

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_an_idle_kernel_is_warned_then_shut_down_and_a_busy_one_never(specs):
    path = policy_path(default_ledger())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"idle_warn_after": 0.3, "idle_reclaim_after": 0.6}))
    path.chmod(0o644)

    async def scenario():
        idle, busy = manager("half"), manager("half")
        await idle.start_kernel()
        await busy.start_kernel()
        busy.execution_state = "busy"  # (as the server's kernel manager says of a running cell)
        with ledger() as look:
            look.mark_active([lease.id for lease in look.held()], time.time())
            checks: list[IdleCheck] = [idle.provisioner._idle, busy.provisioner._idle]
            await until(lambda: not alive(idle), what="the idle kernel shut down")
            await until(lambda: [lease.owner.kernel for lease in look.held()] ==
                        [busy.kernel_id], what="its lease given back")
            assert [text.split(" ")[2] for text in checks[0].told] == ["GPU", "GPU"]
            assert "idle for" in checks[0].told[0] and "shut down" in checks[0].told[1]
            assert checks[1].told == [] and alive(busy)
            await busy.shutdown_kernel(now=True)

    asyncio.run(scenario())


# -- random starts, shutdowns and kills ---------------------------------------------------------

SEQUENCES = int(os.environ.get("JUPYTER_SCHED_PROVISIONER_SEQUENCES", "1000"))
SHARES = {"quarter": 2_500, "half": 5_000, "one": SCALE, "two": SCALE}


async def one_sequence(rng: random.Random, look: Ledger) -> None:
    kernels: list[tuple[AsyncKernelManager, asyncio.Task]] = []
    for _ in range(rng.randint(2, 6)):
        started = [(km, t) for km, t in kernels if t.done() and alive(km)]
        move = rng.random()
        if move < 0.5 or not kernels:
            km = manager(rng.choice(list(SHARES)))
            kernels.append((km, asyncio.create_task(km.start_kernel())))
        elif move < 0.75:
            km, task = rng.choice(kernels)
            if task.done():
                await km.shutdown_kernel(now=True)
            else:
                task.cancel()
        elif started:
            km, _ = rng.choice(started)
            os.kill(km.provisioner.process.pid, signal.SIGKILL)
        await asyncio.sleep(0.005)
        # the kernels whose process runs hold their lease, and never more than a device
        running = [km for km, task in kernels if task.done() and alive(km)]
        held = {lease.id for lease in look.held()}
        per_device: dict[str, int] = {}
        for km in running:
            lease = km.provisioner.held
            if lease is None:  # (killed just now: its process not yet seen ended)
                continue
            assert {item.id for item in lease.leases} <= held
            for item in lease.leases:
                per_device[item.device] = per_device.get(item.device, 0) + item.units
        assert all(units <= SCALE for units in per_device.values()), per_device
    for _, task in kernels:
        task.cancel()
    await asyncio.gather(*(task for _, task in kernels), return_exceptions=True)
    for km, _ in kernels:
        if km.has_kernel:
            await km.shutdown_kernel(now=True)
    room = WaitingRoom.of(default_ledger())
    await until(lambda: room.settled and nothing_held(look),
                what="no lease and no wait once every kernel is gone")


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_random_starts_shutdowns_and_kills_never_overlap_and_leave_nothing(specs):
    rng = random.Random(os.environ.get("JUPYTER_SCHED_SEED", "45"))

    async def scenario():
        with ledger() as look:
            for _ in range(SEQUENCES):
                await one_sequence(rng, look)
                assert nothing_held(look)

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_kernel_shut_down_while_its_restart_waits_leaves_no_process_and_no_lease(specs):
    async def scenario():
        first, second = manager("one"), manager("one")
        await first.start_kernel()
        await second.start_kernel()
        with ledger() as look:
            os.kill(first.provisioner.process.pid, signal.SIGKILL)
            await until(lambda: len(look.held()) == 1, what="the crashed kernel's lease back")
            other = manager("two")  # (takes both GPUs as soon as they are free: first in line)
            third = asyncio.create_task(other.start_kernel())
            await until(lambda: look.view()[1].waits, what="the two-GPU kernel waiting")
            restart = asyncio.create_task(first.restart_kernel(now=True))  # (after the crash)
            await until(lambda: len(look.view()[1].waits) == 2, what="the restart waiting")
            # the shutdown ends the restart's wait, and the restart fails (jupyter_client
            # settles its one `ready` future twice then: its InvalidStateError, not ours)
            outcomes = await asyncio.gather(first.shutdown_kernel(now=True), restart,
                                            return_exceptions=True)
            assert all(o is None or isinstance(o, (RuntimeError, asyncio.InvalidStateError))
                       for o in outcomes), outcomes
            assert isinstance(outcomes[1], Exception)
            await second.shutdown_kernel(now=True)
            await third
            assert [lease.owner.kernel for lease in look.held()] == [other.kernel_id] * 2
            assert first.provisioner is None or first.provisioner.process is None or \
                first.provisioner.process.poll() is not None
            await other.shutdown_kernel(now=True)
            assert nothing_held(look)

    asyncio.run(scenario())


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_synchronous_kernel_manager_of_jupyter_console_works_the_same(specs):
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="half")
    km.start_kernel()
    with ledger() as look:
        try:
            assert [lease.owner.kernel for lease in look.held()] == [km.kernel_id]
            os.kill(km.provisioner.process.pid, signal.SIGKILL)
            # (its event loop runs only inside its calls: the next look at the kernel sees it)
            wait_for(lambda: not km.is_alive(), 10, "the killed kernel seen ended")
            assert look.held() == []
        finally:
            km.shutdown_kernel(now=True)
        assert look.held() == []
