"""rayrl on a macOS-like Python, on public APIs only: every process of the command (the
driver, the local Ray's workers and actors, each Tune trial) runs with the `os` functions
and constants that macOS's Python lacks removed by `tests/macos_like/sitecustomize.py`,
which leaves a mark for each process it ran in, and with `RAYRL_PUBLIC_API_ONLY=1`, which
makes every private access of `rayrl.compat` fail and take its fallback (a Mac with a Ray
newer than rayrl knows). The default `rayrl train`, `--runtime local` and a two-trial
synchronous PBT sweep (on Tune's own PBT, the fallback) each run to their end, and the
removal is shown to have reached the Ray worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rayrl.compat import PUBLIC_ONLY_ENV
from rayrl.rundir import LOCK
from tests.conftest import REPO
from tests.integration.test_cli_ray import (  # noqa: F401 -- ray_tmp: a fixture
    only_run,
    ray_tmp,
    start_rayrl,
)
from tests.macos_like.sitecustomize import LINUX_ONLY_OS_NAMES, MARKS_ENV
from tests.processes import wait_gone

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="simulates macOS on Linux (tests/processes.py reads /proc)",
)

MACOS_LIKE = REPO / "tests" / "macos_like"


def macos_like_env(marks: Path) -> dict[str, str]:
    """The environment variables that make a process, and every process it starts, macOS-like
    and leave their marks in `marks`."""
    marks.mkdir(exist_ok=True)
    pythonpath = [str(MACOS_LIKE), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(pythonpath), MARKS_ENV: str(marks)}


def macos_like_public_only_env(marks: Path) -> dict[str, str]:
    """`macos_like_env`, and every private access of `rayrl.compat` refused."""
    return {**macos_like_env(marks), PUBLIC_ONLY_ENV: "1"}


def marked(marks: Path) -> set[int]:
    """The pids of the processes that the simulation ran in."""
    return {int(mark.name) for mark in marks.iterdir()}


def ray_worker_pids(temp_dir: Path) -> set[int]:
    """The pids of the worker processes (each actor's, and idle ones) of the local Ray under
    `temp_dir`: Ray logs each worker's output to `worker-<worker id>-<job id>-<pid>.out`."""
    logs = list(temp_dir.glob("ray/session_*/logs/worker-*.out"))
    return {int(log.stem.rsplit("-", 1)[1]) for log in logs}


def run_macos_like(cwd: Path, temp_dir: Path, *args: str, timeout_s: float) -> tuple[int, str]:
    """`rayrl ARGS` on a macOS-like Python, its Ray's processes under `temp_dir`, to its end:
    its pid and its output. A command still running after `timeout_s` is killed with its
    process group, and the test fails."""
    proc = start_rayrl(cwd, temp_dir, *args, **macos_like_public_only_env(cwd / "marks"))
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=30)
        pytest.fail(f"rayrl {' '.join(args)} still running after {timeout_s} s:\n{output}")
    assert proc.returncode == 0, output
    # what would fail on a Mac: Python's error for a name that the simulation removed
    assert "AttributeError: module 'os' has no attribute" not in output, output
    return proc.pid, output


def trainer_pid(run_dir: Path) -> int:
    """The pid of the process that trained in `run_dir`: its lock file names it."""
    return int((run_dir / LOCK).read_text())


def set_options(overrides: list[str]) -> list[str]:
    return [word for override in overrides for word in ("--set", override)]


