"""What differs between the operating systems rayrl runs on, in one place.

rayrl runs on Linux and macOS. Some of what it asks of the machine exists on one only:
`sched_getaffinity` (the cores this process may run on) is Linux's, `fcntl`'s locks
and the load average are Unix's, `os.process_cpu_count` is Python 3.13's, `/proc`'s count of
the threads runnable now and its scheduler statistics are Linux's (macOS has only the load
average). Everything else
in the package calls these helpers, and `tests/unit/test_platform_names.py` fails on such a
name used anywhere else under `rayrl/`.

Windows is refused in one line (`check_supported`): Ray's support there is in beta, and
rayrl's signal handling, run locks and process control are not tested on it; WSL 2 is a
Linux.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

import psutil

from rayrl.errors import UserError

try:  # Unix: Linux and macOS
    import fcntl
except ImportError:  # pragma: no cover - Windows, refused by `check_supported`
    fcntl = None  # type: ignore[assignment]


def check_supported() -> None:
    """Raise a `UserError` on an operating system rayrl does not run on."""
    if sys.platform.startswith("win"):
        raise UserError(
            "rayrl runs on Linux and macOS, not on Windows (Ray's Windows support is in "
            "beta and rayrl is not tested there); run it in WSL 2 or a Linux container"
        )


def usable_cores() -> int:
    """The cores this process may run on: Python's own count where it has one (3.13+:
    `os.process_cpu_count`, which honours the CPU affinity), the affinity mask where the OS
    has one (Linux: a container or `taskset` may give fewer cores than the machine has),
    the machine's cores otherwise (macOS has no affinity masks)."""
    process_cpu_count = getattr(os, "process_cpu_count", None)
    if process_cpu_count is not None:
        return int(process_cpu_count() or 1)
    sched_getaffinity = getattr(os, "sched_getaffinity", None)
    if sched_getaffinity is not None:
        return len(sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The machine's load average over the last minute; None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def cpu_contention() -> float:
    """How many threads want each core of this machine now, at least 1: the share of a core
    a CPU-bound process gets is its inverse. Linux counts the threads runnable at this
    instant (`/proc/loadavg`'s fourth field, less the thread reading it); macOS has only the
    load average of the last minute."""
    running: float
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1
    except (OSError, IndexError, ValueError):  # not Linux
        running = load_average() or 0.0
    return max(1.0, running / usable_cores())


def thread_run_queue_waits(pid: int) -> dict[int, float] | None:
    """Seconds each thread of process `pid` has waited on a run queue since it started: time
    it wanted a core while other threads had them (Linux's scheduler statistics,
    `/proc/<pid>/task/<tid>/schedstat`). None where they cannot be read: macOS, a kernel
    built without them, no such process."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    waits: dict[int, float] = {}
    for thread in threads:
        try:
            waits[int(thread)] = (
                int(Path(f"/proc/{pid}/task/{thread}/schedstat").read_text().split()[1]) / 1e9
            )
        except (OSError, IndexError, ValueError):  # the thread has ended
            continue
    return waits or None


def process_stopped(pid: int) -> bool | None:
    """Whether the OS reports process `pid` stopped (SIGSTOP, a debugger, Ctrl-Z): it gets no
    CPU however idle the machine. None when that cannot be read (no such process)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return None


def try_lock(handle: IO[str]) -> bool:
    """Take an exclusive lock on an open file without waiting, held until the file is
    closed or the process ends (also when it is killed): True when taken, False when
    another process holds it. An `OSError` means locks are not supported there (some
    network file systems)."""
    if fcntl is None:  # pragma: no cover - Windows, refused by `check_supported`
        raise OSError("file locks are not supported on this platform")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
