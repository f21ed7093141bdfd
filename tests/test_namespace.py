"""Names a cell reads and sets; carrying them to an engine and back (no engines needed)."""

from __future__ import annotations

import math
import threading
import types

import pytest

from jupyter_sched.executors.ipp.namespace import (
    CellNames,
    ModuleRef,
    cell_names,
    collect,
    estimate_size,
    function_globals,
    names_to_pull,
    rebind,
    resolve_modules,
    run_cell,
    transform_cell,
    values_to_push,
)


@pytest.mark.parametrize(("code", "reads", "assigns"), [
    ("y = x + 1", ("x",), ("y",)),
    ("y = f(x) + 1\nz = y * 2", ("f", "x"), ("y", "z")),
    ("x = x + 1", ("x",), ("x",)),  # read before it is set
    ("x += 1", ("x",), ("x",)),
    ("import numpy as np\nnp.zeros(n)", ("n",), ("np",)),
    ("from os import path as p\np.join(a)", ("a",), ("p",)),
    # set only under a condition: the notebook's value may be the one read
    ("if c:\n    y = 1\nprint(y)", ("c", "print", "y"), ("y",)),
    # read at call time by a function the cell defines
    ("def g():\n    return h(q)\nr = g()", ("h", "q"), ("g", "r")),
    ("class K:\n    a = b\n", ("b",), ("K",)),
    ("r = [k * m for k in ks]", ("m", "ks"), ("r",)),
    ("def s():\n    global w\n    w = 1\n", (), ("s", "w")),
    ("with open(path) as fh:\n    data = fh.read()", ("open", "path"), ("fh", "data")),
    ("", (), ()),
    ("def (:", (), ()),
    # a loop variable is set before its body reads it; after the loop it is only maybe set
    ("for i in items:\n    total = i\nprint(i)", ("items", "print", "i"), ("i", "total")),
    ("for model in models:\n    model.fit()", ("models",), ("model",)),
    ("if c:\n    y = 1\nelse:\n    y = 2\nz = y", ("c",), ("y", "z")),
    ("try:\n    v = load()\nexcept OSError as err:\n    log(err)\nw = v",
     ("load", "OSError", "log", "v"), ("v", "err", "w")),
    ("while n:\n    n = step(n)", ("n", "step"), ("n",)),
    ("if (k := key()):\n    pass", ("key",), ("k",)),
])
def test_cell_names(code, reads, assigns):
    names = cell_names(code)
    assert set(names.reads) == set(reads)
    assert set(names.assigns) == set(assigns)


def test_cell_names_keep_first_use_order():
    assert cell_names("b = a\nc = z + b\nd = y") == CellNames(("a", "z", "y"), ("b", "c", "d"))


def test_top_level_await_is_read_without_scopes():
    assert cell_names("r = await fetch(url)") == CellNames(("fetch", "url"), ("r",))


def test_ipython_syntax_is_transformed_when_ipython_is_here():
    pytest.importorskip("IPython")
    assert "run_line_magic" in transform_cell("%time y = x")
    assert transform_cell("y = x") == "y = x"


def test_values_to_push_detects_reads_and_skips_what_is_not_data():
    ns = {"x": 41, "unused": 0, "print": print, "In": [], "_i3": "", "get_ipython": object(),
          "np": math}
    code = "y = x + 1\nprint(np.pi, In, _i3, get_ipython, missing)"
    assert values_to_push(code, ns) == {"x": 41, "np": ModuleRef("math")}


def test_a_rebound_builtin_is_the_users_data():
    assert values_to_push("y = list[0]", {"list": [5]}) == {"list": [5]}


def test_explicit_push_replaces_detection():
    ns = {"x": 1, "big": 2}
    assert values_to_push("y = x + big", ns, push=["big"]) == {"big": 2}
    assert values_to_push("y = x", ns, push=[]) == {}


def test_pushing_a_missing_name_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"push: 'nope' is not defined in the notebook"):
        values_to_push("y = 1", {"x": 1}, push=["x", "nope"])
    with pytest.raises(ValueError, match=r"'a', 'b' are not defined"):
        values_to_push("", {}, push=["a", "b"])


def test_names_to_pull():
    assert names_to_pull("y = x\nz = 2") == ("y", "z")
    assert names_to_pull("y = x", pull=["y", "y", "w"]) == ("y", "w")


def test_collect_leaves_out_what_was_not_set_or_cannot_travel():
    ns = {"y": 2, "lock": threading.Lock(), "m": math}
    values, notes = collect(ns, ["y", "lock", "m", "never"])
    assert values == {"y": 2, "m": ModuleRef("math")}
    assert len(notes) == 1 and notes[0].startswith("'lock' was not pulled back")


def test_collect_explicit_pull_of_a_name_the_cell_did_not_set_is_an_error():
    with pytest.raises(NameError, match="pull: the cell did not set 'z'"):
        collect({"y": 1}, ["y", "z"], explicit=True)


def test_modules_travel_by_name():
    assert resolve_modules({"m": ModuleRef("math"), "v": 3}) == {"m": math, "v": 3}


def test_estimate_size_measures_buffers():
    sizes = estimate_size({"b": b"x" * 10_000, "n": 1, "lock": threading.Lock()})
    assert sizes["b"] >= 10_000
    assert sizes["n"] < 100
    assert sizes["lock"] > 0  # not picklable: a lower bound


def test_run_cell_returns_the_last_expression_and_sets_names():
    ns: dict = {"x": 2}
    assert run_cell("y = x * 3\ny + 1", ns) == 7
    assert ns["y"] == 6
    assert run_cell("z = 1", ns) is None
    assert run_cell("", ns) is None


def test_run_cell_tracebacks_show_the_cell():
    with pytest.raises(ZeroDivisionError) as info:
        run_cell("a = 1\nb = a / 0", {}, "<cell-test>")
    text = "".join(__import__("traceback").format_exception(info.value))
    assert "b = a / 0" in text


SCALE = 3


def _notebook_function(source: str, name: str) -> types.FunctionType:
    """A function as if defined in a notebook cell (module ``__main__``)."""
    g = {"__name__": "__main__", "math": math, "SCALE": SCALE, "unused": 1}
    exec(source, g)
    return g[name]


def test_function_globals_of_a_notebook_function():
    inner = _notebook_function("def inner(x):\n    return math.sqrt(x) * SCALE\n", "inner")
    outer = _notebook_function("def outer(x):\n    return helper(x) + 1\n", "outer")
    outer.__globals__["helper"] = inner
    found = function_globals(outer)
    assert set(found) == {"helper", "math", "SCALE"}
    assert found["math"] == ModuleRef("math")
    assert function_globals(math.sqrt) == {}
    assert function_globals(test_run_cell_returns_the_last_expression_and_sets_names) == {}


def test_rebind_gives_notebook_functions_the_pushed_globals():
    f = _notebook_function("def f(x):\n    return helper(x) * SCALE\n", "f")
    helper = _notebook_function("def helper(x):\n    return x + OFFSET\n", "helper")
    moved = rebind({"helper": helper, "SCALE": 10, "OFFSET": 1}, f)
    assert moved(1) == 20
    assert moved.__globals__ is not f.__globals__
    assert rebind({}, math.sqrt) is math.sqrt
