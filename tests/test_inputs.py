"""Every count and number is read one way (ASCII digits, no underscores, no bools for numbers,
bounded), with the same words in the API, the magics and the command line; each refusal names
the value and what is valid, and changes nothing.

These inputs were accepted once: ``gang=('g', '2')``, ``retries=True``, ``preemptible='yes'``,
``labels={'a': 1}``, ``wait([], timeout=-1)``, ``priority=2**70``, ``--priority`` and
``--retries`` of 20 and 31 digits, ``--gang ddp:1_0`` (ten members) and ``--gang ddp:٢`` (two),
``--name t1`` (then ``%sched cancel t1`` meant the task with id t1), ``%sched local --mem 0`` and
``%sched start --engines`` without a bound.
"""

from __future__ import annotations

import threading

import pytest
from IPython.core.error import UsageError
from traitlets import TraitError

from jupyter_sched.notebook.cell_options import parse_args
from jupyter_sched.notebook.commands import COMMANDS
from jupyter_sched.notebook.magics import parse_cell
from jupyter_sched.runtime.scheduler import Scheduler

API = [
    ({"gang": ("g", "2")}, "size '2' must be a whole number"),
    ({"gang": ("g", True)}, "size True must be a whole number"),
    ({"gang": "ddp:1_0"}, "size '1_0' is not a whole number in ASCII digits"),
    ({"gang": "ddp:\u0662"}, "is not a whole number in ASCII digits"),
    ({"gang": "ddp:100001"}, "size 100,001 must be from 1 to 100,000"),
    ({"retries": True}, "retries True must be a whole number from 0 to 1,000"),
    ({"retries": 10**31}, "retries a number of about 32 digits must be from 0 to 1,000"),
    ({"priority": 2**70}, "priority 1,180,591,620,717,411,303,424 must be from"),
    ({"priority": 1.5}, "priority 1.5 must be a whole number"),
    ({"preemptible": "yes"}, "preemptible 'yes' must be True or False"),
    ({"labels": {"a": 1}}, "label 'a': 1: a label and its value are strings"),
    ({"name": "t1"}, "name 't1' reads as a task id"),
    ({"name": ""}, "name '' is empty; give the task a name, or none"),
    ({"name": " "}, "name ' ' is empty"),
    ({"resources": {"GPU": 0.12345}}, "GPU=0.12345 cannot be held exactly: amounts go in "
                                      "steps of 0.0001; ask for 0.1234 or 0.1235"),
    ({"resources": {"GPU": 1 / 3}}, "ask for 0.3333 or 0.3334"),
]


@pytest.mark.parametrize(("options", "words"), API, ids=[str(o)[:30] for o, _ in API])
def test_the_api_refuses_by_name_and_queues_nothing(sched, options, words):
    before = sched.snapshot(fresh=True).counts
    with pytest.raises(ValueError) as info:
        sched.submit(lambda: 1, **options)
    assert words in str(info.value), str(info.value)
    assert len(str(info.value)) < 300
    assert sched.snapshot(fresh=True).counts == before


def test_map_over_what_is_no_collection_says_so(sched):
    with pytest.raises(ValueError, match=r"map\(fn, items\): items must be a collection to run "
                                         r"fn on each of .*, not 5 \(int\)"):
        sched.map(abs, 5)


def test_wait_refuses_a_negative_or_nan_timeout(sched):
    for timeout in (-1, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="wait timeout"):
            sched.wait([], timeout=timeout)
    assert sched.wait([], timeout=0) == []


MAGICS = [
    ("--priority 99999999999999999999999", "priority 99,999,999,999,999,999,999,999 must be from"),
    ("--priority 1_0", "priority '1_0' is not a whole number in ASCII digits"),
    ("--retries " + "9" * 31, "retries 99999999999999999999... (31 digits)"),
    ("--retries 1001", "retries 1,001 must be from 0 to 1,000"),
    ("--gang ddp:1_0", "--gang 'ddp:1_0': size '1_0' is not a whole number"),
    ("--gang ddp:\u0662", "--gang 'ddp:\u0662': size"),
    ("--gpus 0", "--gpus 0 asks for no GPU; leave --gpus out"),
    ("--cpus -0", "CPU='-0' is negative; amounts must be 0 or more"),
    ("--on ''", "--on '' names an empty place; give local, engines"),
    ("--on local,,x", "--on 'local,,x' names an empty place"),
    ("--gpus 0.5 --gpus 0.25", "--gpus is given twice (--gpus 0.5 and --gpus 0.25); give it "
     "once"),
    ("--name a --name=b", "--name is given twice (--name a and --name b)"),
    ("--gpus 0.12345", "GPU='0.12345' cannot be held exactly: amounts go in steps of 0.0001; "
     "ask for 0.1234 or 0.1235"),
    ("--cpus 0.00015", "ask for 0.0001 or 0.0002"),
]


@pytest.mark.parametrize(("line", "words"), MAGICS, ids=[line[:24] for line, _ in MAGICS])
def test_the_cell_options_read_numbers_the_same_way(line, words):
    with pytest.raises(UsageError) as info:
        parse_cell(line)
    assert words in str(info.value), str(info.value)


def test_a_name_that_reads_as_a_task_id_is_refused_by_the_magic_too(sched):
    _, submit = parse_cell("--name t1")
    with pytest.raises(ValueError, match="reads as a task id"):
        sched.submit(code="1", **submit)
    _, submit = parse_cell("--name t1-run")  # (only an id itself)
    assert sched.submit(code="1", **submit).result(10) == 1


def test_commands_bound_their_counts():
    commands = COMMANDS
    for line, words in (("--engines 100000", "engines 100,000 must be from 1 to 1,024"),
                        ("--engines 0", "engines 0 must be from 1"),
                        ("--engines-per-gpu 2_0", "is not a whole number in ASCII digits")):
        with pytest.raises(UsageError) as info:
            parse_args(commands["start"].parser, line)
        assert words in str(info.value), str(info.value)


def test_declaring_no_memory_or_no_cpu_is_refused(sched):
    for spec in ("memory=0", "CPU=0"):
        with pytest.raises(ValueError, match="=0: a host that runs tasks has some"):
            sched.declare_local(spec)
    assert sched.local_host.memory > 0


def test_start_cluster_bounds_its_engines(sched):
    for engines in (0, 10**6, True, "4"):
        with pytest.raises(ValueError, match="engines"):
            sched.start_cluster(engines=engines)


def test_steering_and_queues_take_numbers_not_their_text(sched):
    """The API takes an int where it asks for one (the magics read the text): a string is
    refused, naming it, and nothing changes."""
    queues = sched.snapshot(fresh=True).queues
    with pytest.raises(ValueError, match=r"max_running \(0: no cap\) '3' must be a whole "
                                         r"number from 0 to 1,000,000"):
        sched.set_queue("inputs", max_running="3")
    assert sched.snapshot(fresh=True).queues == queues
    release = threading.Event()
    running = sched.submit(release.wait, 30, resources="GPU=2")
    waiting = sched.submit(lambda: 1, resources="GPU=2")
    try:
        with pytest.raises(ValueError, match=r"priority '5' must be a whole number"):
            waiting.set_priority("5")
        assert "priority 5" in waiting.set_priority(5)
    finally:
        release.set()
    assert running.result(30) is True and waiting.result(30) == 1


@pytest.mark.parametrize("value", [True, False, "300"])
def test_a_number_setting_refuses_a_bool_or_text(value):
    s = Scheduler()
    with pytest.raises(TraitError, match="fair_share_half_life"):
        s.fair_share_half_life = value
    assert s.fair_share_half_life == 300.0
