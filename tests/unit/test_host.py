"""`rayrl.host`'s readings of the machine, on Linux and (the contention) as on macOS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rayrl import host


def test_a_stopped_process_is_told_from_a_running_one():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert host.process_stopped(process.pid) is False
        os.kill(process.pid, signal.SIGSTOP)  # it stops once it is scheduled to
        deadline = time.monotonic() + 60
        while not host.process_stopped(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.process_stopped(process.pid) is True
    finally:
        process.kill()
        process.wait()
    assert host.process_stopped(process.pid) is None  # no such process


def test_contention_is_at_least_one_and_falls_back_to_the_load_average(monkeypatch):
    assert host.cpu_contention() >= 1.0
    read_text = Path.read_text

    def without_proc(path: Path, *args, **kwargs) -> str:
        if str(path).startswith("/proc"):
            raise FileNotFoundError(path)  # as on macOS
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", without_proc)
    monkeypatch.setattr(host, "load_average", lambda: 6.0)
    monkeypatch.setattr(host, "usable_cores", lambda: 2)
    assert host.cpu_contention() == 3.0
    monkeypatch.setattr(host, "load_average", lambda: None)  # no load average at all
    assert host.cpu_contention() == 1.0
