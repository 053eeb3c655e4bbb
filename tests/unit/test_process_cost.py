"""bench/process_cost.py: the CPU of the processes that run beside a command, by kind, read
from /proc while it runs, each process under its last name; the command's exit status passed
on."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO

SPIN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
RUN_CHILD = "import os, subprocess as s, sys; s.run([sys.executable, '-c', os.environ['CHILD']])"
"""The command: a parent whose own command line names neither of the child's names."""


def measure(*command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "bench/process_cost.py", "--", *command],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def rows_naming(output: str, name: str) -> list[float]:
    rows = [row for row in output.splitlines() if row.startswith("| ") and name in row]
    return [float(re.match(r"\| ([\d.]+) \|", row).group(1)) for row in rows]


def test_a_child_is_counted_under_the_name_it_ends_with():
    """A child of the command spins 0.5 CPU-s as `first-name`, replaces its program (the same
    process renamed, as Ray's workers rename themselves when they become actors), spins to 1
    CPU-s as `last-name` (a process's CPU time outlives `exec`) and waits to be read again:
    all its CPU, which the command's own CPU time would not include, is in one row, the last
    name's."""
    last = f"# last-name\n{SPIN.format(s=1.0)}import time; time.sleep(1.5)\n"
    first = (
        f"# first-name\n{SPIN.format(s=0.5)}"
        f"import os, sys; os.execv(sys.executable, [sys.executable, '-c', {last!r}])\n"
    )
    done = measure(sys.executable, "-c", RUN_CHILD, CHILD=first)
    assert done.returncode == 0, done.stderr
    assert rows_naming(done.stdout, "first-name") == [], done.stdout
    rows = rows_naming(done.stdout, "last-name")
    assert len(rows) == 1, done.stdout
    assert 0.9 <= rows[0] <= 2.5


def test_a_child_read_after_it_exited_keeps_its_name():
    """An exited child that its parent has not reaped yet (a zombie, whose command line is
    empty) is read as what it was, not as its bare process name."""
    child = f"# zombie-name\n{SPIN.format(s=0.5)}"
    reap_late = (
        "import os, subprocess as s, sys, time; "
        "p = s.Popen([sys.executable, '-c', os.environ['CHILD']]); "
        "time.sleep(2.5); p.wait()"
    )
    done = measure(sys.executable, "-c", reap_late, CHILD=child)
    assert done.returncode == 0, done.stderr
    rows = rows_naming(done.stdout, "zombie-name")
    assert len(rows) == 1, done.stdout
    assert 0.4 <= rows[0] <= 1.5


def test_the_commands_exit_status_is_passed_on():
    assert measure(sys.executable, "-c", "raise SystemExit(3)").returncode == 3
