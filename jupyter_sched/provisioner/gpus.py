"""What a provisioned kernel asks for: ``--gpus`` as one share of a GPU or whole GPUs."""

from __future__ import annotations

from ..model.quantity import SCALE, format_units, to_units

VALID = ("a share of one GPU above 0 and at most 1 (0.25, 0.5, 1), or a whole number of GPUs "
         "(2, 4)")


def parse_gpus(value: object, what: str = "--gpus") -> tuple[int, int]:
    """``(units, count)``: ``count`` devices of ``units`` each (a share: count 1; whole GPUs:
    units ``SCALE``). A ValueError naming the value and what is valid otherwise: 0, negatives,
    NaN, 1.5 (a GPU and a half is neither a share of one GPU nor whole GPUs)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r} is not a number; give {VALID}")
    try:
        units = to_units(value, what, limit=4096)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} {value!r} is not valid ({err}); give {VALID}") from None
    if units <= 0:
        raise ValueError(f"{what} {value!r} asks for no GPU; give {VALID}")
    if units <= SCALE:
        return units, 1
    if units % SCALE:
        raise ValueError(f"{what} {value!r} is more than one GPU but not a whole number of "
                         f"them; give {VALID}")
    return SCALE, units // SCALE


def gpus_text(units: int, count: int) -> str:
    """``0.5`` or ``2``: the value as ``--gpus`` takes it."""
    return format_units(units * count)


__all__ = ["VALID", "gpus_text", "parse_gpus"]
