"""Notebook values on their way to an engine and back: one pickle stream for each way.

What a task sends (a cell's names, or a function with its arguments) is pickled as one stream of
``(name, value)`` entries (protocol 5; big array buffers travel beside the stream, uncopied), so
that two names for one object are one object where they arrive, as in the notebook. What comes
back (the result, the names a cell set) is one stream too.

Functions and classes defined in the notebook (module ``__main__``) cannot be pickled by
reference: an engine's ``__main__`` does not have them. They travel by value:

* a function as its code, name and closure cells, the rest (defaults, ``__dict__``, qualified
  name...) set once it exists. Its globals are the namespace it arrives in: the cell's on the
  engine, the notebook's when it comes back. Notebook functions share the notebook's namespace;
  so they do on the engine;
* a class is made empty first and filled after: a method that calls ``super()`` holds its
  class in its ``__class__`` cell, so the class must exist before its methods can be made.
  (Pickling the class's methods while making it is what recursed forever before.)
* the notebook globals such a function reads (:func:`global_names`: through the functions,
  methods, closures and decorators the stream reaches) are sent with it: :class:`Packer`
  adds each one it meets, when asked to (``discover``);
* what came from the kernel goes back as itself: a notebook class sent to an engine, and
  instances of it made there, come back as the kernel's class and its instances.

Modules travel by name. A function or class of another module travels by reference when the
engine can import it by name, by value (with its module's globals) when it cannot, e.g. one
defined inside a function.
"""

from __future__ import annotations

import dataclasses
import dis
import functools
import importlib
import io
import marshal
import pickle
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["Packed", "Packer", "global_names", "unpack"]

_IN_BAND = 64 * 1024  # smaller buffers go inside the stream: one copy, a writable array
_PYTHON = sys.version_info[:2]


@dataclasses.dataclass
class Packed:
    """A stream: its bytes, its out-of-band buffers, how many bytes each entry took, the
    entries left out and why, and the objects sent by value by their token (to know them
    again when they come back)."""

    data: bytes
    buffers: list[memoryview]
    sizes: dict[str, int]
    left_out: dict[str, str]  # name -> why
    sent: dict[int, object]


class Packer:
    """Pickles entries into one stream.

    ``discover``: a callable ``(globals, name) -> bool`` saying whether a global a notebook
    function reads may be sent; each one it allows is added as an entry (once). ``origins``:
    objects that arrived by value, by ``id`` (from :func:`unpack`): they go back as
    references to the originals.
    """

    def __init__(self, discover: Callable[[Mapping, str], bool] | None = None,
                 origins: Mapping[int, tuple[int, object]] | None = None) -> None:
        self.discover = discover
        self.origins = origins or {}

    def pack(self, entries: Iterable[tuple[str, object]], required: int = 0) -> Packed:
        """Pickle ``entries``. The first ``required`` must travel: one that cannot is a
        ``ValueError`` naming it; another one is left out (``Packed.left_out``)."""
        entries = list(entries)
        dropped: dict[str, str] = {}
        while True:
            try:
                return self._pack(entries, required, dropped)
            except _EntryError as err:
                why = f"{type(err.cause).__name__}: {err.cause}"
                if err.index < required:
                    label = repr(err.name) if err.name.isidentifier() else err.name
                    raise ValueError(f"{label} cannot be sent ({why})") from None
                dropped[err.name] = why

    def _pack(self, entries: list[tuple[str, object]], required: int,
              dropped: dict[str, str]) -> Packed:
        stream = io.BytesIO()
        buffers: list[memoryview] = []

        def aside(buffer: pickle.PickleBuffer) -> bool:
            view = buffer.raw()
            if view.nbytes < _IN_BAND:
                return True  # in the stream
            buffers.append(view)
            return False

        pickler = _Pickler(stream, aside, self.origins)
        queue = [(name, value) for name, value in entries if name not in dropped]
        names = {name for name, _ in queue}
        sizes: dict[str, int] = {}
        index = 0
        while index < len(queue):
            name, value = queue[index]
            start, first = stream.tell(), len(buffers)
            try:
                pickler.dump((name, value))
            except Exception as err:
                raise _EntryError(index, name, err) from err
            sizes[name] = stream.tell() - start + sum(b.nbytes for b in buffers[first:])
            index += 1
            if self.discover is not None:
                for namespace, name in pickler.take_reads():
                    if name not in names and name in namespace and name not in dropped and \
                            self.discover(namespace, name):
                        names.add(name)
                        queue.append((name, namespace[name]))
        return Packed(stream.getvalue(), buffers, sizes, dict(dropped), pickler.sent)


