"""Building a submission: checking what ``submit`` and ``map`` are given, in the caller's thread.

Everything here needs no scheduler state and raises ``ValueError`` naming the bad value before
anything is queued: the options every task of a submission shares (:func:`common`), its specs
(:func:`task_spec`), its work (:func:`work`: a callable with its arguments, or cell source with
the namespace it runs in), a gang (:func:`parse_gang`). :func:`visible_devices` says what the
local node's GPU indices refer to in the environment a task gets.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..executors.base import Work
from ..executors.local.output import current_cell, current_parent
from ..model.limits import MAX_GANG_SIZE, check_int, check_seconds, check_whole
from ..model.resources import Demand
from ..model.tasks import GangSpec, TaskSpec

if TYPE_CHECKING:
    from ..host.discovery import HostInfo

COMMON = ("resources", "gpu_memory", "queue", "priority", "target", "node", "labels",
           "time_limit", "retries", "preemptible", "batch", "min_runtime")


def common(default_queue: str, resources: object = None, gpu_memory: object = None,
           queue: str | None = None, priority: int = 0, target: str = "any",
           node: str | None = None, labels: object = None, time_limit: float | None = None,
           retries: int = 0, preemptible: bool = False, batch: bool | None = None,
           min_runtime: object = 0.0) -> dict[str, Any]:
    """The checked options of a submission's tasks, as ``TaskSpec`` fields (``queue`` falls
    back to ``default_queue``). ``resources`` may be a parsed ``Demand`` (with no
    ``gpu_memory``): it is taken as it is. ``batch`` is ``preemptible`` by its user's name
    (None: as ``preemptible`` says); ``min_runtime``: seconds a batch task runs before it may
    be preempted."""
    if isinstance(resources, Demand) and gpu_memory is None:
        demand = resources
    else:
        demand = Demand.parse(resources, gpu_memory)
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)):
            raise ValueError(f"time limit {time_limit!r} must be a number of seconds")
        time_limit = float(time_limit)
    if not isinstance(preemptible, bool):
        raise ValueError(f"preemptible {_short(preemptible)} must be True or False")
    if batch is not None:
        if not isinstance(batch, bool):
            raise ValueError(f"batch {_short(batch)} must be True (batch work, which "
                             "preemption may stop) or False (interactive)")
        if preemptible and not batch:
            raise ValueError("batch=False (interactive) and preemptible=True contradict each "
                             "other; batch=True is the same as preemptible=True")
        preemptible = batch
    min_runtime = check_seconds(min_runtime, "min_runtime")
    if min_runtime and not preemptible:
        raise ValueError(f"min_runtime {min_runtime:g} is for batch work (batch=True); an "
                         "interactive task is never preempted")
    return dict(demand=demand, queue=queue or default_queue, priority=priority,
                target=target, node=node, selector=selector(labels),
                time_limit=time_limit, retries=retries, preemptible=preemptible,
                min_runtime=min_runtime)


def family(fn: Callable | None) -> str:
    """What a task runs, as pipelining compares tasks: a function's module and qualified name
    ("" for cell source and callables without a name: never sent ahead)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if fn is None or not isinstance(name, str):
        return ""
    return f"{getattr(fn, '__module__', None) or ''}.{name}"[-256:]


def task_spec(task_id: str, name: str, options: Mapping[str, Any]) -> TaskSpec:
    """A checked spec of one task with the options from :func:`common`."""
    spec = TaskSpec(task_id, name=name, **options)
    spec.check()
    return spec


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})  # shared by the many calls that have none


def work(fn, args, kwargs, code, namespace, push, pull, parent, line=None) -> Work:
    """What a task runs: ``fn(*args, **kwargs)``, or ``code`` in ``namespace`` (the notebook's
    by default); output goes to the cell of ``parent`` (by default the calling code's). Cell
    source (``%%sched``) keeps the id of the notebook cell that submitted it, when the
    frontend said which (a sidebar jumps to it); a callable keeps none."""
    if (fn is None) == (code is None):
        raise ValueError("submit a callable (fn) or cell source (code=), one of the two")
    if fn is not None and not callable(fn):
        raise ValueError(f"{fn!r} is not callable; pass code= to run cell source")
    if code is not None:
        if not isinstance(code, str):
            raise ValueError(f"code must be a string of Python source, not {type(code).__name__}")
        if args:
            raise ValueError("positional arguments go with a callable, not with code=")
        if namespace is None:
            namespace = user_namespace()
        code = transform_cell(code)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"kwargs {kwargs!r} must be a mapping of keyword arguments")
    return Work(fn=fn, args=tuple(args), kwargs=dict(kwargs) if kwargs else _NO_KWARGS, code=code,
                namespace=namespace, push=variable_names(push, "push"),
                pull=variable_names(pull, "pull"),
                parent=parent if parent is not None else current_parent(), line=line,
                cell=current_cell() if code is not None else None)


