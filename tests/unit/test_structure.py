"""The package's structure: no import circles (lazy imports inside functions included), and
`ray.remote` only in the Ray wing."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rayrl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The rayrl modules that `path` imports anywhere in it (a function's lazy import too);
    `from package import name` counts as importing the submodule when `name` is one."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {name for name in found if name in known}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_imports_form_no_circle():
    found = modules()
    graph = {name: imports_of(path, set(found)) - {name} for name, path in found.items()}
    assert len(graph) > 30
    assert "rayrl.algorithms" in graph["rayrl.presets"]  # the walk sees real arrows
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_lazy_and_indirect_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def uses_ray_remote(path: Path) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "remote"
        and isinstance(node.value, ast.Name)
        and node.value.id == "ray"
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_ray_remote_appears_only_in_the_ray_wing():
    users = {name for name, path in modules().items() if uses_ray_remote(path)}
    assert users == {"rayrl.ray.factory"}