class _EntryError(Exception):
    def __init__(self, index: int, name: str, cause: BaseException) -> None:
        super().__init__(name)
        self.index, self.name, self.cause = index, name, cause


def unpack(data: bytes, buffers: Iterable[Any], namespace: dict,
           known: Mapping[int, object] | None = None
           ) -> tuple[dict[str, object], dict[int, tuple[int, object]]]:
    """Read a stream: its entries, and the objects that came by value (``id`` -> (token,
    object)), for a :class:`Packer` sending them back. Functions that came by value get
    ``namespace`` as their globals; ``known`` are the objects :meth:`Packer.pack` sent, by
    token."""
    loading = _Loading(namespace, known or {})
    _local.loading, previous = loading, getattr(_local, "loading", None)
    try:
        unpickler = pickle.Unpickler(io.BytesIO(data), buffers=iter(list(buffers)))
        entries: dict[str, object] = {}
        while True:
            try:
                name, value = unpickler.load()
            except EOFError:
                break
            entries[name] = value
    finally:
        _local.loading = previous
    return entries, loading.origins


# -- pickling -------------------------------------------------------------------------------


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, aside: Callable, origins: Mapping) -> None:
        super().__init__(file, protocol=5, buffer_callback=aside)
        self.origins = origins
        self.sent: dict[int, object] = {}
        self._reads: list[tuple[Mapping, tuple[str, ...]]] = []

    def take_reads(self) -> list[tuple[Mapping, str]]:
        """The globals of notebook functions pickled since the last call."""
        reads, self._reads = self._reads, []
        return [(namespace, name) for namespace, names in reads for name in names]

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is types.FunctionType or isinstance(obj, type):
            if id(obj) in self.origins:
                return _known, (self.origins[id(obj)][0],)
            if kind is types.FunctionType:
                return self._function(obj) if _by_value(obj) else NotImplemented
            if _by_value(obj):
                return self._class(obj)
            return NotImplemented
        if isinstance(obj, types.ModuleType):
            return importlib.import_module, (obj.__name__,)
        if kind is types.CellType:
            try:
                return _new_cell, (), (obj.cell_contents,), None, None, _fill_cell
            except ValueError:  # an empty cell: a name the function's scope never set
                return _new_cell, ()
        if kind is staticmethod or kind is classmethod:
            return kind, (obj.__func__,)
        if kind is types.MappingProxyType:
            return _new_mappingproxy, (dict(obj),)
        if kind is property:
            return property, (obj.fget, obj.fset, obj.fdel, obj.__doc__)
        if kind is functools._lru_cache_wrapper and _by_value(obj):
            return _cached, (obj.__wrapped__, obj.cache_parameters())
        if kind.__module__ == "dataclasses" and kind is not dataclasses.Field:
            name = _DATACLASS_MARKERS.get(id(obj))
            if name is not None:
                return getattr, (dataclasses, name)
        return NotImplemented

    def _token(self, obj: object) -> int:
        self.sent[id(obj)] = obj
        return id(obj)

    def _function(self, fn: types.FunctionType) -> tuple:
        home = None if fn.__module__ == "__main__" else fn.__module__
        if home is None:
            self._reads.append((fn.__globals__, global_names(fn.__code__)))
        state = {"__defaults__": fn.__defaults__, "__kwdefaults__": fn.__kwdefaults__,
                 "__qualname__": fn.__qualname__, "__module__": fn.__module__,
                 "__doc__": fn.__doc__, "__annotations__": fn.__annotations__,
                 "__dict__": fn.__dict__}
        args = (self._token(fn), _PYTHON, marshal.dumps(fn.__code__), fn.__name__, home,
                fn.__closure__)
        return _new_function, args, state, None, None, _fill_function

    def _class(self, cls: type) -> tuple:
        attrs = dict(vars(cls))
        for name in ("__dict__", "__weakref__", "_abc_impl"):
            attrs.pop(name, None)  # made with the class
        skeleton = {"__module__": attrs.pop("__module__", "__main__"),
                    "__qualname__": attrs.pop("__qualname__", cls.__qualname__)}
        if "__slots__" in attrs:
            slots = attrs["__slots__"]
            skeleton["__slots__"] = attrs.pop("__slots__")
            for slot in [slots] if isinstance(slots, str) else slots:
                attrs.pop(_mangle(cls.__name__, slot), None)  # a slot's descriptor
        members = ()
        if _is_enum(cls):
            members = tuple((n, cls._member_map_[n]._value_) for n in cls._member_names_)
            attrs = _enum_extras(cls, attrs)
        args = (self._token(cls), type(cls), cls.__name__, cls.__bases__, skeleton, members)
        return _new_class, args, attrs, None, None, _fill_class


