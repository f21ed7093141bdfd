"""Fixed-point quantities: integer units of 1/10,000, exact arithmetic.

Every amount the scheduler reasons about (0.25 of a GPU, 3 CPUs, 16 GiB) is held as an ``int``
number of units, ``SCALE`` units to one. Floats are rounded to the nearest unit on the way in
(0.1 + 0.2 is 3,000 units, exactly), never truncated, so sums and comparisons are exact.

The :class:`Quantity` wrapper is for people; the core works on the bare ``int`` units.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from functools import total_ordering
from typing import Final

SCALE: Final = 10_000
"""Units in one whole: a quantity of 1 is 10,000 units (Ray's precision)."""

MAX_COUNT: Final = 10**9
"""The largest amount of a counted resource (CPU, GPU, custom) anyone can mean."""

MAX_BYTES: Final = 2**60
"""The largest byte amount (1 EiB) anyone can mean."""

_SIZE_SUFFIXES = {
    "": 1,
    "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024, "ki": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2, "mi": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "gi": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4, "ti": 1024**4,
    "p": 1000**5, "pb": 1000**5, "pib": 1024**5, "pi": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_VALID_SUFFIXES = (
    "B, KB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)"
)


_ASCII_NUMBER = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
    re.IGNORECASE)


def _number(value: object, name: str) -> float | int:
    """Turn ``value`` (int, float or numeric string) into a finite, non-negative number."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not an amount; give a number such as 1 or 0.5")
    if isinstance(value, Quantity):
        return to_float(value.units)
    if isinstance(value, str):
        text = value.strip()
        if (text.startswith("-") and _ASCII_NUMBER.fullmatch(text)
                and text[1:].lower() not in ("inf", "infinity", "nan")):  # (-0 too)
            raise ValueError(f"{name}={value!r} is negative; amounts must be 0 or more")
        if not _ASCII_NUMBER.fullmatch(text):  # int() and float() also take "1_000" and the
            # digits of other scripts, which no size takes: an amount is written one way
            raise ValueError(
                f"{name}={value!r} is not a number; give an amount such as 1, 0.5 or '2' "
                "(ASCII digits, no underscores)"
            )
        try:
            number: float | int = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(
                    f"{name}={value!r} is not a number; give an amount such as 1, 0.5 or '2'"
                ) from None
    elif isinstance(value, (int, float)):
        number = value
    else:
        raise ValueError(
            f"{name}={value!r} has type {type(value).__name__}; give an int, a float or a string"
        )
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{name}={value!r} is not a finite amount; give a number such as 1 or 0.5")
    if number < 0:
        raise ValueError(f"{name}={value!r} is negative; amounts must be 0 or more")
    return number


def to_units(value: object, name: str = "amount", *, limit: int = MAX_COUNT) -> int:
    """Amount -> units, rounded to the nearest unit (of the decimal as written).

    >>> to_units(0.25), to_units("2"), to_units(1 / 3)
    (2500, 20000, 3333)

    Errors name the resource and the value: negatives, NaN/inf, non-zero amounts below one unit
    (0.00001 would round to nothing, silently), and amounts above ``limit``.
    """
    number = _number(value, name)
    if number > limit:
        raise ValueError(f"{name}={value!r} is absurdly large; the most is {limit:,}")
    if isinstance(number, int):
        return number * SCALE
    # exact, from the decimal as written (0.33335 is 3333.5 units, not the float just below
    # it), and not through a float product, which can land on the wrong side of a half unit
    # (978851756.9661499 * 10000 is ...661.5 as a float). Ties go to the even unit.
    written = value.strip() if isinstance(value, str) else repr(number)
    units = round(Fraction(written) * SCALE)
    if units == 0 and number > 0:
        raise ValueError(
            f"{name}={value!r} is below the smallest amount the scheduler can hold "
            f"(1/{SCALE:,} = {1 / SCALE}); request 0 or at least {1 / SCALE}"
        )
    return units


def to_exact_units(value: object, name: str = "amount", *, limit: int = MAX_COUNT) -> int:
    """Amount -> units, refusing an amount that is not a whole number of units as written
    (a request is held exactly, or not taken: 0.12345 is neither 0.1234 nor 0.1235).

    >>> to_exact_units("0.1234"), to_exact_units(0.5)
    (1234, 5000)
    """
    units = to_units(value, name, limit=limit)
    number = _number(value, name)
    if isinstance(number, int):
        return units
    written = value.strip() if isinstance(value, str) else repr(number)
    if Fraction(written) * SCALE != units:
        step = 1 / SCALE
        low = math.floor(Fraction(written) * SCALE)
        raise ValueError(
            f"{name}={value!r} cannot be held exactly: amounts go in steps of {step}; ask for "
            f"{format_units(max(low, 1))} or {format_units(low + 1)}")
    return units


def parse_bytes(value: object, name: str = "memory") -> int:
    """A size in bytes from an int, a float or a string with an optional suffix.

    >>> parse_bytes("16GiB"), parse_bytes("512MB"), parse_bytes(1024)
    (17179869184, 512000000, 1024)
    """
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if not match:
            raise ValueError(
                f"{name}={value!r} is not a size; give bytes or a number with a suffix "
                f"such as '16GiB' or '512MB' ({_VALID_SUFFIXES})"
            )
        digits, suffix = match.groups()
        factor = _SIZE_SUFFIXES.get(suffix.lower())
        if factor is None:
            raise ValueError(
                f"{name}={value!r} has an unknown size suffix {suffix!r}; use {_VALID_SUFFIXES}"
            )
        number = _number(digits, name)
        amount = number * factor
    else:
        amount = _number(value, name)
    if amount > MAX_BYTES:
        raise ValueError(
            f"{name}={value!r} is absurdly large; the most is {MAX_BYTES:,} bytes (1 EiB)"
        )
    result = round(amount)
    if result == 0 and amount > 0:
        raise ValueError(f"{name}={value!r} is less than one byte; request 0 or at least 1 byte")
    return int(result)


def to_float(units: int) -> float:
    """Units -> a plain float (5000 -> 0.5): the one way back from fixed point."""
    return units / SCALE


def units_to_shares(devices: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, float]]:
    """Per-device units -> float shares, devices in index order: ``{"GPU": {0: 0.5}}``."""
    return {name: {i: to_float(u) for i, u in sorted(shares.items())}
            for name, shares in devices.items()}


def from_units(units: int) -> int | float:
    """Units -> the plainest number: an int when whole, else a float (2.0 -> 2, 0.25 -> 0.25)."""
    whole, rest = divmod(units, SCALE)
    return whole if rest == 0 else to_float(units)


def format_units(units: int) -> str:
    """Units as short text: 20000 -> '2', 2500 -> '0.25', 3333 -> '0.3333'."""
    value = from_units(units)
    return str(value) if isinstance(value, int) else f"{value:.4f}".rstrip("0")


def format_bytes(amount: int) -> str:
    """Bytes as short binary text: 17179869184 -> '16 GiB'."""
    for suffix, factor in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3),
                           ("MiB", 1024**2), ("KiB", 1024)):
        if amount >= factor:
            value = amount / factor
            return f"{value:.0f} {suffix}" if value == int(value) else f"{value:.1f} {suffix}"
    return f"{amount} B"


@total_ordering
class Quantity:
    """An exact amount: ``Quantity(0.1) + Quantity(0.2) == Quantity(0.3)``.

    Everything derives from the integer ``units``; between quantities ``==`` and ``<`` compare
    them. A plain number is compared with the number the quantity is, ``units / SCALE``
    (``Quantity(0.3) == 0.3``), never with its own rounding: ``Quantity(1/3)`` is 0.3333 and
    differs from ``1/3``, so that equal values always hash alike (rounding would make
    ``Quantity(1/3)`` equal to both 1/3 and 0.3333, which cannot share one hash).
    """

    __slots__ = ("units",)
    units: int

    def __init__(self, value: object = 0, name: str = "amount") -> None:
        self.units = value.units if isinstance(value, Quantity) else to_units(value, name)

    @classmethod
    def from_units(cls, units: int) -> Quantity:
        q = cls.__new__(cls)
        q.units = units
        return q

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity.from_units(self.units + _units_of(other))

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity.from_units(self.units - _units_of(other))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.units == other.units
        if isinstance(other, int) and not isinstance(other, bool):
            return self.units == other * SCALE
        if isinstance(other, float):
            return to_float(self.units) == other  # NaN and infinities equal no amount
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.units < other.units
        if isinstance(other, int) and not isinstance(other, bool):
            return self.units < other * SCALE
        if isinstance(other, float):
            return to_float(self.units) < other
        return NotImplemented

    def __hash__(self) -> int:
        # hash like the plain number it equals (Quantity(2) == 2, Quantity(0.5) == 0.5)
        return hash(to_float(self.units))

    def __float__(self) -> float:
        return to_float(self.units)

    def __bool__(self) -> bool:
        return self.units != 0

    def __repr__(self) -> str:
        return f"Quantity({format_units(self.units)})"

    def __str__(self) -> str:
        return format_units(self.units)


def _units_of(other: object) -> int:
    if isinstance(other, Quantity):
        return other.units
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return round(other * SCALE)
    raise TypeError(f"cannot combine a Quantity with {other!r}")
