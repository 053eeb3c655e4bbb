"""A run stopped while it starts (SIGTERM from `kill`, `ray job stop` or Kubernetes, or
Ctrl-C) says so in one line, leaves no run directory that holds nothing, and leaves no Ray
process behind. Real processes: the CLI, and a local Ray that is starting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.ports import refusing_port

SIGTERM_INSIDE_RAY_INIT = textwrap.dedent(
    """
    import os, signal, sys, threading, time

    import psutil

    from rayrl.ray import launch
    from rayrl.run_lifecycle import handle_interrupts

    def descendants():
        return psutil.Process().children(recursive=True)

    def agents_started():
        for process in descendants():
            try:
                if any("agent" in part for part in process.cmdline()):
                    return True
            except psutil.Error:
                pass
        return False

    seen = []

    def terminate_once_the_agents_run():
        while not agents_started():
            time.sleep(0.02)
        seen.extend(descendants())
        os.kill(os.getpid(), signal.SIGTERM)

    handle_interrupts()  # the CLI's: SIGTERM stops the run like Ctrl-C
    threading.Thread(target=terminate_once_the_agents_run, daemon=True).start()
    try:
        launch._init_keeping_sigterm_handler(
            address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR"
        )
    except KeyboardInterrupt:
        gone, alive = psutil.wait_procs(seen, timeout=15)
        print(f"interrupted; {len(gone)} of Ray's processes gone, left: {alive}")
        sys.exit(0 if seen and not alive else 3)
    print("ray.init returned before the signal")
    sys.exit(4)
    """
)


def test_sigterm_while_ray_starts_stops_the_run_and_every_process_ray_started():
    """Ray's `ray.init` installs its own SIGTERM handler (`sys.exit(15)`) before it starts
    the local Ray: without rayrl's handling the process ended with 15 and no word, and the
    raylet's agents outlived it."""
    proc = subprocess.run(
        [sys.executable, "-c", SIGTERM_INSIDE_RAY_INIT],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.startswith("interrupted;"), proc.stdout


def test_sigterm_while_connecting_ends_in_one_line_and_leaves_no_run_directory(tmp_path):
    """A run stopped before it wrote anything (here while it waits for a head that does not
    answer) leaves no directory holding only its config and lock."""
    runs = tmp_path / "runs"
    with refusing_port() as (_, port):
        train = [sys.executable, "-m", "rayrl.cli", "train", "--address", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(
            [*train, "--set", f"run.runs_dir={runs}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not any(runs.glob("*/config.yaml")):  # created: the run is connecting
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "stopped: interrupted, without a final checkpoint"
    assert not any(runs.glob("*"))
