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

RAY_INIT_TERMINATED_ONCE = textwrap.dedent(
    """
    import os, signal, sys, time

    import psutil
    import ray
    import ray._private.worker

    from rayrl.ray import connect as rayrl_connect
    from rayrl.run_lifecycle import handle_interrupts

    def agents():
        found = []
        for process in psutil.Process().children(recursive=True):
            try:
                if any("agent" in part for part in process.cmdline()):
                    found.append(process)
            except psutil.Error:
                pass
        return found

    def lingering(process):
        try:
            return process.status() != psutil.STATUS_ZOMBIE  # a zombie waits for its parent
        except psutil.NoSuchProcess:
            return False

    seen = []
    connect = ray._private.worker.connect

    def terminated_once_the_agents_run(*args, **kwargs):
        # inside ray.init, its node started and this driver not yet connected; only the
        # first start is terminated
        if not seen:
            deadline = time.monotonic() + 60
            while len(agents()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.extend(psutil.Process().children(recursive=True))
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # the signal's handler raises here
        return connect(*args, **kwargs)

    def init():
        rayrl_connect._init_keeping_sigterm_handler(
            address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR"
        )

    def first_start_gone():
        gone, alive = psutil.wait_procs(seen, timeout=15)
        alive = [p for p in alive if lingering(p)]
        return len(seen) >= 4 and not alive, f"{len(gone)} of Ray's processes gone, left: {alive}"

    ray._private.worker.connect = terminated_once_the_agents_run
    """
)

STOPPED_BY_A_HANDLER_THAT_RAISES = RAY_INIT_TERMINATED_ONCE + textwrap.dedent(
    """
    handle_interrupts()  # the CLI's: SIGTERM stops the run like Ctrl-C
    try:
        init()
    except KeyboardInterrupt:
        clean, processes = first_start_gone()
        print(f"interrupted; {processes}")
        sys.exit(0 if clean else 3)
    print("ray.init returned")
    sys.exit(4)
    """
)

NOTED_BY_A_HANDLER_THAT_RETURNS = RAY_INIT_TERMINATED_ONCE + textwrap.dedent(
    """
    noted = []

    def note(signum, frame):  # a caller that acts on the request later, at a point of its own
        noted.append(signum)

    signal.signal(signal.SIGTERM, note)
    init()
    clean, processes = first_start_gone()
    kept = signal.getsignal(signal.SIGTERM) is note
    print(f"started; noted {noted}, handler kept {kept}, first start: {processes}")
    ray.get(ray.put(1))  # the second start serves
    ray.shutdown()
    sys.exit(0 if clean and kept and noted == [signal.SIGTERM] else 3)
    """
)


def run_script(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )


def test_sigterm_while_ray_starts_stops_the_run_and_every_process_ray_started():
    """Ray's `ray.init` installs its own SIGTERM handler (`sys.exit(15)`) before it starts
    the local Ray: without rayrl's handling the process ended with 15 and no word, and the
    raylet's agents outlived it."""
    proc = run_script(STOPPED_BY_A_HANDLER_THAT_RAISES)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.startswith("interrupted;"), proc.stdout


def test_sigterm_while_ray_starts_under_a_handler_that_returns_starts_ray_again():
    """A caller's SIGTERM handler that returns asks the process to go on: the signal
    reaches it once, what the cut-short start had started is gone, Ray starts again and
    serves, and the caller's handler stays installed (before, Ray's `sys.exit(15)` went
    through and ended the process)."""
    proc = run_script(NOTED_BY_A_HANDLER_THAT_RETURNS)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.startswith("started;"), proc.stdout
    assert "Ray is starting again" in proc.stderr, proc.stderr[-2000:]


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
