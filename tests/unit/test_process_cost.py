"""bench/process_cost.py: the CPU of the processes a command starts, by kind, read from /proc
while it runs, and the command's exit status passed on."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

SPIN = (
    "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
    "time.sleep(1.5)\n"  # read again before it exits, however busy the machine
)


def measure(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "bench/process_cost.py", "--", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_a_child_of_the_command_is_counted_under_its_own_kind():
    """The command starts a child that spins 0.8 CPU-s, waits and exits: the child, which the
    command's own CPU time would not include, has a row of its own with what it spent."""
    child = "# the-child\n" + SPIN.format(s=0.8)
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    done = measure(sys.executable, "-c", parent)
    assert done.returncode == 0, done.stderr
    rows = [row for row in done.stdout.splitlines() if row.startswith("|") and "the-child" in row]
    assert len(rows) == 1, done.stdout
    cpu_s = float(re.match(r"\| ([\d.]+) \|", rows[0]).group(1))
    assert 0.7 <= cpu_s <= 2.0


def test_the_commands_exit_status_is_passed_on():
    assert measure(sys.executable, "-c", "raise SystemExit(3)").returncode == 3
