"""Notebook values by value, in one process: a kernel's namespace packed, unpacked into an
"engine" namespace, run there, and what it made packed back (no engines needed)."""

from __future__ import annotations

import json
import math
import pickle
import threading

import numpy as np
import pytest

from jupyter_sched.executors.ipp.carry import Packer, global_names, unpack
from jupyter_sched.executors.ipp.namespace import is_hidden

NOTEBOOK = '''
import functools, dataclasses, enum, abc

factor = 3
def scale(v):
    return v * factor

class Base:
    def __init__(self, w):
        self.w = w
    def total(self):
        return self.w + OFFSET

class Net(Base):
    def __init__(self):
        super().__init__(WIDTH)
        self.parts = [Part(k) for k in range(2)]
    def total(self):
        return super().total() + sum(p() for p in self.parts)
    @property
    def doubled(self):
        return self.w * 2
    @staticmethod
    def kind():
        return "net"
    @classmethod
    def make(cls):
        return cls()

class Part:
    __slots__ = ("k",)
    def __init__(self, k):
        self.k = k
    def __call__(self):
        return self.k * STEP

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return ("logged", fn(*args))
    return wrapper

@logged
def build(n):
    return Net.make().total() + n

def counter(start):
    def step():
        return start + STEP
    return step

@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

@dataclasses.dataclass
class Config:
    lr: float = 0.1
    layers: list = dataclasses.field(default_factory=list)

class Color(enum.Enum):
    RED = 1
    BLUE = 2
    def warm(self):
        return self is Color.RED

class Shape(abc.ABC):
    @abc.abstractmethod
    def area(self): ...

class Square(Shape):
    def area(self):
        return 4

class Oops(Exception):
    pass

WIDTH, OFFSET, STEP = 4, 100, 10
'''


@pytest.fixture
def kernel_ns() -> dict:
    ns: dict = {"__name__": "__main__"}
    exec(NOTEBOOK, ns)
    return ns


def allowed(namespace, name) -> bool:
    return not is_hidden(name, namespace)


def to_engine(ns: dict, names: list[str]):
    """Pack ``names`` as a kernel does, unpack them into a fresh namespace as an engine does."""
    packed = Packer(discover=allowed).pack([(n, ns[n]) for n in names], required=len(names))
    engine: dict = {"__name__": "__main__"}
    entries, origins = unpack(packed.data, packed.buffers, engine)
    engine.update(entries)
    return packed, engine, origins


def test_a_notebook_function_brings_the_globals_it_reads_and_shares_the_namespace(kernel_ns):
    packed, engine, _ = to_engine(kernel_ns, ["scale"])
    assert set(packed.sizes) == {"scale", "factor"}
    scale = engine["scale"]
    assert scale is not kernel_ns["scale"] and scale.__globals__ is engine
    assert scale(2) == 6
    engine["factor"] = 10  # a cell that sets it first: the function sees the cell's value
    assert scale(2) == 20


def test_classes_with_super_inheritance_properties_and_slots(kernel_ns):
    packed, engine, _ = to_engine(kernel_ns, ["Net"])
    # the base class travels inside Net; the globals its methods read, beside it
    assert set(packed.sizes) == {"Net", "Part", "WIDTH", "OFFSET", "STEP"}
    net = engine["Net"]()
    assert (net.total(), net.doubled, engine["Net"].kind()) == (114, 8, "net")
    assert engine["Net"] is not kernel_ns["Net"] and engine["Net"].__base__.__name__ == "Base"
    assert type(engine["Net"].make()) is engine["Net"]
    assert engine["Part"].__slots__ == ("k",)


def test_decorators_closures_and_caches(kernel_ns):
    _, engine, _ = to_engine(kernel_ns, ["build", "counter", "fib"])
    assert engine["build"](1) == ("logged", 115)
    assert engine["build"].__wrapped__(1) == 115
    assert engine["counter"](5)() == 15
    assert engine["fib"](30) == 832040 and engine["fib"].cache_info().currsize == 31


