"""Resource names, request parsing, demands and GPU-memory shares."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import (
    CPU,
    GPU,
    MEMORY,
    UNIT_INSTANCE,
    Demand,
    canonical_name,
    format_amount,
    gpu_memory_share,
    parse_amount,
    parse_resources,
    resources_to_json,
)

GiB = 2**30

# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("GPU", GPU),
        ("gpu", GPU),
        ("gpus", GPU),
        ("GPUs", GPU),
        (" Gpu ", GPU),
        ("CPU", CPU),
        ("cpu", CPU),
        ("cpus", CPU),
        ("CPUS", CPU),
        ("mem", MEMORY),
        ("memory", MEMORY),
        ("Memory", MEMORY),
        ("MEM", MEMORY),
        ("fpga", "fpga"),
        ("my_res", "my_res"),
        ("_private", "_private"),
        ("Res2", "Res2"),
        (" spaced ", "spaced"),
    ],
)
def test_canonical_name(raw, name):
    assert canonical_name(raw) == name


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        ("", ["empty"]),
        ("   ", ["empty"]),
        ("my gpu", ["'my gpu'", "not an identifier"]),
        ("2gpu", ["'2gpu'", "not an identifier"]),
        ("gpu-a100", ["'gpu-a100'", "not an identifier"]),
        ("x.y", ["'x.y'", "not an identifier"]),
        (5, ["5", "must be a string"]),
        (None, ["None", "must be a string"]),
    ],
)
def test_canonical_name_refuses(raw, fragments):
    with pytest.raises(ValueError) as info:
        canonical_name(raw)
    for fragment in fragments:
        assert fragment in str(info.value)


# -- single amounts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "units"),
    [
        (GPU, 0.5, 5000),
        (GPU, "0.5", 5000),
        (GPU, 0.25, 2500),
        (GPU, 1, SCALE),
        (GPU, "2", 2 * SCALE),
        (GPU, 2.0, 2 * SCALE),
        (GPU, 0.0001, 1),
        (GPU, 0, 0),
        (GPU, 10**9, 10**9 * SCALE),
        (CPU, "2", 2 * SCALE),
        (CPU, 0.5, 5000),
        (CPU, 1.5, 15000),  # CPUs are not devices: any amount
        ("fpga", 2.5, 25000),  # custom: any amount unless declared per device
        (MEMORY, "16GiB", 16 * GiB * SCALE),
        (MEMORY, "512MB", 512 * 10**6 * SCALE),
        (MEMORY, 1024, 1024 * SCALE),
        (MEMORY, "1KiB", 10_240_000),
    ],
)
def test_parse_amount(name, value, units):
    assert parse_amount(name, value) == units


@pytest.mark.parametrize(("name", "value", "nearest"), [
    (GPU, 1.00001, "ask for 1 or 1.0001"),
    (CPU, 2 / 3, "ask for 0.6666 or 0.6667"),
    (GPU, "0.12345", "ask for 0.1234 or 0.1235"),
])
def test_an_amount_that_cannot_be_held_exactly_is_refused_naming_the_nearest(name, value,
                                                                             nearest):
    with pytest.raises(ValueError, match=f"cannot be held exactly: amounts go in steps of "
                                         f"0.0001; {nearest}"):
        parse_amount(name, value)


def test_parse_amount_unit_instance_is_configurable():
    fpga = UNIT_INSTANCE | {"fpga"}
    assert parse_amount("fpga", 0.5, fpga) == 5000
    assert parse_amount("fpga", 2, fpga) == 2 * SCALE
    with pytest.raises(ValueError, match=r"fpga=1\.5: a fpga request is either a fraction"):
        parse_amount("fpga", 1.5, fpga)
    # GPU is not per device when the caller says nothing is
    assert parse_amount(GPU, 1.5, ()) == 15000


# -- specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, {}),
        ("", {}),
        ({}, {}),
        ([], {}),
        ("GPU=0.5", {GPU: 5000}),
        ("GPU=0.5,CPU=2", {GPU: 5000, CPU: 20000}),
        (" GPU = 0.5 , CPU = 2 ", {GPU: 5000, CPU: 20000}),
        ("GPU=1,", {GPU: SCALE}),
        ("gpus=2,cpus=4,mem=16GiB", {GPU: 2 * SCALE, CPU: 4 * SCALE, MEMORY: 16 * GiB * SCALE}),
        ("memory=512MB", {MEMORY: 512 * 10**6 * SCALE}),
        ("GPU=0,CPU=1", {CPU: SCALE}),  # zero entries dropped
        (["GPU=0.5", "CPU=2"], {GPU: 5000, CPU: 20000}),
        (("gpu=0.25",), {GPU: 2500}),
        (["GPU=0.5", "", "CPU=2"], {GPU: 5000, CPU: 20000}),
        ({"GPU": 0.5}, {GPU: 5000}),
        ({"gpus": 1, "cpu": 2, "mem": "1GiB"}, {GPU: SCALE, CPU: 2 * SCALE, MEMORY: GiB * SCALE}),
        ({"CPU": "2", "fpga": 0.5}, {CPU: 2 * SCALE, "fpga": 5000}),
        ({"CPU": 0}, {}),
        ("custom_res=3", {"custom_res": 3 * SCALE}),
    ],
)
def test_parse_resources(spec, expected):
    assert parse_resources(spec) == expected


# Every bad input: ValueError whose message names the resource and the offending value (and,
# where it matters, why). The empty name has no name to give: its message says so.
BAD_INPUTS = [
    # unit-instance fractions above one
    ("GPU=1.5", {}, ["GPU='1.5'", "fraction below 1", "whole number", "Ask for 1 or 2"]),
    ({"GPU": 1.5}, {}, ["GPU=1.5", "fraction below 1", "whole number"]),
    ("GPU=2.5", {}, ["GPU='2.5'", "fraction below 1", "whole number", "Ask for 2 or 3"]),
    ({"gpus": "3.25"}, {}, ["GPU='3.25'", "whole number", "Ask for 3 or 4"]),
    # negatives
    ("CPU=-1", {}, ["CPU='-1'", "negative"]),
    ({"GPU": -0.5}, {}, ["GPU=-0.5", "negative"]),
    ({"memory": -5}, {}, ["memory=-5", "negative"]),
    ("mem=-5GiB", {}, ["memory='-5GiB'", "not a size"]),
    # NaN and infinities
    ({"GPU": math.nan}, {}, ["GPU=nan", "finite"]),
    ("CPU=nan", {}, ["CPU='nan'", "finite"]),
    ({"CPU": math.inf}, {}, ["CPU=inf", "finite"]),
    ("CPU=inf", {}, ["CPU='inf'", "finite"]),
    ("CPU=-inf", {}, ["CPU='-inf'", "finite"]),
    ({"memory": math.inf}, {}, ["memory=inf", "finite"]),
    # below one unit
    ("GPU=0.00001", {}, ["GPU='0.00001'", "below the smallest amount", "0.0001"]),
    ({"CPU": 0.00001}, {}, ["CPU=1e-05", "below the smallest amount"]),
    ({"memory": 0.4}, {}, ["memory=0.4", "less than one byte"]),
    # sizes
    ("memory=16GB!", {}, ["memory='16GB!'", "not a size"]),
    ("memory=16XB", {}, ["memory='16XB'", "unknown size suffix 'XB'"]),
    ({"mem": "16 gigs"}, {}, ["memory='16 gigs'", "unknown size suffix 'gigs'"]),
    # not numbers
    ("CPU=abc", {}, ["CPU='abc'", "not a number"]),
    ({"GPU": "half"}, {}, ["GPU='half'", "not a number"]),
    ("GPU=0.5;CPU=2", {}, ["GPU='0.5;CPU=2'", "not a number"]),
    # names
    ("=0.5", {}, ["name is empty"]),
    ({"": 1}, {}, ["name is empty"]),
    ("my gpu=1", {}, ["'my gpu'", "not an identifier"]),
    ({"2gpu": 1}, {}, ["'2gpu'", "not an identifier"]),
    ({5: 1}, {}, ["resource name 5", "must be a string"]),
    # duplicates, also through aliases
    ({"gpu": 1, "GPU": 1}, {}, ["'GPU'", "given twice", "'gpu'"]),
    ("GPU=1,gpus=1", {}, ["'GPU'", "given twice", "'gpus'"]),
    ("CPU=1,cpus=2", {}, ["'CPU'", "given twice"]),
    (["mem=1GiB", "memory=2GiB"], {}, ["'memory'", "given twice", "'mem'"]),
    ("CPU=1,CPU=1", {}, ["'CPU'", "given twice"]),
    # malformed items
    ("GPU", {}, ["'GPU'", "NAME=AMOUNT"]),
    ("GPU=", {}, ["'GPU='", "NAME=AMOUNT"]),
    ("CPU=2,GPU", {}, ["'GPU'", "NAME=AMOUNT"]),
    ("GPU=  ", {}, ["'GPU='", "NAME=AMOUNT"]),
    (["GPU=1", 3], {}, ["resource 3", "NAME=AMOUNT"]),
    (2, {}, ["resources 2", "a mapping, 'NAME=AMOUNT,...' or a list"]),
    (0.5, {}, ["resources 0.5", "a mapping"]),
    # absurdly large
    ("CPU=1e20", {}, ["CPU='1e20'", "absurdly large"]),
    ({"CPU": 1e20}, {}, ["CPU=1e+20", "absurdly large"]),
    ({"GPU": 10**9 + 1}, {}, ["GPU=1000000001", "absurdly large"]),
    ("memory=2EiB", {}, ["memory='2EiB'", "unknown size suffix 'EiB'"]),
    ("memory=2048PiB", {}, ["memory='2048PiB'", "absurdly large"]),
    ({"memory": 2**61}, {}, [f"memory={2**61}", "absurdly large"]),
    # wrong types
    ({"GPU": True}, {}, ["GPU=True", "not an amount"]),
    ({"memory": False}, {}, ["memory=False", "not an amount"]),
    ({"CPU": None}, {}, ["CPU=None", "NoneType"]),
    ({"GPU": [1]}, {}, ["GPU=[1]", "list"]),
    # GPU memory
    ("GPU=0.5", {"gpu_memory": "10GiB"}, ["GPU=0.5", "gpu_memory='10GiB'", "not both"]),
    ({"gpus": 1}, {"gpu_memory": 2**30}, ["GPU=1", f"gpu_memory={2**30}", "not both"]),
    (None, {"gpu_memory": "abc"}, ["gpu_memory='abc'", "not a size"]),
    (None, {"gpu_memory": -1}, ["gpu_memory=-1", "negative"]),
    (None, {"gpu_memory": "10XB"}, ["gpu_memory='10XB'", "unknown size suffix"]),
    (None, {"gpu_memory": True}, ["gpu_memory=True", "not an amount"]),
]


@pytest.mark.parametrize(("spec", "kwargs", "fragments"), BAD_INPUTS, ids=repr)
def test_bad_requests_say_which_resource_and_value(spec, kwargs, fragments):
    with pytest.raises(ValueError) as info:
        Demand.parse(spec, **kwargs)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    if not kwargs:  # the same through parse_resources directly
        with pytest.raises(ValueError):
            parse_resources(spec)


def test_there_are_plenty_of_bad_inputs():
    assert len(BAD_INPUTS) >= 25


def test_largest_accepted_amounts():
    assert parse_resources({"CPU": 10**9, "memory": "1024PiB"}) == {
        CPU: 10**9 * SCALE,
        MEMORY: 2**60 * SCALE,
    }
    assert parse_resources("GPU=1000000000") == {GPU: 10**9 * SCALE}


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["CPU", "GPU", "memory", "fpga", "x_1"]),
        st.integers(min_value=0, max_value=10**6),
    )
)
def test_spec_forms_agree(amounts):
    """A mapping, a comma string and a list of NAME=AMOUNT say the same thing."""
    values = {
        name: (str(n) if name in ("GPU", "memory") else f"{n / 100:g}")
        for name, n in amounts.items()
    }
    text = ",".join(f"{k}={v}" for k, v in values.items())
    as_map = parse_resources(values)
    assert parse_resources(text) == as_map
    assert parse_resources([f"{k}={v}" for k, v in values.items()]) == as_map
    assert all(as_map.values())
    assert set(as_map) == {k for k, n in amounts.items() if n}


# -- Demand -----------------------------------------------------------------------------------


def test_demand_parse_sorts_and_drops_zeros():
    demand = Demand.parse("GPU=0.5,CPU=2,x=0")
    assert demand.amounts == ((CPU, 20000), (GPU, 5000))
    assert demand.gpu_memory == 0
    assert demand.as_dict() == {CPU: 20000, GPU: 5000}
    assert demand.get(GPU) == 5000
    assert demand.get("x") == 0
    assert not demand.is_empty


def test_demand_equality_and_hash_by_value():
    a = Demand.parse({"GPU": 0.5, "CPU": 2})
    b = Demand.parse("cpus=2,gpus=0.5")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert Demand.of({GPU: 5000, CPU: 20000, "y": 0}) == a
    assert a != Demand.parse("GPU=0.5")


def test_demand_with_gpu_memory():
    demand = Demand.parse("CPU=1", gpu_memory="10GiB")
    assert demand.gpu_memory == 10 * GiB
    assert demand.get(GPU) == 0
    assert not demand.is_empty
    assert Demand.parse(gpu_memory="10GiB") == Demand((), 10 * GiB)
    assert Demand.parse("GPU=0", gpu_memory="1GiB").gpu_memory == GiB


def test_empty_demand():
    assert Demand.parse().is_empty
    assert Demand.parse("").is_empty
    assert Demand.parse({"CPU": 0}).is_empty
    assert Demand().describe() == "nothing"


def test_demand_scaled_multiplies_amounts_not_gpu_memory():
    demand = Demand.parse("GPU=0.5,CPU=2", None)
    assert demand.scaled(4).as_dict() == {GPU: 20000, CPU: 80000}
    with_mem = Demand.parse("CPU=1", gpu_memory="8GiB")
    assert with_mem.scaled(3).gpu_memory == 8 * GiB
    assert with_mem.scaled(3).get(CPU) == 3 * SCALE


def test_demand_describe_and_json():
    demand = Demand.parse("GPU=0.5,CPU=2,memory=16GiB")
    assert demand.describe() == "CPU 2, GPU 0.5, memory 16 GiB"
    assert demand.to_json() == {"CPU": 2.0, "GPU": 0.5, "memory": 16 * GiB}
    with_mem = Demand.parse("CPU=1", gpu_memory="10GiB")
    assert with_mem.describe() == "CPU 1, GPU memory 10 GiB per device"
    assert with_mem.to_json() == {"CPU": 1.0, "gpu_memory": 10 * GiB}


def test_demand_parse_custom_unit_instance():
    per_device = UNIT_INSTANCE | {"fpga"}
    assert Demand.parse("fpga=2", unit_instance=per_device).get("fpga") == 2 * SCALE
    with pytest.raises(ValueError, match=r"fpga='1\.5'"):
        Demand.parse("fpga=1.5", unit_instance=per_device)


def test_format_amount_and_json():
    assert format_amount(MEMORY, 16 * GiB * SCALE) == "16 GiB"
    assert format_amount(GPU, 2500) == "0.25"
    assert format_amount(CPU, 20000) == "2"
    assert resources_to_json({CPU: 20000, GPU: 2500, MEMORY: 1024 * SCALE}) == {
        CPU: 2,
        GPU: 0.25,
        MEMORY: 1024,
    }
    assert isinstance(resources_to_json({CPU: 20000})[CPU], int)


# -- GPU-memory shares ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("want", "device", "share"),
    [
        (10 * GiB, 16 * GiB, 6250),  # ceil(10/16) = 0.625 exactly
        (10 * GiB, 80 * GiB, 1250),
        (10 * GiB, 40 * GiB, 2500),
        (10 * GiB, 30 * GiB, 3334),  # 0.33333... rounded up, never down
        (1, 16 * GiB, 1),  # one byte still takes a unit
        (16 * GiB, 16 * GiB, SCALE),  # all of it
        (20 * GiB, 16 * GiB, None),  # too small
        (16 * GiB + 1, 16 * GiB, None),
        (10 * GiB, None, None),  # unknown memory: not a candidate
        (10 * GiB, 0, None),
    ],
)
def test_gpu_memory_share(want, device, share):
    assert gpu_memory_share(want, device) == share


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=2**40), st.integers(min_value=1, max_value=2**40))
def test_gpu_memory_share_is_the_ceiling(want, device):
    share = gpu_memory_share(want, device)
    if want > device:
        assert share is None
        return
    assert 1 <= share <= SCALE
    # the share holds the memory asked for, and one unit less would not
    assert share * device >= want * SCALE
    assert (share - 1) * device < want * SCALE


@pytest.mark.parametrize("text", ["\u0661", "\uff10.\uff15", "1_000", "0_5", "\u0661.\u0665"])
def test_amounts_are_written_in_ascii_digits_without_underscores(text):
    with pytest.raises(ValueError) as info:
        Demand.parse({"GPU": text})
    assert repr(text) in str(info.value) and "ASCII digits" in str(info.value)


@pytest.mark.parametrize("size", ["0", "0GiB", 0])
def test_a_gpu_memory_request_of_nothing_is_refused(size):
    with pytest.raises(ValueError, match="asks for no GPU memory"):
        Demand.parse(None, gpu_memory=size)
