"""Finding the processes of one Ray among several on this machine, for tests that must show
that a Ray they started leaves nothing behind: its processes name its temp dir in their
command lines or carry it as RAY_TMPDIR."""

from __future__ import annotations

import time
from pathlib import Path


def ray_processes(temp_dir: Path | str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        if str(temp_dir) in cmdline or f"RAY_TMPDIR={temp_dir}" in environ:
            found.append(int(entry.name))
    return found


def wait_gone(temp_dir: Path | str, timeout_s: float = 30.0) -> list[int]:
    """The processes still there after up to `timeout_s`: [] when they all exited."""
    deadline = time.monotonic() + timeout_s
    while (left := ray_processes(temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