def test_instances_dataclasses_enums_and_abstract_classes(kernel_ns):
    ns = kernel_ns
    ns.update(net=ns["Net"](), cfg=ns["Config"](layers=[1]), color=ns["Color"].BLUE,
              square=ns["Square"]())
    _, engine, _ = to_engine(ns, ["net", "cfg", "color", "square", "Color", "Config", "Shape"])
    assert engine["net"].total() == 114 and type(engine["net"]).__name__ == "Net"
    import dataclasses

    assert dataclasses.asdict(engine["cfg"]) == {"lr": 0.1, "layers": [1]}
    assert engine["Config"]().layers == []  # the default factory still runs
    assert engine["color"] is engine["Color"].BLUE and not engine["color"].warm()
    assert engine["Color"].RED.warm() and [c.name for c in engine["Color"]] == ["RED", "BLUE"]
    assert engine["square"].area() == 4
    with pytest.raises(TypeError, match="abstract"):
        engine["Shape"]()


def test_what_came_from_the_kernel_goes_back_as_itself(kernel_ns):
    packed, engine, origins = to_engine(kernel_ns, ["Net", "Base"])
    exec("class Remote(Base):\n    def __init__(self):\n        super().__init__(7)\n"
         "made = Net()\nremote = Remote()\nboth = [made, made]\n", engine)
    back = Packer(origins=origins).pack([(n, engine[n]) for n in ("made", "remote", "both")])
    kernel: dict = {"__name__": "__main__", "Base": kernel_ns["Base"]}
    entries, _ = unpack(back.data, back.buffers, kernel, known=packed.sent)
    assert type(entries["made"]) is kernel_ns["Net"]
    assert isinstance(entries["remote"], kernel_ns["Base"])
    assert entries["remote"].total() == 7 + kernel_ns["OFFSET"]
    assert type(entries["remote"]).__init__.__globals__ is kernel  # defined "in" the notebook
    assert entries["both"][0] is entries["both"][1]


def test_one_stream_keeps_shared_objects_shared_and_sends_big_buffers_aside():
    big = np.arange(100_000.0)
    ns = {"a": big, "b": big, "small": np.arange(3.0), "m": math, "j": json}
    packed = Packer().pack([(n, ns[n]) for n in ns], required=len(ns))
    assert len(packed.buffers) == 1 and packed.buffers[0].nbytes == big.nbytes
    assert len(packed.data) < 2000 and packed.sizes["a"] > big.nbytes
    entries, _ = unpack(packed.data, [bytearray(b) for b in packed.buffers], {})
    assert entries["a"] is entries["b"] and entries["a"].flags.writeable
    assert entries["small"].flags.writeable and entries["m"] is math and entries["j"] is json


def test_what_cannot_travel_is_named():
    lock = threading.Lock()
    with pytest.raises(ValueError, match=r"'lock' cannot be sent \(TypeError: cannot pickle"):
        Packer().pack([("x", 1), ("lock", lock)], required=2)
    ns = {"__name__": "__main__", "lock": lock}
    exec("def uses_lock():\n    return lock\n", ns)
    packed = Packer(discover=allowed).pack([("uses_lock", ns["uses_lock"])], required=1)
    assert set(packed.sizes) == {"uses_lock"}  # read by a function only: left out, with a note
    assert packed.left_out == {"lock": "TypeError: cannot pickle '_thread.lock' object"}
    with pytest.raises(ValueError, match=r"^the arguments cannot be sent \(TypeError"):
        Packer().pack([("the arguments", ((lock,), {}))], required=1)


def test_functions_read_without_a_loading_namespace_say_so(kernel_ns):
    packed = Packer().pack([("scale", kernel_ns["scale"])])
    with pytest.raises(RuntimeError, match=r"carry\.unpack"):
        pickle.loads(packed.data)


def test_global_names_include_nested_code():
    ns: dict = {"__name__": "__main__"}
    exec("def f():\n    def g():\n        return a + b\n    return g() + c\n", ns)
    assert set(global_names(ns["f"].__code__)) == {"a", "b", "c"}

