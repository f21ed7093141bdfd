"""The comm's messages: what the frontend may send, checked by hand; what the kernel sends.

Every message's data is an envelope ``{"v": 1, "kind": ..., ...}``. The frontend sends
``command`` (an ``id`` of 1 to 64 characters and one of :data:`COMMANDS` with exactly its
fields); :func:`read_command` checks types, required and unknown fields, string lengths
(at most 256) and the size (at most 16 KiB), and raises :class:`BadMessage` naming the
problem. The kernel answers with :func:`reply` or, for a message with no usable id,
:func:`error`, and sends ``snapshot`` envelopes whose data :func:`status_data` builds and
:func:`fit` keeps under 64 KiB.

Pure functions of their arguments: no threads, no comms, no scheduler.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..model.queues import QUEUE_STATES
from ..views.display import LIMIT, MIME, status_bundle
from ..views.snapshot import Snapshot
from ..views.timeline import WINDOW, timeline

TARGET = "jupyter_sched"
VERSION = 1
MAX_IN = 16 * 1024      # bytes of JSON a received message may take
MAX_OUT = 64 * 1024     # bytes a sent comm message may take, all of its content
_ROOM = 512             # of MAX_OUT: the envelope, the time and the comm message around the data
MIN_INTERVAL = 0.25     # seconds between two snapshots to one comm, at least
MAX_ID = 64
MAX_STRING = 256
_ENVELOPE = ("v", "kind", "id", "command")
_DROP = ("waiting", "timeline", "running", "queues", "nodes")  # rows dropped first to last
_KEEP = ("version", "kind", "time", "gpu", "counts", "window")


# -- reading what the frontend sends ---------------------------------------------------------------

class BadMessage(ValueError):
    """A message that cannot be carried out; ``id`` is its id when it had a usable one."""

    def __init__(self, problem: str, msg_id: str | None = None) -> None:
        super().__init__(problem)
        self.id = msg_id


@dataclass(frozen=True)
class Command:
    id: str
    name: str
    args: dict[str, Any]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _show(value: Any) -> str:
    """``value`` for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _string(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, not {_json_type(value)}"
    if not value or len(value) > MAX_STRING:
        return f"must be 1 to {MAX_STRING} characters long, not {len(value)}"
    return None


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, not {_show(value)}"


def _queue_state(value: Any) -> str | None:
    if isinstance(value, str) and value in QUEUE_STATES:
        return None
    return f"must be one of {', '.join(map(repr, QUEUE_STATES))}, not {_show(value)}"


def _interval(value: Any) -> str | None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and math.isfinite(value) and value >= MIN_INTERVAL:
        return None
    return f"must be a number of seconds >= {MIN_INTERVAL}, not {_show(value)}"


COMMANDS: dict[str, dict[str, Callable[[Any], str | None]]] = {
    "cancel": {"task": _string},
    "cancel_all": {},
    "drain": {"node": _string, "on": _boolean},
    "queue": {"queue": _string, "state": _queue_state},
    "snapshot": {},
    "subscribe": {"interval": _interval},
}
"""Each command's fields and their checks (a problem in words, or None)."""


def usable_id(data: Any) -> str | None:
    """The message's ``id`` when it is one a reply can carry."""
    msg_id = data.get("id") if isinstance(data, dict) else None
    return msg_id if isinstance(msg_id, str) and 0 < len(msg_id) <= MAX_ID else None


def over_size(value: Any, limit: int = MAX_IN) -> bool:
    """Whether ``value`` takes more than ``limit`` bytes as JSON. Counts from below and stops
    once over, without recursion: a huge or deeply nested message costs no more than a small one.
    """
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += 2 + (len(item) if len(item) > limit else len(item.encode("utf-8", "replace")))
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            if total <= limit:
                for key, val in item.items():
                    stack += (key, val)
        elif isinstance(item, list):
            total += 2 + len(item)
            if total <= limit:
                stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        else:
            total += 5  # a float, true, false or null
        if total > limit:
            return True
    return False


def _field(data: dict, key: str, msg_id: str | None) -> Any:
    if key not in data:
        raise BadMessage(f"the message has no {key!r}", msg_id)
    return data[key]


def read_command(data: Any, buffers: Any = None) -> Command:
    """The command ``data`` asks for, checked; :class:`BadMessage` names what is wrong."""
    if not isinstance(data, dict):
        raise BadMessage(f"a message must be a JSON object, not {_json_type(data)}")
    msg_id = usable_id(data)
    if buffers:
        raise BadMessage("binary buffers are not part of this protocol", msg_id)
    if over_size(data):
        raise BadMessage(f"the message is over {MAX_IN:,} bytes", msg_id)
    version = _field(data, "v", msg_id)
    if type(version) is not int or version != VERSION:
        raise BadMessage(f"unsupported protocol version {_show(version)}; this kernel speaks "
                         f"version {VERSION}", msg_id)
    kind = _field(data, "kind", msg_id)
    if kind != "command":
        raise BadMessage(f"unknown message kind {_show(kind)}; the kernel accepts only "
                         "'command'", msg_id)
    if msg_id is None:
        raise BadMessage(f"'id' must be a string of 1 to {MAX_ID} characters, not "
                         f"{_show(_field(data, 'id', None))}")
    name = _field(data, "command", msg_id)
    if not isinstance(name, str) or name not in COMMANDS:
        raise BadMessage(f"unknown command {_show(name)}; commands: {', '.join(COMMANDS)}",
                         msg_id)
    fields = COMMANDS[name]
    extra = sorted(k for k in data if k not in _ENVELOPE and k not in fields)
    if extra:
        takes = ", ".join(map(repr, fields)) or "no arguments"
        raise BadMessage(f"unknown field {', '.join(_show(k) for k in extra[:5])} for command "
                         f"{name!r} (it takes {takes})", msg_id)
    for field, check in fields.items():
        if field not in data:
            raise BadMessage(f"command {name!r} needs {field!r}", msg_id)
        problem = check(data[field])
        if problem:
            raise BadMessage(f"{field!r} {problem}", msg_id)
    return Command(msg_id, name, {field: data[field] for field in fields})


# -- what the kernel sends ------------------------------------------------------------------------

def reply(msg_id: str, ok: bool, error: str | None = None, result: Any = None) -> dict:
    return {"v": VERSION, "kind": "reply", "id": msg_id, "ok": ok, "error": error,
            "result": result}


def error(problem: str) -> dict:
    return {"v": VERSION, "kind": "error", "error": problem}


def status_data(snapshot: Snapshot, window: float = WINDOW,
                shares_of: Callable[[str], Any] | None = None, rows: int = LIMIT) -> dict:
    """The ``status`` payload of ``snapshot`` with the comm's ``timeline``, ``window`` and
    ``truncated`` (false until :func:`fit` drops rows)."""
    data = dict(status_bundle(snapshot, rows)[MIME])
    data["timeline"] = timeline(snapshot, window, shares_of)
    data["window"] = window
    data["truncated"] = False
    return data


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as null (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    # as the kernel's session encodes messages, so sizes measured here are the sizes sent
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def fit(data: dict, limit: int = MAX_OUT - _ROOM) -> tuple[dict, str]:
    """``data`` with rows dropped until its JSON takes at most ``limit`` bytes, and its content
    key: that JSON without ``time``, equal for equal content whenever it was taken."""
    try:
        key = _dumps({k: v for k, v in data.items() if k != "time"})
    except ValueError:
        data = _finite(data)
        key = _dumps({k: v for k, v in data.items() if k != "time"})
    if len(key.encode()) <= limit:
        return data, key
    data = {**data, "truncated": True}
    for name in _DROP:
        while data.get(name):
            data[name] = data[name][:len(data[name]) // 2]
            key = _dumps({k: v for k, v in data.items() if k != "time"})
            if len(key.encode()) <= limit:
                return data, key
    data = {**{k: data[k] for k in _KEEP if k in data}, **{k: [] for k in _DROP},
            "truncated": True}
    return data, _dumps({k: v for k, v in data.items() if k != "time"})


__all__ = [
    "COMMANDS", "MAX_ID", "MAX_IN", "MAX_OUT", "MAX_STRING", "MIN_INTERVAL", "TARGET", "VERSION",
    "BadMessage", "Command", "error", "fit", "over_size", "read_command", "reply", "status_data",
    "usable_id",
]
