"""No test sleeps a fixed time and then asserts that something did not happen.

Such a test passes on a slow machine for the wrong reason (the thing had no time to happen)
and costs its sleep on a fast one. A test that shows something does not happen moves a test
clock past the moment it would have (``waiting.advance``), or waits for a later event that
proves it could have happened by then (a task after it ended). This test reads every test
module and lists each ``time.sleep(...)`` statement followed, as the next statement of its
block, by an ``assert`` of an absence: a negation, ``is None``, ``is False``, ``not in``, or
``==`` an empty list, tuple, dict, set or string.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

TESTS = Path(__file__).parent


def _is_sleep(stmt: ast.stmt) -> bool:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "sleep" and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "time")


def _empty(node: ast.expr) -> bool:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return not node.elts
    if isinstance(node, ast.Dict):
        return not node.keys
    if isinstance(node, ast.Constant):
        return node.value in ("", b"")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("set", "dict", "list", "tuple") and not node.args)


def _absence(test: ast.expr) -> bool:
    """Whether ``test`` asserts that something is not there (or did not happen)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    if isinstance(test, ast.BoolOp):
        return any(_absence(value) for value in test.values)
    if isinstance(test, ast.Compare):
        for op, right in zip(test.ops, test.comparators, strict=True):
            if isinstance(op, ast.NotIn):
                return True
            if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and \
                    right.value in (None, False):
                return True
            if isinstance(op, ast.Eq) and _empty(right):
                return True
    return False


def sleeps_then_absences(source: str) -> list[tuple[int, str]]:
    """``(line, assertion)`` for each sleep followed by an assertion of an absence."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for first, then in itertools.pairwise(block):
                if _is_sleep(first) and isinstance(then, ast.Assert) and _absence(then.test):
                    found.append((first.lineno, ast.unparse(then.test)))
    return sorted(found)


def test_the_check_finds_what_it_looks_for():
    source = """
import time
def t(h, xs):
    time.sleep(0.1)
    assert not h.done()
    time.sleep(0.1)
    assert xs == []
    with open('f'):
        time.sleep(0.1)
        assert h.state is None
        time.sleep(0.1)
        assert h.done() is False and 1 == 1
    time.sleep(0.1)
    assert 'x' not in xs
    time.sleep(0.1)
    x = 1
    assert not h
    time.sleep(0.1)
    assert h.done()
    time.sleep(0.1)
    assert xs == [1]
"""
    assert [line for line, _ in sleeps_then_absences(source)] == [4, 6, 9, 11, 13]


def test_no_test_sleeps_then_asserts_an_absence():
    found = [f"{path.name}:{line}: assert {text}"
             for path in sorted(TESTS.glob("*.py"))
             for line, text in sleeps_then_absences(path.read_text())]
    assert found == [], ("tests that sleep, then assert that something did not happen (move a "
                         "test clock past it with waiting.advance, or wait for a later event "
                         "that proves it could have):\n" + "\n".join(found))
