"""Names a cell reads and sets; carrying them to an engine and back (no engines needed)."""

from __future__ import annotations

import functools
import math
import types

import pytest

from jupyter_sched.executors.ipp import namespace
from jupyter_sched.executors.ipp.namespace import (
    CellNames,
    cell_names,
    is_hidden,
    names_to_pull,
    run_cell,
    values_to_push,
)
from jupyter_sched.runtime.submission import transform_cell


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
    ns = {"x": 41, "unused": 0, "print": print, "In": [], "_i3": "", "_": 1, "np": math}
    code = "y = x + 1\nprint(np.pi, In, _i3, _, missing)"
    assert values_to_push(code, ns) == {"x": 41, "np": math}


def test_what_ipython_put_in_the_namespace_is_known_by_identity(monkeypatch):
    @functools.wraps(open)
    def ipython_open(file, *args, **kwargs):  # as IPython wraps it
        return open(file, *args, **kwargs)

    def exit_():
        pass

    def my_open(path):
        return path

    shell = types.SimpleNamespace(user_ns_hidden={"exit": exit_, "get_ipython": exit_})
    monkeypatch.setattr(namespace, "_shell", lambda: shell)
    ns = {"open": ipython_open, "exit": exit_, "get_ipython": exit_, "quit": 3, "len": len}
    assert [n for n in ns if is_hidden(n, ns)] == ["open", "exit", "get_ipython", "len"]
    assert not is_hidden("open", {"open": my_open})  # the user's own open is the user's
    assert values_to_push("open(p)\nquit + exit", ns) == {"quit": 3}


def test_a_rebound_builtin_is_the_users_data():
    assert values_to_push("y = list[0]", {"list": [5]}) == {"list": [5]}


def test_explicit_push_replaces_detection():
    ns = {"x": 1, "big": 2}
    assert values_to_push("y = x + big", ns, push=["big"]) == {"big": 2}
    assert values_to_push("y = x", ns, push=[]) == {}


def test_explicit_push_names_the_data_and_the_notebook_code_the_cell_calls_goes_too():
    """The user guide's ``--push data --pull scores`` on ``[score(x) for x in data]``, with
    ``score`` a notebook function: the cell needs it on the engine."""

    def score(x):
        return 2 * x

    class Model:
        pass

    score.__module__ = Model.__module__ = "__main__"  # as the notebook defines them
    ns = {"data": [1, 2], "score": score, "Model": Model, "math": math, "other": [0],
          "len_": len}
    code = "scores = [score(x) for x in data]\nm = Model()\nmath.pi, other, len_"
    assert values_to_push(code, ns, push=["data"]) == {"data": [1, 2], "score": score,
                                                       "Model": Model, "math": math}


def test_pushing_a_missing_name_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"push: 'nope' is not defined in the notebook"):
        values_to_push("y = 1", {"x": 1}, push=["x", "nope"])
    with pytest.raises(ValueError, match=r"'a', 'b' are not defined"):
        values_to_push("", {}, push=["a", "b"])


def test_names_to_pull():
    assert names_to_pull("y = x\nz = 2") == ("y", "z")
    assert names_to_pull("y = x", pull=["y", "y", "w"]) == ("y", "w")


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
