"""Parsing ``%%sched`` options and ``%sched`` commands, without a kernel or a scheduler."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jupyter_sched.model.resources import Demand
from jupyter_sched.notebook import magics
from jupyter_sched.notebook.commands import COMMANDS, overview
from jupyter_sched.notebook.magics import SchedMagics, parse_cell, parse_gang, parse_on


def test_defaults_submit_nothing_but_the_cell():
    args, submit = parse_cell("")
    assert not args.wait and args.out is None
    assert submit == {
        "resources": Demand.parse(None), "name": None, "queue": None, "priority": 0,
        "gang": None, "strategy": "pack", "time_limit": None, "retries": 0,
        "preemptible": False, "min_runtime": 0.0, "target": "any", "node": None,
        "labels": None, "push": None, "pull": None,
    }


def test_every_option():
    args, submit = parse_cell(
        "--gpus 0.5 --cpus 2 --mem 4GiB --resource licenses=1 --resource disk=2 "
        "--name train-a --queue research --priority 3 --gang ddp:4:2 --strategy spread "
        "--on engines --on gpu.model=A100,host=n1 --wait --timeout 5 --time-limit 60 "
        "--retries 2 --preemptible --push x,y --pull z --out h",
        {"x": 1, "y": 2},
    )
    assert args.wait and args.timeout == 5.0 and args.out == "h"
    # parsed once, here: the scheduler takes the Demand as it is
    assert submit["resources"] == Demand.parse({"GPU": "0.5", "CPU": "2", "memory": "4GiB",
                                                "licenses": "1", "disk": "2"})
    assert submit["gang"] == ("ddp", 4, 2)
    assert submit["strategy"] == "spread"
    assert submit["target"] == "engines"
    assert submit["labels"] == {"gpu.model": "A100", "host": "n1"}
    assert submit["priority"] == 3 and submit["retries"] == 2
    assert submit["time_limit"] == 60.0 and submit["preemptible"]
    assert submit["push"] == ("x", "y") and submit["pull"] == ("z",)
    assert submit["name"] == "train-a" and submit["queue"] == "research"


def test_gpu_memory_and_node():
    _, submit = parse_cell("--gpu-mem 10GiB --on n7")
    assert submit["resources"] == Demand.parse(None, "10GiB") and "gpu_memory" not in submit
    assert submit["node"] == "n7" and submit["target"] == "any"


def test_timeout_implies_wait():
    args, _ = parse_cell("--timeout 2")
    assert args.wait


@pytest.mark.parametrize(("line", "named"), [
    ("--gpus 1.5", "1.5"),
    ("--gpus -1", "-1"),
    ("--gpus abc", "abc"),
    ("--gpus 0.00001", "0.00001"),
    ("--gpus nan", "nan"),
    ("--cpus inf", "inf"),
    ("--mem 12XB", "12XB"),
    ("--gpu-mem lots", "lots"),
    ("--gpus 0.5 --gpu-mem 8GiB", "gpu_memory"),
    ("--resource licenses", "licenses"),
    ("--resource 9lives=1", "9lives"),
    ("--resource GPU=1 --gpus 1", "GPU"),
    ("--priority high", "high"),
    ("--retries -1", "-1"),
    ("--time-limit 0", "0"),
    ("--timeout never", "never"),
    ("--gang ddp:0", "ddp:0"),
    ("--gang ddp:2:3", "ddp:2:3"),
    ("--gang ddp", "ddp"),
    ("--gang ddp:two", "ddp:two"),
    ("--gang :2", ":2"),
    ("--gang ddp:2 --strategy diagonal", "diagonal"),
    ("--on local --on engines", "engines"),
    ("--on n1 --on n2", "n2"),
    ("--on =x", "=x"),
    ("--out 1x", "1x"),
    ("--out class", "class"),
    ("--push missing", "missing"),
    ("--push a-b", "a-b"),
    ("--name ''", "--name"),
    ("--gpuz 1", "--gpuz"),
    ("--wait=yes", "--wait"),
    ("--gpus", "--gpus"),
    ("--out get_ipython", "get_ipython"),
    ("--out In", "In"),
    ("--out _i3", "_i3"),
    ("--out print", "print"),
    ("--pull get_ipython", "get_ipython"),
    ("--priority -0x10", "-0x10"),
    ("--priority 1_000", "1_000"),
    ("--retries \u0661", "\u0661"),
    ("--time-limit 1_0", "1_0"),
    ("--time-limit 1e10", "1e10"),
    ("--timeout 1e300", "1e300"),
    ("--gang big:1000000", "1000000"),
    ("--queue ''", "--queue"),
    ("--queue '  '", "--queue"),
    ("--strategy spread", "--strategy spread"),
])
def test_bad_cell_options_are_one_line_usage_errors_naming_the_value(line, named):
    with pytest.raises(UsageError) as info:
        parse_cell(line, {"x": 1})
    message = str(info.value)
    assert named in message, message
    assert "\n" not in message


def test_negative_numbers_still_reach_options_that_take_them():
    _args, submit = parse_cell("--priority -3")
    assert submit["priority"] == -3
    with pytest.raises(UsageError, match="--gpuz"):
        parse_cell("--priority --gpuz")


def test_parse_gang_and_on():
    assert parse_gang("ddp:4") == ("ddp", 4)
    assert parse_gang("ddp:4:1") == ("ddp", 4, 1)
    assert parse_on(["local"]) == {"target": "local", "node": None, "labels": None}
    assert parse_on(["a=b", "c=d"])["labels"] == {"a": "b", "c": "d"}


def test_every_command_has_help_and_an_overview_line():
    assert set(COMMANDS) == {"status", "nodes", "queue", "cancel", "wait", "result", "log",
                             "why", "priority", "top", "hold", "release",
                             "local", "connect", "start", "stop", "clusters", "restore",
                             "queues", "drain", "history", "config", "leases"}
    assert SchedMagics.commands is COMMANDS
    for name, command in COMMANDS.items():
        text = command.parser.format_help()
        assert f"%sched {name}" in text and "--help" in text
    assert all(f"  {name} " in overview() for name in COMMANDS)
    cell_help = magics.CELL_PARSER.format_help()
    for option in ("--gpus", "--gpu-mem", "--cpus", "--mem", "--resource", "--name",
                   "--queue", "--priority", "--gang", "--strategy", "--on", "--wait",
                   "--timeout", "--time-limit", "--retries", "--preemptible", "--push",
                   "--pull", "--out"):
        assert option in cell_help
