"""Fixed-point quantities: units of 1/10,000, rounding to nearest, exact sums and comparisons."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_sched.model.quantity import (
    MAX_BYTES,
    MAX_COUNT,
    SCALE,
    Quantity,
    format_bytes,
    format_units,
    from_units,
    parse_bytes,
    to_units,
)

GiB = 2**30

# -- to_units ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "units"),
    [
        (0, 0),
        (1, SCALE),
        (2, 2 * SCALE),
        (0.5, 5000),
        (0.25, 2500),
        (0.1, 1000),
        (0.0001, 1),
        ("2", 20000),
        (" 2 ", 20000),
        ("0.5", 5000),
        ("1e3", 1000 * SCALE),
        ("2.0", 20000),
        (1 / 3, 3333),
        (2 / 3, 6667),  # truncation would say 6666
        (0.33336, 3334),  # truncation would say 3333
        ("0.33336", 3334),
        (0.33335, 3334),
        (0.12349, 1235),
        (0.99999, SCALE),  # rounds up to a whole one
        (0.00006, 1),  # truncation would say 0 and refuse it
        (0.00015, 2),  # 1.5 units as written (the float is just below): a tie, to even
        (0.00025, 2),  # 2.5 units: a tie, to even
        (978851756.9661499, 9788517569661),  # the float product would round up to ...662
        (1.00001, SCALE),
        (-0.0, 0),
        (MAX_COUNT, MAX_COUNT * SCALE),
        (float(MAX_COUNT), MAX_COUNT * SCALE),
        (Quantity(0.75), 7500),
    ],
)
def test_to_units_rounds_to_nearest(value, units):
    assert to_units(value) == units
    assert isinstance(to_units(value), int)


def test_one_third_is_3333_units():
    assert to_units(1 / 3) == 3333
    assert Quantity(1 / 3).units == 3333
    assert str(Quantity(1 / 3)) == "0.3333"


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (-1, ["CPU=-1", "negative"]),
        (-0.5, ["CPU=-0.5", "negative"]),
        ("-2", ["CPU='-2'", "negative"]),
        (math.nan, ["CPU=nan", "finite"]),
        ("nan", ["CPU='nan'", "finite"]),
        (math.inf, ["CPU=inf", "finite"]),
        ("inf", ["CPU='inf'", "finite"]),
        ("-inf", ["CPU='-inf'", "finite"]),
        (-math.inf, ["CPU=-inf", "finite"]),
        (0.00001, ["CPU=1e-05", "below the smallest amount"]),
        ("0.00004", ["CPU='0.00004'", "below the smallest amount"]),
        ("abc", ["CPU='abc'", "not a number"]),
        ("", ["CPU=''", "not a number"]),
        ("1,5", ["CPU='1,5'", "not a number"]),
        (True, ["CPU=True", "not an amount"]),
        (False, ["CPU=False", "not an amount"]),
        (None, ["CPU=None", "NoneType"]),
        ([1], ["CPU=[1]", "list"]),
        ({"a": 1}, ["CPU={'a': 1}", "dict"]),
        (1e20, ["CPU=1e+20", "absurdly large"]),
        ("1e20", ["CPU='1e20'", "absurdly large"]),
        (MAX_COUNT + 1, ["CPU=1000000001", "absurdly large"]),
    ],
)
def test_to_units_refuses_bad_amounts_naming_resource_and_value(value, fragments):
    with pytest.raises(ValueError) as info:
        to_units(value, "CPU")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_to_units_limit_is_configurable():
    assert to_units(5, "x", limit=5) == 5 * SCALE
    with pytest.raises(ValueError, match=r"x=6 is absurdly large; the most is 5"):
        to_units(6, "x", limit=5)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0, max_value=MAX_COUNT, allow_nan=False, allow_infinity=False))
def test_to_units_is_within_half_a_unit_of_the_exact_value(value):
    exact = Fraction(repr(value)) * SCALE  # the decimal as written
    try:
        units = to_units(value)
    except ValueError as exc:
        # only a non-zero amount that rounds to nothing is refused
        assert 0 < exact <= Fraction(1, 2) + Fraction(1, 10**9)
        assert "below the smallest amount" in str(exc)
        return
    # nearest, allowing for the float product landing on a tie
    assert abs(units - exact) <= Fraction(1, 2) + Fraction(1, 10**6)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=MAX_COUNT - 1),
    st.integers(min_value=0, max_value=99_999).filter(lambda f: f % 10 != 5),
)
def test_decimal_strings_round_like_decimal_arithmetic(whole, fraction):
    text = f"{whole}.{fraction:05d}"
    expected = int((Decimal(text) * SCALE).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    if expected == 0 and Decimal(text) > 0:
        with pytest.raises(ValueError, match="below the smallest amount"):
            to_units(text)
    else:
        assert to_units(text) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=MAX_COUNT * SCALE))
def test_units_round_trip_through_text(units):
    assert to_units(format_units(units)) == units
    assert to_units(from_units(units)) == units


# -- parse_bytes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "amount"),
    [
        ("16GiB", 16 * GiB),
        ("512MB", 512 * 10**6),
        ("512MiB", 512 * 2**20),
        ("1KiB", 1024),
        ("1KB", 1000),
        ("1k", 1000),
        ("1Ki", 1024),
        ("2G", 2 * 10**9),
        ("2Gi", 2 * GiB),
        ("1TB", 10**12),
        ("1TiB", 2**40),
        ("1PB", 10**15),
        ("1PiB", 2**50),
        ("16 gib", 16 * GiB),
        (" 16GIB ", 16 * GiB),
        ("1.5GiB", 3 * GiB // 2),
        ("0.5KiB", 512),
        (".5KiB", 512),
        ("1e9", 10**9),
        ("1e3MB", 10**9),
        ("100B", 100),
        ("100", 100),
        ("0", 0),
        ("0GiB", 0),
        (1024, 1024),
        (1e9, 10**9),
        (0.6, 1),
        ("1024PiB", MAX_BYTES),
        (MAX_BYTES, MAX_BYTES),
    ],
)
def test_parse_bytes(value, amount):
    assert parse_bytes(value) == amount
    assert isinstance(parse_bytes(value), int)


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("16GB!", ["memory='16GB!'", "not a size"]),
        ("16XB", ["memory='16XB'", "unknown size suffix 'XB'"]),
        ("2EiB", ["memory='2EiB'", "unknown size suffix 'EiB'"]),
        ("2048PiB", ["memory='2048PiB'", "absurdly large"]),
        (MAX_BYTES + 1, [f"memory={MAX_BYTES + 1}", "absurdly large"]),
        (1e20, ["memory=1e+20", "absurdly large"]),
        ("-5GiB", ["memory='-5GiB'", "not a size"]),
        (-5, ["memory=-5", "negative"]),
        ("abc", ["memory='abc'", "not a size"]),
        ("", ["memory=''", "not a size"]),
        ("GiB", ["memory='GiB'", "not a size"]),
        ("nan", ["memory='nan'", "not a size"]),
        (math.nan, ["memory=nan", "finite"]),
        (math.inf, ["memory=inf", "finite"]),
        ("1e400GiB", ["memory=", "1e400", "finite"]),
        ("0.5", ["memory='0.5'", "less than one byte"]),
        ("16 G iB", ["memory='16 G iB'", "not a size"]),
        (True, ["memory=True", "not an amount"]),
        (None, ["memory=None", "NoneType"]),
    ],
)
def test_parse_bytes_refuses_bad_sizes_naming_resource_and_value(value, fragments):
    with pytest.raises(ValueError) as info:
        parse_bytes(value)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_parse_bytes_names_the_resource_it_is_given():
    with pytest.raises(ValueError, match=r"gpu_memory='abc'"):
        parse_bytes("abc", "gpu_memory")


# -- formatting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("units", "plain", "text"),
    [
        (0, 0, "0"),
        (20000, 2, "2"),
        (2500, 0.25, "0.25"),
        (3333, 0.3333, "0.3333"),
        (1, 0.0001, "0.0001"),
        (12345, 1.2345, "1.2345"),
        (25000, 2.5, "2.5"),
        (-2500, -0.25, "-0.25"),
    ],
)
def test_from_units_and_format_units(units, plain, text):
    assert from_units(units) == plain
    assert type(from_units(units)) is type(plain)
    assert format_units(units) == text


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (16 * GiB, "16 GiB"),
        (80 * GiB, "80 GiB"),
        (2**40, "1 TiB"),
        (2**50, "1 PiB"),
        (3 * 2**19, "1.5 MiB"),
    ],
)
def test_format_bytes(amount, text):
    assert format_bytes(amount) == text


# -- Quantity ---------------------------------------------------------------------------------


def test_point_one_plus_point_two_is_point_three():
    assert 0.1 + 0.2 != 0.3  # floats
    assert Quantity(0.1) + Quantity(0.2) == Quantity(0.3)
    assert (Quantity(0.1) + Quantity(0.2)).units == 3000
    assert Quantity(0.3) - Quantity(0.1) == Quantity(0.2)
    assert Quantity(0.1) + 0.2 == 0.3
    assert Quantity(0.3) - 0.2 == Quantity(0.1)


def test_ten_tenths_are_exactly_one():
    total = Quantity(0)
    for _ in range(10):
        total = total + Quantity(0.1)
    assert total == Quantity(1) == 1
    assert total.units == SCALE
    assert sum([Quantity(0.1)] * 10, Quantity(0)) == 1


def test_quantity_rounds_like_to_units():
    assert Quantity(0.33336).units == 3334
    assert Quantity("0.33336").units == 3334
    assert Quantity(2 / 3).units == 6667
    assert Quantity(1 / 3) == Quantity(0.3333)


def test_quantity_comparisons():
    small, big = Quantity(0.25), Quantity(0.5)
    assert small < big
    assert small <= big
    assert big > small
    assert big >= small
    assert small <= Quantity(0.25)
    assert small >= Quantity("0.25")
    assert not small < small
    assert small != big
    assert small < 0.3
    assert 0.3 < big  # noqa: SIM300 -- the reflected comparison
    assert small == 0.25
    assert 0.25 == small  # noqa: SIM300 -- the reflected comparison
    assert Quantity(2) == 2
    assert sorted([Quantity(1), Quantity(0.1), Quantity(0.5)]) == [0.1, 0.5, 1]
    assert max(Quantity(0.3), Quantity(0.7)) == 0.7


def test_quantity_does_not_equal_other_types():
    assert Quantity(1) != "1"
    assert Quantity(1) != True  # noqa: E712 -- a bool is not an amount
    assert Quantity(0) != None  # noqa: E711
    with pytest.raises(TypeError):
        Quantity(1) + "1"
    with pytest.raises(TypeError):
        Quantity(1) < "2"  # noqa: B015


def test_quantity_equal_to_nan_or_inf_is_false_not_an_error():
    assert Quantity(1) != math.nan
    assert not Quantity(1) == math.inf  # noqa: SIM201
    assert Quantity(0) != -math.inf
    assert math.nan not in [Quantity(1)]


def test_quantity_hash_agrees_with_equality():
    assert hash(Quantity(0.1)) == hash(Quantity(0.1 + 0.2 - 0.2))
    assert len({Quantity(0.1) + Quantity(0.2), Quantity(0.3)}) == 1
    # equal to plain numbers, so hashed like them: usable as the same dict key
    assert hash(Quantity(2)) == hash(2)
    assert hash(Quantity(0.5)) == hash(0.5)
    assert 2 in {Quantity(2)}
    assert {Quantity(0.25): "quarter"}[0.25] == "quarter"


def test_quantity_bool_float_str_repr():
    assert not Quantity(0)
    assert Quantity(0.0001)
    assert float(Quantity(0.25)) == 0.25
    assert str(Quantity(2)) == "2"
    assert str(Quantity(0.5)) == "0.5"
    assert repr(Quantity(0.5)) == "Quantity(0.5)"
    assert repr(Quantity(1 / 3)) == "Quantity(0.3333)"


def test_quantity_from_units_and_copy():
    assert Quantity.from_units(2500) == Quantity(0.25)
    q = Quantity(0.75)
    assert Quantity(q) == q
    assert Quantity(q).units == 7500
    assert (Quantity(0.1) - Quantity(0.2)).units == -1000


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (-1, "GPU=-1"),
        (math.nan, "GPU=nan"),
        ("inf", "GPU='inf'"),
        (0.00001, "GPU=1e-05"),
        ("abc", "GPU='abc'"),
        (True, "GPU=True"),
    ],
)
def test_quantity_refuses_bad_values_naming_them(value, fragment):
    with pytest.raises(ValueError) as info:
        Quantity(value, "GPU")
    assert fragment in str(info.value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10 * SCALE), min_size=1, max_size=30))
def test_quantity_sums_are_exact(units):
    quantities = [Quantity.from_units(u) for u in units]
    total = Quantity(0)
    for q in quantities:
        total = total + q
    assert total.units == sum(units)
    for q in reversed(quantities):
        total = total - q
    assert total == Quantity(0)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6))
def test_quantity_order_follows_units(a, b):
    qa, qb = Quantity.from_units(a), Quantity.from_units(b)
    assert (qa < qb) == (a < b)
    assert (qa == qb) == (a == b)
    assert (qa <= qb) == (a <= b)
    assert (qa > qb) == (a > b)
    assert (hash(qa) == hash(qb)) or a != b


def test_a_quantity_equals_a_number_only_when_it_is_that_number():
    # 1/3 rounds to 0.3333: equal to 0.3333, not to 1/3 (equal values must hash alike)
    assert Quantity(1 / 3) != 1 / 3
    assert Quantity(1 / 3) == 0.3333
    assert hash(Quantity(1 / 3)) == hash(0.3333)
    assert Quantity(1 / 3) < 1 / 3 < Quantity(0.3334)
    assert len({Quantity(1 / 3), 1 / 3, 0.3333}) == 2


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.0001, max_value=1e6, allow_nan=False),
       st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
def test_equal_quantities_and_numbers_hash_alike(value, other):
    q = Quantity(value)
    for number in (value, other, float(q), round(value)):
        if q == number:
            assert hash(q) == hash(number)
        assert (q < number) + (q == number) + (q > number) == 1