def transform_cell(code: str) -> str:
    """Cell source as plain Python (``%magic``, ``!cmd``, ``x?``): once, at submission, by the
    kernel's shell as it would run the cell, else by IPython's transformer when IPython is here;
    every executor then runs it as it is."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        return shell.transform_cell(code)
    if "%" not in code and "!" not in code and "?" not in code:
        return code
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # plain Python: the cell is Python already
        return code
    return TransformerManager().transform_cell(code)


def user_namespace() -> dict:
    """The notebook's namespace (the shell's), else ``__main__``'s."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        return shell.user_ns
    return sys.modules["__main__"].__dict__


def variable_names(value: object, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    for n in names:
        if not isinstance(n, str) or not n.isidentifier():
            raise ValueError(f"{what}: {n!r} is not a variable name")
    return tuple(names)


def selector(labels: object) -> tuple[tuple[str, str], ...]:
    """A node selector, ``{"gpu.model": "A100"}`` or ``"gpu.model=A100,zone=a"``, as pairs."""
    if labels is None:
        return ()
    if isinstance(labels, str):
        pairs = []
        for part in filter(None, (p.strip() for p in labels.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"label selector {part!r} must be written KEY=VALUE")
            pairs.append((key.strip(), value.strip()))
        labels = dict(pairs)
    if not isinstance(labels, Mapping):
        raise ValueError(f"labels {_short(labels)} must be a mapping such as "
                         "{'gpu.model': 'A100'}")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"label {_short(key)}: {_short(value)}: a label and its value are "
                             "strings, such as {'gpu.model': 'A100'}")
    return tuple(sorted(labels.items()))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


TASK_ID = re.compile(r"t[0-9]+")  # what task ids look like


def check_task_name(name: object) -> str:
    """A name given to a task: a string, not one that reads as another task's id."""
    if not isinstance(name, str):
        raise ValueError(f"name {_short(name)} must be a string")
    if not name.strip():
        raise ValueError(f"name {name!r} is empty; give the task a name, or none (name=None: "
                         f"the function's own)")
    if TASK_ID.fullmatch(name):
        raise ValueError(f"name {name!r} reads as a task id (ids are t1, t2, ...): "
                         f"%sched cancel {name} would mean that task; choose another name")
    return name


def default_name(fn: Callable | None, code: str | None) -> str:
    """A task's name when none is given: the callable's ``__name__``; cells get none."""
    if fn is not None:
        return getattr(fn, "__name__", "") or ""
    return ""


def parse_gang(gang: object, strategy: str = "pack") -> GangSpec | None:
    """``"ddp:4"``, ``"ddp:4:3"``, ``("ddp", 4[, 3])`` or a ``GangSpec`` -> a checked spec."""
    if gang is None:
        return None
    if isinstance(gang, GangSpec):
        spec = gang
    else:
        parts = gang.split(":") if isinstance(gang, str) else gang
        if not isinstance(parts, (list, tuple)) or len(parts) not in (2, 3):
            raise ValueError(f"gang {gang!r} must be NAME:SIZE or NAME:SIZE:MIN, e.g. 'ddp:4'")
        if not isinstance(parts[0], str) or not parts[0].strip():
            raise ValueError(f"gang {_short(gang)} needs a name, e.g. 'ddp:4'")
        name = parts[0].strip()
        # in a string, ASCII digits; in a tuple, ints (the one way numbers are read)
        check = check_whole if isinstance(gang, str) else check_int
        try:
            size = check(parts[1], "size", 1, MAX_GANG_SIZE)
            least = check(parts[2], "min", 1, MAX_GANG_SIZE) if len(parts) == 3 else None
        except ValueError as err:
            raise ValueError(f"gang {_short(gang)}: {err}") from None
        spec = GangSpec(name, size, least, strategy)
    try:
        spec.check()
    except ValueError as err:
        if isinstance(gang, GangSpec):
            raise
        raise ValueError(f"gang {gang!r}: {str(err).removeprefix(f'gang {spec.name!r}: ')}"
                         ) from None
    return spec


def visible_devices(host: HostInfo) -> str | None:
    """What the local node's GPU indices refer to when a task's env is made."""
    if host.gpus_declared:
        return ",".join(str(g.index) for g in host.gpus)
    return host.cuda_visible_devices


__all__ = ["COMMON", "common", "default_name", "family", "parse_gang", "selector", "task_spec",
           "user_namespace", "variable_names", "visible_devices", "work"]