def test_the_names_are_gone_in_a_process_started_with_the_simulation(tmp_path):
    """The check of the check: in a process with the simulation's environment no listed name
    is left in `os`, `from os import *` still works, Python 3.13's `os.process_cpu_count`
    still counts, and the process left its mark; in this one, which imported the
    sitecustomize as a module of the tests, every name is still there."""
    assert "sched_getaffinity" in LINUX_ONLY_OS_NAMES
    assert all(hasattr(os, name) for name in ("sched_getaffinity", "memfd_create", "O_DIRECT"))
    marks = tmp_path / "marks"
    script = (
        "import os, sys\n"
        "from os import *\n"
        "from tests.macos_like.sitecustomize import removed_names\n"
        "left = [name for name in removed_names() if hasattr(os, name)]\n"
        "assert not left, left\n"
        "assert sys.modules['sitecustomize'].__file__.startswith(sys.argv[1])\n"
        "assert (getattr(os, 'process_cpu_count', os.cpu_count)() or 0) >= 1\n"
        "print(os.getpid())\n"
    )
    env = {**os.environ, **macos_like_env(marks)}
    env["PYTHONPATH"] += os.pathsep + str(REPO)  # the script imports the list
    done = subprocess.run(
        [sys.executable, "-c", script, str(MACOS_LIKE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert marked(marks) == {int(done.stdout)}


def test_default_train_runs_on_ray_with_every_process_macos_like(tmp_path, ray_tmp, tiny):  # noqa: F811
    """`rayrl train` (DQN on CartPole, the Ray runtime on a local Ray that the command
    starts) at a tiny budget: the run ends with its final evaluation, and every Ray worker
    process that started (the learner's, the rollout worker's and the store's actors among
    them) ran the simulation, as did the driver."""
    pid, output = run_macos_like(tmp_path, ray_tmp, "train", *set_options(tiny), timeout_s=300)
    assert "stopped: total_env_steps reached" in output
    assert "final evaluation: mean return" in output
    marks, workers = marked(tmp_path / "marks"), ray_worker_pids(ray_tmp)
    assert pid in marks
    # an actor each for the learner, the rollout worker and the store
    assert len(workers) >= 3, sorted(ray_tmp.glob("ray/session_*/logs/*"))
    assert workers <= marks, (workers, marks)
    assert wait_gone(ray_tmp, timeout_s=150) == []


def test_local_runtime_train_runs_macos_like(tmp_path, ray_tmp, tiny):  # noqa: F811
    """`rayrl train --runtime local`: one process, no Ray."""
    pid, output = run_macos_like(
        tmp_path, ray_tmp, "train", "--runtime", "local", *set_options(tiny), timeout_s=180
    )
    assert "stopped: total_env_steps reached" in output
    assert "final evaluation: mean return" in output
    assert trainer_pid(only_run(tmp_path / "runs")) == pid
    assert pid in marked(tmp_path / "marks")
    assert wait_gone(ray_tmp) == []


def test_a_pbt_sweep_runs_its_trials_macos_like(tmp_path, ray_tmp, tiny):  # noqa: F811
    """`rayrl sweep` with two local-runtime trials at a tiny budget under synchronous PBT,
    which falls back to Tune's own scheduler (said in one line): the sweep ends with both
    trials, and the simulation ran in the processes of the Ray that the sweep started, the
    trials' among them (Tune runs each trial in an actor: a Ray worker process). Tune's own
    PBT may end a trial it copied into early (`rayrl.compat.tune_internals`), so how each
    trial ended is not asserted."""
    spec = tmp_path / "macos_like_sweep.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "macos-like",
                "sweeps_dir": str(tmp_path / "sweeps"),
                "set": [
                    "run.runtime=local",
                    # each trial's run directory is the sweep's to choose
                    *[o for o in tiny if not o.startswith("run.runs_dir=")],
                ],
                "space": {"learner.lr": {"loguniform": [0.0005, 0.001]}},
                "num_trials": 2,
                "search_seed": 0,
                "max_concurrent": 2,
                "scheduler": {
                    "name": "pbt",
                    "perturbation_interval_env_steps": 1024,
                    "synch": True,
                },
            }
        )
    )
    pid, output = run_macos_like(tmp_path, ray_tmp, "sweep", str(spec), timeout_s=400)
    assert "2 trials: " in output
    assert "scheduler.synch=true runs on Tune's own synchronous PBT" in output
    trials = {trainer_pid(run) for run in (tmp_path / "sweeps" / "macos-like" / "runs").iterdir()}
    marks, workers = marked(tmp_path / "marks"), ray_worker_pids(ray_tmp)
    assert pid in marks
    assert len(trials) == 2  # two processes, neither the driver: Ray workers
    assert pid not in trials
    assert trials <= workers <= marks, (trials, workers, marks)
    assert wait_gone(ray_tmp, timeout_s=150) == []
