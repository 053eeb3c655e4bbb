"""No private name of another project outside `rayrl/compat/`: an underscore name reached on
another package's module or object (Ray's `ray._private`, a handle's `_actor_id`, Tune's
scheduler internals, torch's `torch._dynamo`, CPython's `threading._shutdown`), or passed
as another package's keyword (`ray.init(_system_config=...)`). Such names change without
notice between releases; `rayrl.compat` holds each behind a fallback.

A name is rayrl's own when rayrl defines it (a function, method or class, a module-level
name, an attribute assigned on `self` or `cls`, a parameter): those are the only underscore
attributes allowed elsewhere. Python's own special names (`__name__`, `__file__`...) are
allowed; a library's dunder (`handle.__ray_ready__`) is not."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rayrl"
COMPAT = PACKAGE / "compat"

DOCUMENTED = {"os._exit", "sys._getframe"}
"""Underscore names that Python documents as public API."""

PYTHON_DUNDERS = {
    name
    for kind in (object, type, dict, list, str, int, BaseException, property)
    for name in dir(kind)
    if name.startswith("__")
} | {
    "__version__",
    "__file__",
    "__name__",
    "__dict__",
    "__wrapped__",
    "__stdout__",
    "__stderr__",
    "__stdin__",
    "__func__",
    "__self__",
    "__mro__",
    "__path__",
    "__qualname__",
    "__module__",
    "__annotations__",
    "__dataclass_fields__",
    "__traceback__",
    "__cause__",
    "__context__",
    "__enter__",
    "__exit__",
    "__call__",
    "__iter__",
    "__next__",
    "__len__",
    "__getitem__",
    "__slots__",
}


def own_names(trees: list[ast.Module]) -> set[str]:
    """The underscore names rayrl defines anywhere in its package."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                names.update(argument.arg for argument in every)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {name for name in names if name.startswith("_")}


def dotted(node: ast.AST) -> str:
    """`a.b.c` for a chain of attributes on a name, else the last attribute."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def private_uses(tree: ast.Module, own: set[str]) -> list[tuple[int, str]]:
    """(line, what) for every private name of another project that `tree` reaches."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            if isinstance(node, ast.ImportFrom) and not node.level:
                modules += [f"{node.module}.{alias.name}" for alias in node.names]
            for module in modules:
                parts = module.split(".")
                external = parts[0] not in ("rayrl", "__future__")
                if external and any(part.startswith("_") for part in parts):
                    found.append((node.lineno, f"import of {module}"))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            name = node.attr
            is_dunder = name.startswith("__") and name.endswith("__")
            allowed = name in PYTHON_DUNDERS if is_dunder else name in own
            if not allowed and dotted(node) not in DOCUMENTED:
                found.append((node.lineno, dotted(node) or name))
        elif isinstance(node, ast.keyword):
            keyword = node.arg or ""  # (None: a `**mapping`)
            if keyword.startswith("_") and keyword not in own:
                found.append((node.value.lineno, f"keyword {keyword}="))
            elif node.arg is None and isinstance(node.value, ast.Dict):
                for key in node.value.keys:
                    name = key.value if isinstance(key, ast.Constant) else None
                    if isinstance(name, str) and name.startswith("_") and name not in own:
                        found.append((node.value.lineno, f"keyword {name}="))
        elif isinstance(node, ast.Call):
            function = dotted(node.func)
            texts = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            if function in ("getattr", "hasattr", "setattr", "delattr") and len(texts) > 1:
                name = texts[1]
                if isinstance(name, str) and name.startswith("_") and name not in own:
                    found.append((node.lineno, f"{function}(..., {name!r})"))
            elif function.endswith("import_module") and texts:
                module = texts[0]
                if isinstance(module, str) and "._" in module:
                    found.append((node.lineno, f"import of {module}"))
    return found


def test_no_private_name_of_another_project_outside_compat():
    paths = sorted(PACKAGE.rglob("*.py"))
    trees = {path: ast.parse(path.read_text(), str(path)) for path in paths}
    # (compat's own names are overrides of other projects' private ones: not rayrl's)
    outside = [tree for path, tree in trees.items() if COMPAT not in path.parents]
    own = own_names(outside) - set(dir(builtins))
    problems = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path, tree in trees.items()
        if COMPAT not in path.parents
        for line, what in private_uses(tree, own)
    ]
    assert not problems, (
        "private names of Ray, Tune, torch or CPython outside rayrl/compat/ (use a public "
        "API, or add an accessor with a fallback to rayrl/compat/):\n" + "\n".join(problems)
    )


def test_the_scanner_finds_each_kind_of_private_use():
    source = """
import ray._private.state
from ray._common.utils import get_ray_address_file
from ray.util import _hidden
import threading
threading._shutdown()
handle._actor_id.hex()
handle.__ray_ready__.remote()
ray.init(_system_config={})
grid._experiment_analysis.trials
self._exploit(controller)
os._exit(0)
self._mine = 1
print(self._mine, thing.__name__)
getattr(handle, "_actor_id")
hasattr(thing, "_mine")
ray.init(**{"_system_config": {}})
importlib.import_module("ray._private.state")
"""
    tree = ast.parse(source)
    found = sorted(what for _, what in private_uses(tree, own_names([tree])))
    assert found == sorted(
        [
            "import of ray._private.state",
            "import of ray._common.utils",
            "import of ray._common.utils.get_ray_address_file",
            "import of ray.util._hidden",
            "threading._shutdown",
            "handle._actor_id",
            "handle.__ray_ready__",
            "keyword _system_config=",
            "grid._experiment_analysis",
            "self._exploit",
            "getattr(..., '_actor_id')",
            "keyword _system_config=",
            "import of ray._private.state",
        ]
    )