def _by_value(obj: Any) -> bool:
    """Whether ``obj`` (a function or class) cannot be found by name where it arrives: it
    was defined in the notebook, inside a function, or is a lambda."""
    return obj.__module__ == "__main__" or "<" in obj.__qualname__


def _mangle(cls_name: str, name: str) -> str:
    if name.startswith("__") and not name.endswith("__"):
        return f"_{cls_name.lstrip('_')}{name}"
    return name


def _is_enum(cls: type) -> bool:
    enum = sys.modules.get("enum")
    return enum is not None and isinstance(cls, enum.EnumMeta)


def _enum_extras(cls: type, attrs: dict) -> dict:
    """An enum's own attributes beyond its members and what its metaclass makes."""
    import enum

    made = set(vars(enum.EnumMeta.__new__(type(cls), "_", cls.__bases__,
                                          type(cls).__prepare__("_", cls.__bases__))))
    return {k: v for k, v in attrs.items()
            if (k not in made and k not in cls._member_map_) or k == "__doc__"}


_DATACLASS_MARKERS = {id(v): k for k, v in vars(dataclasses).items()
                      if type(v).__module__ == "dataclasses" and not isinstance(v, type)
                      and not callable(v)}


@functools.lru_cache(maxsize=4096)
def global_names(code: types.CodeType) -> tuple[str, ...]:
    """Names ``code`` (and the code nested in it) reads as globals."""
    names: dict[str, None] = {}
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names[ins.argval] = None
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return tuple(names)


# -- unpickling -----------------------------------------------------------------------------


@dataclasses.dataclass
class _Loading:
    namespace: dict
    known: Mapping[int, object]
    origins: dict[int, tuple[int, object]] = dataclasses.field(default_factory=dict)


_local = threading.local()


def _current() -> _Loading:
    loading = getattr(_local, "loading", None)
    if loading is None:
        raise RuntimeError("notebook functions and classes are read with carry.unpack()")
    return loading


def _arrived(token: int, obj: Any) -> Any:
    _current().origins[id(obj)] = (token, obj)
    return obj


def _known(token: int) -> Any:
    try:
        return _current().known[token]
    except KeyError:
        raise RuntimeError("an object sent by value came back, but its original is not "
                           "known here") from None


def _new_function(token: int, python: tuple, code: bytes, name: str, home: str | None,
                  closure: tuple | None) -> types.FunctionType:
    if tuple(python) != _PYTHON:
        raise RuntimeError(
            f"function {name!r} comes from Python {python[0]}.{python[1]} and cannot run on "
            f"Python {_PYTHON[0]}.{_PYTHON[1]}: run the kernel and the engines on one version")
    namespace = (_current().namespace if home is None
                 else importlib.import_module(home).__dict__)
    fn = types.FunctionType(marshal.loads(code), namespace, name, None, closure)
    return _arrived(token, fn)


def _fill_function(fn: types.FunctionType, state: dict) -> None:
    fn.__dict__.update(state.pop("__dict__") or {})
    for key, value in state.items():
        setattr(fn, key, value)


def _new_cell() -> types.CellType:
    return types.CellType()


def _fill_cell(cell: types.CellType, state: tuple) -> None:
    cell.cell_contents = state[0]


def _new_class(token: int, meta: type, name: str, bases: tuple, skeleton: dict,
               members: tuple) -> type:
    def body(namespace: dict) -> None:
        namespace.update(skeleton)
        for member, value in members:
            namespace[member] = value

    return _arrived(token, types.new_class(name, bases, {"metaclass": meta}, body))


def _fill_class(cls: type, attrs: dict) -> None:
    for key, value in attrs.items():
        setattr(cls, key, value)


def _new_mappingproxy(items: dict) -> types.MappingProxyType:
    return types.MappingProxyType(items)


def _cached(fn: Callable, parameters: dict) -> Callable:
    return functools.lru_cache(**parameters)(fn)
