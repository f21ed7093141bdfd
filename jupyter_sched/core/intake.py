"""What each event's fields must be, checked before the core reads any of them.

The core's compiled modules read an event's fields as the types its class declares; a value
of another type would stop them with a bare TypeError, maybe halfway through a change. So
``check(event)`` looks at every field first and refuses the event with a ValueError that
names the event, the field, the value and what it must be. A plain module: it stays
interpreted, like the events themselves.

Only types are checked here; what a value means (a known task, a finite time, a share from 0
to 1) is the handler's to check, as before. Except for the core's settings (``Configure``):
they are read by compiled code on every cycle and mean nothing against the books, so their
values are checked here too (:data:`VALUES`), each named with what would be valid, and
:func:`settings` makes a checked ``Configure`` for the core's constructor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ..model.allocation import NodeResources
from ..model.limits import check_seconds
from ..model.specs import GangSpec, SlotSpec, TaskSpec
from . import events as ev

NoneType = type(None)


def _is_int(value: object) -> bool:
    return type(value) is int  # (not bool: True is no count)


def _mapping_of(key: Callable[[object], bool], value: Callable[[object], bool]
                ) -> Callable[[object], bool]:
    def ok(mapping: object) -> bool:
        return isinstance(mapping, Mapping) and all(
            key(k) and value(v) for k, v in mapping.items())
    return ok


def _tuple_of(cls: type) -> Callable[[object], bool]:
    return lambda items: type(items) is tuple and all(type(i) is cls for i in items)


def _is_slot(slot: object) -> bool:
    return type(slot) is SlotSpec and type(slot.id) is str and (
        slot.pinned is None or (type(slot.pinned) is frozenset
                                and all(_is_int(i) for i in slot.pinned)))


def _is_str(value: object) -> bool:
    return type(value) is str


def _optional(test: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or test(value)


# what each kind of field must be: exact types (looked up at once) or a test, and in words
_EXACT: dict[str, tuple[type, ...]] = {
    "str": (str,), "str?": (str, NoneType), "int?": (int, NoneType), "bool": (bool,),
    "bool?": (bool, NoneType), "gang?": (GangSpec, NoneType), "resources": (NodeResources,),
    "number": (int, float), "number?": (int, float, NoneType),
}
_TESTS: dict[str, Callable[[object], bool]] = {
    "specs": _tuple_of(TaskSpec),
    "ids": _tuple_of(str),
    "slots": lambda slots: type(slots) is tuple and all(map(_is_slot, slots)),
    "slot": _is_slot,
    "labels": _mapping_of(_is_str, _is_str),
    "labels?": _optional(_mapping_of(_is_str, _is_str)),
    "amounts?": _optional(_mapping_of(_is_str, _is_int)),
    "devices?": _optional(_mapping_of(_is_str, _mapping_of(_is_int, _optional(_is_int)))),
    "shares": _mapping_of(_is_str, _mapping_of(_is_int, _is_int)),
}
_WORDS = {
    "str": "a string", "str?": "a string or None", "int?": "a whole number or None",
    "bool": "True or False", "bool?": "True, False or None", "gang?": "a GangSpec or None",
    "resources": "a NodeResources", "number": "a number", "number?": "a number or None",
    "specs": "a tuple of TaskSpec", "ids": "a tuple of task ids (strings)",
    "slots": "a tuple of SlotSpec (a string id, pinned a frozenset of device indices or None)",
    "slot": "a SlotSpec (a string id, pinned a frozenset of device indices or None)",
    "labels": "a mapping of strings to strings",
    "labels?": "a mapping of strings to strings, or None",
    "amounts?": "a mapping of resource names to whole numbers of units, or None",
    "devices?": "a mapping of resource names to {device index: memory in bytes or None}, "
                "or None",
    "shares": "a mapping of resource names to {device index: whole units}",
}

_OWN: dict[type, tuple[tuple[str, str], ...]] = {
    ev.Submit: (("tasks", "specs"), ("gang", "gang?"), ("on_closed", "str")),
    ev.Cancel: (("task", "str"), ("reason", "str")),
    ev.Finished: (("task", "str"), ("attempt", "int?")),
    ev.Failed: (("task", "str"), ("error", "str"), ("lost", "bool"), ("attempt", "int?"),
                ("unstarted", "bool")),
    ev.Stopped: (("task", "str"), ("attempt", "int?")),
    ev.NodeAdded: (("name", "str"), ("resources", "resources"), ("labels", "labels"),
                   ("kind", "str"), ("threads", "bool"), ("slots", "slots")),
    ev.NodeRemoved: (("name", "str"), ("reason", "str")),
    ev.NodeUpdated: (("name", "str"), ("totals", "amounts?"), ("devices", "devices?"),
                     ("labels", "labels?"), ("cordoned", "bool?"), ("declared", "bool?")),
    ev.SlotAdded: (("node", "str"), ("slot", "slot")),
    ev.SlotRemoved: (("node", "str"), ("slot", "str"), ("reason", "str")),
    ev.SlotCapped: (("node", "str"), ("slot", "str"), ("cap", "int?")),
    ev.QueueSet: (("name", "str"), ("parent", "str?"), ("weight", "int?"),
                  ("capability", "amounts?"), ("guarantee", "amounts?"), ("priority", "int?"),
                  ("state", "str?"), ("max_running", "int?")),
    ev.Steer: (("task", "str"), ("action", "str"), ("priority", "int?")),
    ev.Configure: (("policy", "str?"), ("reservation_after", "number?"), ("preemption", "bool?"),
                   ("hybrid_threshold", "number?"), ("pipeline", "number?"),
                   ("fair_share_half_life", "number?")),
    ev.HeldElsewhere: (("node", "str"), ("device_shares", "shares"), ("reason", "str")),
    ev.Tick: (("now", "number"),),
    ev.Forget: (("tasks", "ids"),),
}
FIELDS = {cls: (*fields, ("cause", "str")) for cls, fields in _OWN.items()}
"""Each event's fields and their kinds, in the order they are checked: its own, then the
``cause`` every event ends with."""

def _policy(value: object, what: str) -> None:
    if value not in ev.POLICIES:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(ev.POLICIES)}")


def _after(value: object, what: str) -> None:
    if value != math.inf:  # (infinite: never reserve)
        check_seconds(value, what)


def _fraction(value: object, what: str) -> None:
    if not (isinstance(value, (int, float)) and 0 <= value <= 1):
        raise ValueError(f"{what} {value!r} must be a number from 0 to 1")


VALUES: dict[type, tuple[tuple[str, Callable[[object, str], object]], ...]] = {
    ev.Configure: (("policy", _policy), ("reservation_after", _after),
                   ("hybrid_threshold", _fraction), ("pipeline", check_seconds),
                   ("fair_share_half_life", check_seconds)),
}
"""The fields whose values are checked here too (past their kinds), and each one's check."""


