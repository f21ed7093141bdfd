"""The core's layers: model <- core, pure and without import circles.

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a circle closed
that way is still a circle for the reader.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_sched"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph(layers: tuple[str, ...]) -> dict[str, set[str]]:
    modules = {_module_name(p): p for layer in layers
               for p in (PACKAGE / layer).rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name}
            for name, path in modules.items()}


def test_the_core_and_the_model_have_no_import_circle():
    graph = _graph(("model", "core"))
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph[name]):
            assert state.get(other) != 1, " -> ".join([*trail, name, other])
            if other not in state:
                visit(other, [*trail, name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_the_core_and_the_model_import_only_the_standard_library_and_each_other():
    allowed = set(sys.stdlib_module_names) | {"jupyter_sched"}
    for layer in ("model", "core"):
        for path in (PACKAGE / layer).rglob("*.py"):
            for name in _imports(path):
                top = name.split(".")[0]
                assert top in allowed, (path, name)
                if top == "jupyter_sched":
                    assert name.split(".")[1] in ("model", "core"), (path, name)
            if layer == "model":
                assert not any(".core" in n for n in _imports(path)), path
