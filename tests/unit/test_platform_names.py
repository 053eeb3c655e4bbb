"""rayrl runs on Linux and macOS: what only one operating system has is asked for in one
module, `rayrl/host.py`, whose helpers check that it is there. Anywhere else under `rayrl/`
these fail the test, each named with its file and line and what to use instead:

- the `os` names that Python on Linux has and Python on macOS has not (the list that
  `tests/macos_like/sitecustomize.py` removes to simulate a Mac: `os.sched_getaffinity`,
  `os.sched_setscheduler`, `os.memfd_create`, ...), as `os.NAME`, `from os import NAME` or
  `getattr(os, "NAME")`;
- a path under /proc (Linux's) in a string, and `prlimit` (Linux's);
- `import fcntl` and `import resource` (Unix only), `import msvcrt` (Windows only), and
  `os.getloadavg` (not on Windows).

Docstrings and comments may name them."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.macos_like.sitecustomize import LINUX_ONLY_BEFORE_3_13, LINUX_ONLY_OS_NAMES

PACKAGE = REPO / "rayrl"
HOST = "rayrl/host.py"
"""The one module allowed to touch what this test looks for."""

LINUX_ONLY = frozenset(LINUX_ONLY_OS_NAMES + LINUX_ONLY_BEFORE_3_13)
"""rayrl supports Python 3.10 on: `os.waitid` is also missing on macOS before 3.13."""
OS_MODULES = ("os", "posix")
HOST_HELPER = "a helper in rayrl/host.py that checks the name is there first (hasattr)"
INSTEAD = {
    "sched_getaffinity": "rayrl.host.usable_cores() (os.process_cpu_count, the affinity "
    "mask where the OS has one, os.cpu_count elsewhere)",
    "process_cpu_count": "rayrl.host.usable_cores()",
    "getloadavg": "rayrl.host.load_average() (None where the OS has none)",
    "fcntl": "rayrl.host.try_lock() for a run directory's lock, or " + HOST_HELPER,
    "resource": HOST_HELPER + " (the resource module is Unix only: not on Windows)",
    "msvcrt": HOST_HELPER + " (msvcrt is Windows only)",
    "/proc": "psutil (it reads /proc on Linux and asks the kernel elsewhere), or " + HOST_HELPER,
    "prlimit": "resource.getrlimit/setrlimit for this process, in " + HOST_HELPER,
}
MODULES = ("fcntl", "resource", "msvcrt")
PROC_PATH = re.compile(r"(?<![\w.~/-])/proc(?:/|$)")
"""/proc, /proc/self/status, f"/proc/{pid}": not "act/step/proc %"."""
PRLIMIT = re.compile(r"\bprlimit\b")


@dataclass(frozen=True)
class Finding:
    line: int
    what: str
    key: str
    """What `INSTEAD` advises on: the name, the module, "/proc" or "prlimit"."""

    def describe(self, path: str) -> str:
        advice = INSTEAD.get(self.key, HOST_HELPER)
        return f"{path}:{self.line}: {self.what}: use {advice}"


def findings(source: str, path: str) -> list[Finding]:
    """What `source` (the file at `path`, relative to the repository) uses that it should
    leave to rayrl/host.py, in the order of its lines."""
    if path == HOST:
        return []
    tree = ast.parse(source, filename=path)
    found: list[Finding] = []
    os_names = set(OS_MODULES)  # the names `os` is bound to: `import os as system`
    documentation = {  # bare string statements: docstrings, attribute docstrings
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }

    def platform_name(name: str) -> str | None:
        """The key of an `os` name that only some platforms have."""
        if name in LINUX_ONLY:
            return name
        return name if name == "getloadavg" else None

    def os_name(node: ast.stmt | ast.expr, name: str, how: str) -> None:
        key = platform_name(name)
        if key is not None:
            where = "Linux only" if key in LINUX_ONLY else "not on Windows"
            found.append(Finding(node.lineno, f"{how} ({where})", key))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in OS_MODULES:
                    os_names.add(alias.asname or top)
                elif top in MODULES:
                    found.append(Finding(node.lineno, f"import {alias.name}", top))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if top in MODULES:
                found.append(Finding(node.lineno, f"from {node.module} import ...", top))
            elif node.module in OS_MODULES:
                for alias in node.names:
                    os_name(node, alias.name, f"from {node.module} import {alias.name}")
            if any(alias.name == "prlimit" for alias in node.names):
                found.append(Finding(node.lineno, f"from {node.module} import prlimit", "prlimit"))
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in os_names:
                os_name(node, node.attr, f"{node.value.id}.{node.attr}")
            elif node.attr == "prlimit":
                found.append(Finding(node.lineno, ast.unparse(node), "prlimit"))
        elif isinstance(node, ast.Call):
            # getattr(os, "sched_getaffinity", None), hasattr(os, "memfd_create")
            function, args = node.func, node.args
            if (
                isinstance(function, ast.Name)
                and function.id in ("getattr", "hasattr")
                and len(args) >= 2
                and isinstance(args[0], ast.Name)
                and args[0].id in os_names
                and isinstance(args[1], ast.Constant)
                and isinstance(args[1].value, str)
            ):
                call = f'{function.id}({args[0].id}, "{args[1].value}")'
                os_name(node, args[1].value, call)
        elif isinstance(node, ast.Name) and node.id == "prlimit":
            found.append(Finding(node.lineno, "prlimit", "prlimit"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in documentation
        ):
            if PROC_PATH.search(node.value):
                found.append(Finding(node.lineno, f"a path under /proc: {node.value!r}", "/proc"))
            if PRLIMIT.search(node.value):
                found.append(Finding(node.lineno, f"prlimit in {node.value!r}", "prlimit"))
    return sorted(found, key=lambda finding: finding.line)


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_platform_names_are_used_in_rayrl_host_only():
    files = package_files()
    assert len(files) > 50  # the scan saw the package
    assert PACKAGE / "ray" / "runtime.py" in files
    problems = []
    for file in files:
        path = file.relative_to(REPO).as_posix()
        problems += [f.describe(path) for f in findings(file.read_text(), path)]
    assert not problems, (
        f"{len(problems)} use(s) of what only some operating systems have, outside {HOST} "
        "(the one module that may use them, checking that they are there):\n" + "\n".join(problems)
    )


PLANTED = '''\
"""A docstring may name /proc/self/status, os.sched_getaffinity and prlimit."""
import fcntl
import os as system
import resource
from importlib import resources
from os import getloadavg, sched_setaffinity

COLUMNS = "act/step/proc %"
cores = len(system.sched_getaffinity(0))  # a comment may too: /proc/cpuinfo
load = system.getloadavg()
status = open(f"/proc/{system.getpid()}/status").read()
resource.prlimit(0, resource.RLIMIT_NOFILE)
if hasattr(system, "memfd_create"):
    fine = system.cpu_count(), system.sched_yield(), resources
'''


def test_the_scan_finds_what_is_planted_and_nothing_else():
    found = findings(PLANTED, "rayrl/planted.py")
    assert [(f.line, f.key) for f in found] == [
        (2, "fcntl"),
        (4, "resource"),
        (6, "getloadavg"),
        (6, "sched_setaffinity"),
        (9, "sched_getaffinity"),
        (10, "getloadavg"),
        (11, "/proc"),
        (12, "prlimit"),
        (13, "memfd_create"),
    ]
    described = [f.describe("rayrl/planted.py") for f in found]
    assert described[4] == (
        "rayrl/planted.py:9: system.sched_getaffinity (Linux only): use "
        + INSTEAD["sched_getaffinity"]
    )
    assert described[5].startswith("rayrl/planted.py:10: system.getloadavg (not on Windows)")
    assert described[6].startswith("rayrl/planted.py:11: a path under /proc: '/proc/'")
    assert findings(PLANTED, HOST) == []  # the one module that may
