"""The real `rayrl train` command with the Ray runtime, each in its own process with its own
local Ray: the default run, Ctrl-C, SIGKILL and --resume. Every test checks that no process
of the Ray it started is left behind."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from rayrl.files import read_jsonl
from rayrl.host import usable_cores
from rayrl.ray.capacity import SMALL_MACHINE_CPUS
from tests.processes import ray_processes, wait_gone
from tests.run_files import assert_in_env_step_order


def short_ray_tmp() -> Path:
    """A short RAY_TMPDIR (Ray's socket paths have a length limit), to find the processes of
    the Ray that a command started: their command lines name it."""
    return Path(tempfile.mkdtemp(prefix="rr", dir="/tmp"))


def remove_ray_tmp(path: Path, timeout_s: float) -> None:
    """Wait up to `timeout_s` for the processes of the Ray under `path` to exit, then kill
    what is left (never leave them to the next test, even when this one failed) and fail
    naming them."""
    leftover = wait_gone(path, timeout_s=timeout_s)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)
    assert not leftover, f"Ray processes left behind: {leftover}"


@pytest.fixture
def ray_tmp():
    """`short_ray_tmp` for a test whose Ray has exited by the test's end."""
    path = short_ray_tmp()
    yield path
    remove_ray_tmp(path, timeout_s=0)


@pytest.fixture(scope="module")
def slow_exit_ray_tmp():
    """`short_ray_tmp` for a Ray whose processes may still be exiting when its test ends:
    they are waited for (up to 150 s) once the module's other tests have run, so that the
    wait overlaps them. Its test runs first in the module. Ray's per-node agents, seeing
    their raylet die without a SIGTERM (its driver SIGKILLed), try for 60 s, a timeout fixed
    in Ray's `publish_error_to_driver`, to tell the GCS, gone with the driver, before they
    exit: in about half of the runs, 45-60 s after the kill."""
    path = short_ray_tmp()
    yield path
    remove_ray_tmp(path, timeout_s=150)


UNTIL_STOPPED = ("--set", "run.target_return=null", "--set", "logging.console=false")
"""A quiet run that goes on until the test stops it."""
ON_CPU = (
    "learner.num_gpus is null and the Ray cluster has no GPU for each of the 1 learner(s): "
    "the learner trains on CPU"
)
"""What a run says when `learner.num_gpus` is null and no GPU is there."""


def start_train(cwd: Path, ray_tmp: Path, *args: str) -> subprocess.Popen:
    return start_rayrl(cwd, ray_tmp, "train", *args)


def start_rayrl(cwd: Path, ray_tmp: Path, *args: str, **env_vars: str) -> subprocess.Popen:
    """`rayrl ARGS` in a process of its own, its local Ray's processes named by `ray_tmp`."""
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONUNBUFFERED": "1", **env_vars}
    return subprocess.Popen(
        [sys.executable, "-m", "rayrl.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, like a job started from a shell
    )


def wait_for(condition, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"rayrl exited early ({proc.returncode}):\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out:\n{proc.stdout.read()}")
        time.sleep(0.5)


def assert_actors_at_the_drivers_priority(driver: int, ray_tmp: Path) -> None:
    """Every actor of the local Ray under `ray_tmp` runs at the driver's nice value (Ray's
    own default would put them 15 below it: `rayrl.ray.connect.local_system_config`)."""
    actors = {}
    for pid in ray_processes(ray_tmp):
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            if name.startswith("ray::"):
                actors[f"{name} ({pid})"] = os.getpriority(os.PRIO_PROCESS, pid)
        except OSError:  # exited meanwhile
            continue
    roles = {name.split(" ")[0].split(".")[0] for name in actors}  # ray::Role.method (pid)
    assert {"ray::LearnerService", "ray::WorkerService", "ray::ExperienceService"} <= roles
    driver_nice = os.getpriority(os.PRIO_PROCESS, driver)
    assert all(nice == driver_nice for nice in actors.values()), (driver_nice, actors)


def only_run(runs: Path) -> Path:
    (run,) = runs.iterdir()
    return run


def test_sigkilled_run_resumes_from_its_last_checkpoint(tmp_path, slow_exit_ray_tmp):
    ray_tmp = slow_exit_ray_tmp
    proc = start_rayrl(
        tmp_path,
        ray_tmp,
        "train",
        *UNTIL_STOPPED,
        "--set",
        "run.checkpoint_interval_env_steps=2048",
        # a first evaluation (best.pt) by then too, and one worker: the kill comes sooner
        "--set",
        "run.eval_interval_env_steps=2048",
        "--set",
        "run.eval_episodes=2",
        "--set",
        "workers.num_workers=1",
        # Ray's per-node agents, seeing their raylet die unexpectedly, report it to the GCS
        # (gone with the driver) before they exit, retrying for this long (Ray's default,
        # 60 s, made half of these tests wait a minute for them)
        RAY_gcs_rpc_server_reconnect_timeout_s="10",
    )
    runs = tmp_path / "runs"
    wait_for(
        lambda: (
            bool(list(runs.glob("*/checkpoints/step_*.pt")))
            and bool(list(runs.glob("*/checkpoints/best.pt")))
        ),
        180,
        proc,
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    run = only_run(runs)
    saved = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["counters"]
    target = saved["env_steps"] + 2048
    best = run / "checkpoints" / "best.pt"
    best_before = torch.load(best, weights_only=True)["counters"]["best_eval_return"]

    resumed = start_train(
        tmp_path,
        ray_tmp,
        "--resume",
        str(run),
        "--set",
        "workers.num_workers=1",
        "--set",
        f"run.total_env_steps={target}",
    )
    output, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, output
    assert "stopped: total_env_steps reached" in output
    rows = read_jsonl(run / "metrics.jsonl")
    after = [r for r in rows if r["env_steps"] > saved["env_steps"]]
    assert after
    assert after[-1]["env_steps"] >= target
    # the killed segment's rows from the checkpoint on were cut: env steps strictly increase
    assert_in_env_step_order(run)
    # best.pt is only ever replaced by a better evaluation
    assert torch.load(best, weights_only=True)["counters"]["best_eval_return"] >= best_before
    final = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["counters"]
    assert final["updates"] >= saved["updates"]
    assert final["env_steps"] >= target
    # Ray's processes share the driver's fate: `slow_exit_ray_tmp` waits for its slowest
    # (the resume did not wait for them)


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands(section: str) -> list[list[str]]:
    """The commands of the first bash block under the README's heading `section`, each
    split into words, comments dropped."""
    text = README.read_text().split(f"## {section}\n", 1)[1]
    block = re.search(r"```bash\n(.*?)\n```", text, flags=re.DOTALL)
    assert block, f"no bash block under {section!r} in README.md"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines()]


@pytest.mark.slow
def test_default_train_trains_cartpole_with_ray_and_prints_the_evaluation(tmp_path, ray_tmp):
    """The README's first commands: `rayrl train`, no flags, then `rayrl evaluate` and
    `rayrl plot` on the run it saved, as the README writes them."""
    train, evaluate, plot = readme_commands("Train, evaluate, plot")
    assert train == ["rayrl", "train"]
    proc = start_train(tmp_path, ray_tmp)
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, output
    final = re.search(r"final evaluation: mean return ([\d.]+) over 10 episodes", output)
    assert final, output
    assert float(final.group(1)) >= 475
    assert "target return reached in" in output
    for section in ("workers:", "learner:", "replay:", "policy lag", "weight sync"):
        assert section in output
    # run.evaluator=auto on the local Ray the command started: the driver on a small machine
    in_driver = usable_cores() <= SMALL_MACHINE_CPUS
    assert ("evaluations run on a thread of this process" in output) == in_driver, output
    run = only_run(tmp_path / "runs")
    assert (run / "checkpoints" / "best.pt").is_file()
    assert wait_gone(ray_tmp) == []

    printed = [run_readme_command(command, tmp_path, run) for command in (evaluate, plot)]
    assert re.match(r"10 episodes: mean [\d.]+  std", printed[0]), printed[0]
    assert (tmp_path / "curves.png").stat().st_size > 0


def run_readme_command(words: list[str], cwd: Path, run: Path) -> str:
    """A README command on the run it names `<run>` (under `cwd/runs`): what it printed."""
    assert words[0] == "rayrl"
    words = [word.replace("<run>", run.name) for word in words]
    done = subprocess.run(
        [sys.executable, "-m", "rayrl.cli", *words[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [
        (signal.SIGINT, True),  # a terminal's Ctrl-C: the whole foreground process group
        (signal.SIGTERM, False),  # `kill`, `ray job stop`, Kubernetes: the process alone
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_interrupt_checkpoints_and_leaves_no_ray_behind(tmp_path, ray_tmp, signum, to_group):
    """On a machine without a GPU (CUDA hidden), the run says once that its learner trains on
    CPU; its actors, once learning, run at the command's priority; a signal stops the run
    with a checkpoint and takes its local Ray down with it."""
    proc = start_rayrl(
        tmp_path,
        ray_tmp,
        "train",
        *UNTIL_STOPPED,
        "--set",
        "logging.log_interval_s=0.5",
        CUDA_VISIBLE_DEVICES="",
    )
    metrics = tmp_path / "runs"

    def learning():
        files = list(metrics.glob("*/metrics.jsonl"))
        return files and '"learner/loss"' in files[0].read_text()

    wait_for(learning, 180, proc)
    assert_actors_at_the_drivers_priority(proc.pid, ray_tmp)
    if to_group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    # the end of a run waits at most 20 s for the learner's calls and 60 s for its state
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, output
    assert "stopped: interrupted" in output
    said = [line for line in output.splitlines() if "learner.num_gpus is null" in line]
    assert len(said) == 1, output
    assert said[0].endswith(ON_CPU)
    payload = torch.load(only_run(metrics) / "checkpoints" / "latest.pt", weights_only=True)
    assert payload["counters"]["env_steps"] > 0
    assert payload["counters"]["updates"] > 0
    # Ray's per-node agents exit once they notice their raylet is gone: within seconds on
    # an idle machine, and, in a full test run on a loaded one, past 30 s
    assert wait_gone(ray_tmp, timeout_s=150) == []