def _no(value: object) -> bool:
    return False  # (a kind of exact types has no other test)


# (resolved once: each field's exact types, else its test)
_PLAN = {cls: tuple((name, _EXACT.get(kind, ()), _TESTS.get(kind, _no), kind)
                     for name, kind in fields)
         for cls, fields in FIELDS.items()}


def check(event: ev.Event) -> str:
    """Refuse ``event`` (ValueError) unless each field is of its kind (:data:`FIELDS`); its
    ``cause``, then (a string: the core reads it without a look of its own). ``Core.handle``
    first sees the events of every task's life and the clock's in their common shape in one
    look (``state._at_once``, compiled), and asks here for the others."""
    for name, exact, test, kind in _PLAN[type(event)]:
        value = getattr(event, name)
        if type(value) in exact or test(value):
            continue
        raise ValueError(f"{type(event).__name__}({name}={value!r}): {name} must be "
                         f"{_WORDS[kind]}")
    for name, rule in VALUES.get(type(event), ()):
        value = getattr(event, name)
        if value is not None:
            try:
                rule(value, name)
            except ValueError as error:
                raise ValueError(f"{type(event).__name__}({name}={value!r}): {error}") from None
    return event.cause


def settings(**values: object) -> ev.Configure:
    """A ``Configure`` of ``values``, checked as ``handle`` checks one (a ValueError naming
    the first that is not valid)."""
    event = ev.Configure(**values)  # type: ignore[arg-type]  # (checked next)
    check(event)
    return event
