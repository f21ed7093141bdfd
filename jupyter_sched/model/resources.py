"""Resource names, requests and resource sets.

A request (a :class:`Demand`) is a set of named amounts in fixed-point units (see
:mod:`jupyter_sched.model.quantity`) plus, optionally, an amount of GPU memory per device. Names:

* ``CPU`` — cores, any amount (``0.5`` is half a core);
* ``GPU`` — a *unit-instance* resource: a fraction below 1 is a share of one device, a whole
  number is that many devices; ``1.5`` is an error (shares of two devices are never combined);
* ``memory`` — bytes; accepts ``16GiB``, ``512MB``, ``1e9``;
* any other identifier — a custom resource, any amount.

Aliases people type are folded: ``gpus``/``gpu`` -> ``GPU``, ``cpus``/``cpu`` -> ``CPU``,
``mem`` -> ``memory``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from .quantity import (
    MAX_BYTES,
    SCALE,
    format_bytes,
    format_units,
    from_units,
    parse_bytes,
    to_exact_units,
    to_float,
)

CPU: Final = "CPU"
GPU: Final = "GPU"
MEMORY: Final = "memory"

UNIT_INSTANCE = frozenset({GPU})
"""Resources that come as devices by default; nodes may declare more (see ``DeviceSet``)."""

_ALIASES = {
    "cpu": CPU, "cpus": CPU,
    "gpu": GPU, "gpus": GPU,
    "mem": MEMORY, "memory": MEMORY,
}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def canonical_name(name: object) -> str:
    """Fold aliases and check that ``name`` is a usable resource name."""
    if not isinstance(name, str):
        raise ValueError(f"resource name {name!r} must be a string such as 'GPU' or 'CPU'")
    stripped = name.strip()
    if not stripped:
        raise ValueError("a resource name is empty; use CPU, GPU, memory or an identifier")
    folded = _ALIASES.get(stripped.lower())
    if folded:
        return folded
    if not _NAME_RE.match(stripped):
        raise ValueError(
            f"resource name {name!r} is not an identifier; use CPU, GPU, memory, or letters, "
            "digits and underscores starting with a letter"
        )
    return stripped


def parse_amount(name: str, value: object, unit_instance: Iterable[str] = UNIT_INSTANCE) -> int:
    """One amount in units, checked for its resource.

    >>> parse_amount("GPU", 0.5), parse_amount("memory", "1KiB")
    (5000, 10240000)
    """
    if name == MEMORY:
        return parse_bytes(value, name) * SCALE
    units = to_exact_units(value, name)
    if name in unit_instance and units > SCALE and units % SCALE:
        raise ValueError(
            f"{name}={value!r}: a {name} request is either a fraction below 1 (a share of one "
            f"device) or a whole number of devices; {format_units(units)} is neither. "
            f"Ask for {units // SCALE} or {units // SCALE + 1}"
        )
    return units


def _pairs(spec: object) -> list[tuple[str, object]]:
    """``{"GPU": 1}``, ``"GPU=1,CPU=2"`` or ``["GPU=1", "CPU=2"]`` -> name/value pairs."""
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return list(spec.items())
    if isinstance(spec, str):
        items: list[object] = list(spec.split(","))
    elif isinstance(spec, Iterable):
        items = list(spec)
    else:
        raise ValueError(f"resources {spec!r} must be a mapping, 'NAME=AMOUNT,...' or a list")
    pairs: list[tuple[str, object]] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"resource {item!r} must be written NAME=AMOUNT, e.g. 'GPU=0.5'")
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise ValueError(
                f"resource {item.strip()!r} must be written NAME=AMOUNT, e.g. 'GPU=0.5'"
            )
        pairs.append((name, value.strip()))
    return pairs


def parse_resources(spec: object, unit_instance: Iterable[str] = UNIT_INSTANCE) -> dict[str, int]:
    """A resource spec -> ``{name: units}`` without zero entries.

    >>> parse_resources("GPU=0.5, memory=1KiB")
    {'GPU': 5000, 'memory': 10240000}

    Duplicate names (also through aliases, ``gpu`` and ``GPU``) are an error, not a silent
    last-one-wins.
    """
    result: dict[str, int] = {}
    spelled: dict[str, object] = {}
    for raw_name, value in _pairs(spec):
        name = canonical_name(raw_name)
        if name in result:
            raise ValueError(
                f"resource {name!r} is given twice (as {spelled[name]!r} and {raw_name!r}); "
                "give each resource once"
            )
        result[name] = parse_amount(name, value, unit_instance)
        spelled[name] = raw_name
    return {k: v for k, v in result.items() if v}


@dataclass(frozen=True, slots=True)
class Demand:
    """What one task needs: amounts in units, and optionally GPU memory per device (bytes).

    ``gpu_memory`` means: on each candidate device, the share ceil(gpu_memory / device memory);
    a device whose memory is too small (or unknown) is not a candidate. It replaces a ``GPU``
    amount (a task asks for one or the other).

    Demands are hashable and compare by value, so the scheduler caches work per demand *shape*.
    """

    amounts: tuple[tuple[str, int], ...] = ()
    gpu_memory: int = 0
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    # GPU and CPU units, read on every search of the node index: looked up once
    gpu_units: int = field(default=0, init=False, repr=False, compare=False)
    cpu_units: int = field(default=0, init=False, repr=False, compare=False)
    # the amounts as a mapping, made once: the allocations of a demand without GPU memory all
    # share it (an allocation is never changed; nothing may write to it)
    units: dict[str, int] = field(default_factory=dict, init=False, repr=False,
                                  compare=False)

    def __post_init__(self) -> None:
        # demands key the scheduler's caches: hash once, not at every lookup
        object.__setattr__(self, "_hash", hash((self.amounts, self.gpu_memory)))
        object.__setattr__(self, "gpu_units", self.get(GPU))
        object.__setattr__(self, "cpu_units", self.get(CPU))
        object.__setattr__(self, "units", dict(self.amounts))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def parse(
        cls,
        resources: object = None,
        gpu_memory: object = None,
        unit_instance: Iterable[str] = UNIT_INSTANCE,
    ) -> Demand:
        amounts = parse_resources(resources, unit_instance)
        mem = 0
        if gpu_memory is not None:
            mem = parse_bytes(gpu_memory, "gpu_memory")
            if not mem:
                raise ValueError(
                    f"gpu_memory={gpu_memory!r} asks for no GPU memory; give a size such as "
                    "'16GiB', or leave gpu_memory out to run without a GPU"
                )
            if GPU in amounts:
                raise ValueError(
                    f"ask for GPU={format_units(amounts[GPU])} or gpu_memory={gpu_memory!r}, "
                    "not both: a GPU-memory request already decides the share of a device"
                )
        return cls.of(amounts, mem)

    @classmethod
    def of(cls, amounts: Mapping[str, int], gpu_memory: int = 0) -> Demand:
        """From units already checked (no parsing)."""
        return cls(tuple(sorted((k, v) for k, v in amounts.items() if v)), gpu_memory)

    def as_dict(self) -> dict[str, int]:
        return dict(self.amounts)

    def get(self, name: str) -> int:
        for key, value in self.amounts:
            if key == name:
                return value
        return 0

    @property
    def is_empty(self) -> bool:
        return not self.amounts and not self.gpu_memory

    def scaled(self, factor: int) -> Demand:
        """This demand ``factor`` times over (for the size of a whole gang)."""
        return Demand(tuple((k, v * factor) for k, v in self.amounts), self.gpu_memory)

    def describe(self) -> str:
        """Short text: ``GPU 0.5, CPU 2, memory 16 GiB``."""
        parts = [f"{name} {format_amount(name, units)}" for name, units in self.amounts]
        if self.gpu_memory:
            parts.append(f"GPU memory {format_bytes(self.gpu_memory)} per device")
        return ", ".join(parts) or "nothing"

    def to_json(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {
            name: (units // SCALE if name == MEMORY else to_float(units))
            for name, units in self.amounts
        }
        if self.gpu_memory:
            out["gpu_memory"] = self.gpu_memory
        return out


def format_amount(name: str, units: int) -> str:
    """An amount as people read it: memory as a size, everything else as a number."""
    if name == MEMORY:
        return format_bytes(units // SCALE)
    return format_units(units)


def resources_to_json(amounts: Mapping[str, int]) -> dict[str, float | int]:
    """``{name: units}`` -> plain numbers (memory in bytes) for JSON and people."""
    return {
        name: (units // SCALE if name == MEMORY else from_units(units))
        for name, units in amounts.items()
    }


def gpu_memory_share(gpu_memory: int, device_memory: int | None) -> int | None:
    """Units of a device of ``device_memory`` bytes that ``gpu_memory`` bytes take, rounded up.

    None when the device is too small, or its memory is unknown.

    >>> gpu_memory_share(10 * 2**30, 40 * 2**30), gpu_memory_share(10 * 2**30, 8 * 2**30)
    (2500, None)
    """
    if not device_memory or gpu_memory > device_memory:
        return None
    return -(-gpu_memory * SCALE // device_memory)


__all__ = [
    "CPU",
    "GPU",
    "MAX_BYTES",
    "MEMORY",
    "SCALE",
    "UNIT_INSTANCE",
    "Demand",
    "canonical_name",
    "format_amount",
    "gpu_memory_share",
    "parse_amount",
    "parse_resources",
    "resources_to_json",
]
