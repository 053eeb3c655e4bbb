"""The console script's exit (`rayrl.compat.interpreter`) in real processes: what a normal exit does
still happens, the interpreter's finalization does not; and `disconnect`'s early kill of
the local Ray's autoscaler monitor, isolated from Ray."""

from __future__ import annotations

import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import ray

from rayrl.compat.interpreter import exit_code_of
from rayrl.ray import connect


def python(program: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )


def test_exit_now_waits_for_threads_runs_atexit_flushes_and_exits_at_once():
    """A thread still working is waited for, atexit handlers run after it, buffered output
    is written, the status is kept, and nothing after the exit runs (no `finally`)."""
    proc = python(
        """
import atexit, sys, threading, time
from rayrl.compat.interpreter import exit_now

atexit.register(lambda: print("atexit handler ran"))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
sys.stdout.write("buffered, no newline ")
try:
    exit_now(3)
finally:
    print("finally ran")
"""
    )
    assert proc.returncode == 3
    assert proc.stdout == "buffered, no newline thread finished\natexit handler ran\n"


def test_exit_now_stops_a_live_thread_pool_as_a_normal_exit_does():
    """concurrent.futures' workers are non-daemon threads stopped by threading's own exit
    hook: an exit that only joined threads would wait for them forever."""
    proc = python(
        """
from concurrent.futures import ThreadPoolExecutor
from rayrl.compat.interpreter import exit_now

POOL = ThreadPoolExecutor(2)
print(POOL.submit(lambda: 42).result())
exit_now(0)
"""
    )
    assert proc.returncode == 0
    assert proc.stdout == "42\n"


def test_an_interrupt_during_the_exit_exits_at_once_with_130():
    """A second Ctrl-C while the exit waits for a thread: 130 at once, as the CLI says."""
    waiting = subprocess.Popen(
        [
            sys.executable,
            "-c",
            """
import threading, time
from rayrl.compat.interpreter import exit_now

def outlive_the_main_thread():
    while threading.main_thread().is_alive():  # until the exit has begun
        time.sleep(0.01)
    print("exiting", flush=True)
    time.sleep(60)

threading.Thread(target=outlive_the_main_thread).start()
exit_now(0)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waiting.stdout.readline() == "exiting\n"  # exit_now waits for the thread
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=30) == 130


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), (130, 130)])
def test_exit_codes_are_those_of_sys_exit(code, status):
    assert exit_code_of(code) == status


def test_a_message_given_to_sys_exit_is_printed_and_exits_1(capsys):
    assert exit_code_of("stopped") == 1
    assert capsys.readouterr().err == "stopped\n"


def rayrl_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayrl", *args], capture_output=True, text=True, timeout=60
    )


def test_the_console_script_exits_with_the_commands_status():
    version = rayrl_command("--version")
    assert (version.returncode, version.stdout.split(",")[0]) == (0, "rayrl")
    usage = rayrl_command("no-such-command")
    assert usage.returncode == 2
    assert "No such command" in usage.stderr


def test_a_bug_in_a_command_still_prints_its_traceback_and_exits_1():
    proc = python(
        """
import rayrl.cli

def broken(**kwargs):
    raise ZeroDivisionError("a bug")

rayrl.cli.main = broken
rayrl.cli.run()
"""
    )
    assert proc.returncode == 1
    assert "ZeroDivisionError: a bug" in proc.stderr


class FakeProcess:
    def __init__(self) -> None:
        self.killed = False

    def kill(self) -> None:
        self.killed = True


@pytest.fixture
def shutdowns(monkeypatch):
    """`ray.shutdown` calls, counted instead of made (the suite's shared Ray stays up)."""
    calls: list[int] = []
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(1))
    return calls


def test_disconnect_kills_the_monitor_of_a_ray_it_started_then_shuts_down(monkeypatch, shutdowns):
    monitor = FakeProcess()
    node = SimpleNamespace(all_processes={"monitor": [SimpleNamespace(process=monitor)]})
    monkeypatch.setattr(ray._private.worker, "_global_node", node)
    connect.disconnect()
    assert monitor.killed
    assert shutdowns == [1]


def test_disconnect_from_a_joined_cluster_kills_nothing(monkeypatch, shutdowns):
    """A driver that joined a cluster holds a node that started no process."""
    monkeypatch.setattr(ray._private.worker, "_global_node", SimpleNamespace(all_processes={}))
    connect.disconnect()
    assert shutdowns == [1]


def test_disconnect_shuts_down_when_rays_private_state_is_not_as_expected(monkeypatch, shutdowns):
    monkeypatch.setattr(ray._private.worker, "_global_node", SimpleNamespace())
    connect.disconnect()
    assert shutdowns == [1]
