"""The console script's exit (`rayrl.quick_exit`), in real processes: what a normal exit
does still happens without the interpreter's finalization."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rayrl.quick_exit import exit_code_of

PROGRAM = """
import atexit, sys, threading, time
from rayrl.quick_exit import exit_now

atexit.register(lambda: print("atexit handler ran"))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
sys.stdout.write("buffered, no newline")
exit_now(3)
"""


def test_exit_now_waits_for_threads_runs_atexit_flushes_and_keeps_the_code():
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3
    assert proc.stdout == "buffered, no newlinethread finished\natexit handler ran\n"


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), (130, 130)])
def test_exit_codes_are_those_of_sys_exit(code, status):
    assert exit_code_of(code) == status


def test_a_message_given_to_sys_exit_is_printed_and_exits_1(capsys):
    assert exit_code_of("stopped") == 1
    assert capsys.readouterr().err == "stopped\n"


def test_the_console_script_exits_with_the_commands_status():
    ok = subprocess.run(
        [sys.executable, "-m", "rayrl", "--version"], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0
    assert ok.stdout.startswith("rayrl, version")
    usage = subprocess.run(
        [sys.executable, "-m", "rayrl", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert usage.returncode == 2
    assert "No such command" in usage.stderr
