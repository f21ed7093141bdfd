"""The ``%sched NAME`` commands: one table, each command a function that sees only its context
(the scheduler and the status lines), dispatched by ``SchedMagics``. No kernel, no scheduler."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from jupyter_sched.notebook.cell_options import documented, parse_args
from jupyter_sched.notebook.commands import COMMANDS, Command, command, overview
from jupyter_sched.notebook.magics import SchedMagics


def test_the_table_is_in_the_order_of_the_overview_and_each_command_is_named_for_itself():
    assert list(COMMANDS) == ["status", "nodes", "queue", "history", "cancel", "wait", "result",
                              "log", "why", "priority", "top", "hold", "release", "local",
                              "connect",
                              "start", "stop", "clusters",
                              "restore", "queues", "drain", "config", "leases"]
    listed = [line.split()[0] for line in overview().splitlines()[2:2 + len(COMMANDS)]]
    assert listed == list(COMMANDS)
    for name, cmd in COMMANDS.items():
        assert isinstance(cmd, Command) and cmd.name == name and cmd.summary
        assert cmd.parser.prog == f"sched {name}"
        with pytest.raises(dataclasses.FrozenInstanceError):
            cmd.summary = "changed"  # type: ignore[misc]


def test_a_command_runs_on_a_context_of_its_own_without_the_magics(capsys):
    cancelled, settled = [], []
    handle = SimpleNamespace(id="t3", name="train", state="running")

    def wait(handles, timeout=None):
        raise TimeoutError

    scheduler = SimpleNamespace(task=lambda ref: handle, wait=wait,
                                cancel=lambda task_id: cancelled.append(task_id) or True)
    ctx = SimpleNamespace(scheduler=scheduler, live=SimpleNamespace(settle=settled.append))
    cancel = COMMANDS["cancel"]
    assert cancel(ctx, parse_args(cancel.parser, "train")) is None
    assert cancelled == ["t3"] and "cancelled t3" in capsys.readouterr().out
    with pytest.raises(UsageError, match="task ids or names, or --all"):
        cancel.run(ctx, parse_args(cancel.parser, ""))
    with pytest.raises(UsageError, match="--timeout 1: tasks are still running; they go on"):
        COMMANDS["wait"](ctx, parse_args(COMMANDS["wait"].parser, "t3 --timeout 1"))
    assert settled == [[handle]]  # what ended is shown under this cell all the same


def test_why_prints_what_the_scheduler_says_of_the_task_named(capsys):
    handle = SimpleNamespace(id="t3", name="train", state="failed")
    asked = []

    def task(ref):
        if ref not in ("t3", "train"):
            raise ValueError(f"no task {ref!r}")
        return handle

    def why(task):
        asked.append(task)
        return "t3 (train) failed: time limit of 5s exceeded\n  +5.001s  ...  <- time-limit-t3"

    ctx = SimpleNamespace(scheduler=SimpleNamespace(task=task, why=why))
    why_command = COMMANDS["why"]
    assert why_command(ctx, parse_args(why_command.parser, "train")) is None
    assert asked == [handle]
    assert capsys.readouterr().out.splitlines()[1].endswith("<- time-limit-t3")
    with pytest.raises(UsageError, match="no task 'gone'"):
        why_command(ctx, parse_args(why_command.parser, "gone"))
    assert "its decisions and their causes" in overview()


def test_the_magics_dispatch_to_their_table_and_say_its_names():
    seen = []

    @command("echo", "say the words back")
    @ma.magic_arguments("sched echo")
    @ma.argument("words", nargs="*")
    @documented
    def echo(ctx, args):
        """Say the words back."""
        seen.append(ctx.scheduler)
        if args.words == ["bad"]:
            raise ValueError("'bad' is no word")
        return " ".join(args.words)

    class Echoing(SchedMagics):
        commands = {"echo": echo}

    magics = Echoing(None, scheduler=SimpleNamespace(state="running", alive=True))
    assert magics.sched("echo a b") == "a b" and seen == [magics.scheduler]
    with pytest.raises(UsageError, match=r"^'bad' is no word$"):
        magics.sched("echo bad")
    with pytest.raises(UsageError, match=r"'status' is not a command; try one of echo "):
        magics.sched("")


def test_a_function_without_a_parser_is_no_command():
    with pytest.raises(TypeError, match=r"@ma\.magic_arguments first"):
        command("bare", "no parser")(lambda ctx, args: None)


def test_start_keep_says_the_cluster_id_and_how_to_stop_or_reconnect_to_it(capsys):
    """``%sched start --keep`` prints, beside its nodes, the kept cluster's id and one line:
    it outlives the kernel, how to stop it and how to use it again."""
    from jupyter_sched.views import tables

    asked = {}

    def start_cluster(**kw):
        asked.update(kw)
        return SimpleNamespace(kept_id="1700000000-abcd" if kw["keep"] else None)

    snap = SimpleNamespace(nodes=())
    scheduler = SimpleNamespace(start_cluster=start_cluster, snapshot=lambda fresh=True: snap)
    ctx = SimpleNamespace(scheduler=scheduler)
    start = COMMANDS["start"]
    shown = start(ctx, parse_args(start.parser, "--engines 2 --keep"))
    assert isinstance(shown, tables.NodeList) and asked["keep"] is True
    assert capsys.readouterr().out.splitlines() == [
        "kept cluster 1700000000-abcd: it outlives this kernel; %sched stop --cluster "
        "1700000000-abcd stops it, %sched connect --cluster-id 1700000000-abcd uses it again "
        "from another kernel"]
    start(ctx, parse_args(start.parser, "--engines 2"))
    assert capsys.readouterr().out == ""  # not kept: the nodes say it all
