"""`cluster/README.md` followed to the letter against a real Ray head: `ray start --head`
on 127.0.0.1, the token from `ray get-auth-token`, `ray job submit` with the working dir
and `cluster/runtime_env.yaml`, then `ray job status` and `ray job logs`.

The head is a second Ray on this machine, beside the suite's test cluster: its own ports and
temp dir, started with `--block` so that stopping that one process stops exactly the Ray it
started (`ray stop` would stop every Ray here).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rayrl.files import read_jsonl
from rayrl.presets import load_config
from tests.ports import free_ports
from tests.processes import wait_gone
from tests.run_files import env_steps_logged

REPO = Path(__file__).resolve().parents[2]
RAY_PORT_OPTIONS = (
    "--port",
    "--dashboard-port",
    "--ray-client-server-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
)


def cli_env() -> dict[str, str]:
    """This Python's `ray` and `python` first on PATH (as in an activated virtualenv), and
    nothing that points at the suite's own Ray."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def ray_head():
    """A real `ray start --head` bound to 127.0.0.1 on free ports; yields the Jobs API
    address and the CLI environment with the token, as cluster/README.md sets it up."""
    env = cli_env()
    # cluster/README.md: a token first (made once, kept in ~/.ray/auth_token), then a head
    # that requires it (Ray 2.52 makes a token only with token authentication on)
    env["RAY_AUTH_MODE"] = "token"
    run(["ray", "get-auth-token", "--generate"], env)
    ports = dict(zip(RAY_PORT_OPTIONS, free_ports(len(RAY_PORT_OPTIONS)), strict=True))
    temp_dir = tempfile.mkdtemp(prefix="rayrl-job-", dir="/tmp")  # short: socket paths
    command = ["ray", "start", "--head", "--block", "--node-ip-address=127.0.0.1"]
    command += ["--dashboard-host=127.0.0.1", "--include-dashboard=true"]
    command += [f"{option}={port}" for option, port in ports.items()]
    # room for a training job's actors (a worker and the learner) or a sweep's trial
    command += ["--num-cpus=4", f"--object-store-memory={300 * 2**20}"]
    command += [f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 -- closed below
    head = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    address = f"http://127.0.0.1:{ports['--dashboard-port']}"
    try:
        # and the client side, as a user exports it
        env["RAY_AUTH_TOKEN"] = run(["ray", "get-auth-token"], env).strip()
        env["RAY_API_SERVER_ADDRESS"] = address
        deadline = time.monotonic() + 90
        while True:
            assert head.poll() is None, (Path(temp_dir) / "ray-start.log").read_text()
            listed = subprocess.run(
                ["ray", "job", "list"], env=env, capture_output=True, text=True, check=False
            )
            if listed.returncode == 0:
                break
            assert time.monotonic() < deadline, f"Jobs API never came up: {listed.stderr}"
            time.sleep(1)
        yield env
    finally:
        head.send_signal(signal.SIGTERM)  # --block: the head stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
        assert wait_gone(temp_dir) == [], "processes of the test's Ray head outlived it"
        shutil.rmtree(temp_dir, ignore_errors=True)


FINAL_STATES = {"succeeded": "SUCCEEDED", "was stopped": "STOPPED", "failed": "FAILED"}
"""How `ray job logs --follow` ends its output (Ray 2.60's `_log_job_status`), by end state."""


def wait_for_job(job_id: str, env: dict[str, str], timeout_s: float) -> tuple[str, str]:
    """Follow the job's logs until it ends, as cluster/README.md watches a job: one `ray job
    logs --follow`, which returns once the job is SUCCEEDED, FAILED or STOPPED and then says
    which (a `ray job status` every few seconds would cost a CLI start-up, 1.5 CPU-s, each).
    Returns (that state, the job's logs)."""
    command = ["ray", "job", "logs", "--follow", job_id]
    try:
        done = subprocess.run(
            command, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        logs = run(["ray", "job", "logs", job_id], env)
        raise AssertionError(f"job {job_id} did not finish in {timeout_s} s:\n{logs}") from None
    said = done.stdout + done.stderr
    for words, state in FINAL_STATES.items():
        if f"Job '{job_id}' {words}" in said:
            return state, done.stdout
    # the stream broke off before the end: ask once
    status = run(["ray", "job", "status", job_id], env)
    ended = [state for state in FINAL_STATES.values() if state in status.upper()]
    assert ended, f"job {job_id} has not ended:\n{status}\n{said}"
    return ended[0], done.stdout


def submit(job_id: str, env: dict[str, str], *command: str) -> None:
    """`ray job submit --no-wait` of `python -m rayrl COMMAND` with the repository's working
    dir and runtime env, as cluster/README.md writes it."""
    run(
        [
            "ray", "job", "submit",
            "--working-dir", ".",
            "--runtime-env", "cluster/runtime_env.yaml",
            "--submission-id", job_id,
            "--no-wait",
            "--",
            "python", "-m", "rayrl", *command,
        ],
        env,
    )  # fmt: skip


def submit_training(job_id: str, env: dict[str, str], *settings: str) -> None:
    """`rayrl train` as a job, quiet, with no target return, a short warm-up and one rollout
    worker (a second would cost the test a process start-up that imports torch), plus
    `settings` (`--set` values)."""
    sets = [
        "logging.console=false",
        "run.target_return=null",
        "algorithm.replay.min_size=256",
        "workers.num_workers=1",
    ]
    submit(job_id, env, "train", *(part for s in [*sets, *settings] for part in ("--set", s)))


def test_submitted_training_job_runs_to_its_final_evaluation(ray_head, tmp_path):
    job_id = f"rayrl-test-{uuid.uuid4().hex[:8]}"
    submit_training(
        job_id,
        ray_head,
        f"run.runs_dir={tmp_path}",
        "run.name=job",
        "run.total_env_steps=2048",
        "run.eval_episodes=2",
        "workers.envs_per_worker=4",
        "algorithm.steps_per_chunk=16",
    )
    status, logs = wait_for_job(job_id, ray_head, timeout_s=240)
    assert status == "SUCCEEDED", logs
    assert "stopped: total_env_steps reached" in logs
    assert "final evaluation: mean return" in logs
    assert "does not enforce token authentication" not in logs  # this head requires a token
    # the run went where it was told to, with its checkpoint and metrics
    assert (tmp_path / "job" / "checkpoints" / "latest.pt").is_file()
    assert (tmp_path / "job" / "metrics.jsonl").is_file()


def test_ray_job_stop_with_its_defaults_ends_the_run_with_a_final_checkpoint(ray_head, tmp_path):
    """`ray job stop` as users type it: SIGTERM, and a kill after the wait the job's
    runtime env (cluster/runtime_env.yaml) sets. rayrl ends in that time: the final
    checkpoint is written after the periodic ones, and nothing is left half-written."""
    job_id = f"rayrl-stop-{uuid.uuid4().hex[:8]}"
    submit_training(
        job_id,
        ray_head,
        f"run.runs_dir={tmp_path}",
        "run.name=stopped",
        "run.total_env_steps=10000000",
        "run.checkpoint_interval_env_steps=2048",
        "algorithm.replay.save_with_checkpoint=true",
    )
    run_dir = tmp_path / "stopped"
    checkpoints = run_dir / "checkpoints"

    def newest_periodic() -> int:
        return max((int(p.stem.split("_")[1]) for p in checkpoints.glob("step_*.pt")), default=-1)

    # stopped once the run has sampled past its newest periodic checkpoint (the final one
    # may itself be periodic, when one is due as the run ends)
    deadline = time.monotonic() + 240
    while (before_stop := newest_periodic()) < 0 or env_steps_logged(run_dir) <= before_stop:
        assert time.monotonic() < deadline, run(["ray", "job", "logs", job_id], ray_head)
        time.sleep(1)
    run(["ray", "job", "stop", job_id], ray_head)
    status, logs = wait_for_job(job_id, ray_head, timeout_s=150)
    assert status == "STOPPED", logs
    assert "stopped: interrupted" in logs  # it ended itself, not killed
    final = torch.load(checkpoints / "latest.pt", weights_only=True)["counters"]
    assert final["env_steps"] > before_stop
    # the final checkpoint, not a periodic one written between the check and the stop: its
    # count is the one the run ended at, in the last metrics row
    assert final["env_steps"] == read_jsonl(run_dir / "metrics.jsonl")[-1]["env_steps"]
    # the replay saved with the final checkpoint, not an older periodic one
    with np.load(checkpoints / "replay.npz") as replay:
        assert int(replay["metadata_env_steps"]) == final["env_steps"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_sweep_submitted_as_a_job_stops_the_worse_trial_with_asha(ray_head, tmp_path):
    """`ray job submit -- python -m rayrl sweep`, as cluster/README.md shows it: two trials
    one after the other, the first learning (the preset's rate), the second not (a rate a
    thousand times smaller). ASHA records the first at each rung and stops the second at the
    first rung, where it is worse; the table ranks the first, whose settings are best. No
    target return: the preset's network solves CartPole before the first rung (6k env steps
    from seed 0), and a trial that stops there never reaches a rung to be recorded at."""
    spec = tmp_path / "asha_sweep.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "asha",
                "sweeps_dir": str(tmp_path / "sweeps"),
                "base": "cartpole_ppo",
                "set": [
                    "run.runtime=local",
                    "run.total_env_steps=20000",
                    "run.target_return=null",
                    "run.eval_episodes=5",
                    "run.eval_interval_env_steps=2048",
                ],
                "space": {"learner.lr": {"grid": [0.001, 0.000001]}},
                "max_concurrent": 1,
                "scheduler": {"name": "asha", "grace_env_steps": 8192, "reduction_factor": 2},
            }
        )
    )
    job_id = f"rayrl-sweep-{uuid.uuid4().hex[:8]}"
    submit(job_id, ray_head, "sweep", str(spec))
    status, logs = wait_for_job(job_id, ray_head, timeout_s=300)
    assert status == "SUCCEEDED", logs
    assert "2 trials: 1 finished, 1 stopped early" in logs
    assert "best settings: --set learner.lr=0.001" in logs
    root = tmp_path / "sweeps" / "asha"
    learned, stopped = sorted((root / "runs").iterdir())
    assert 8192 <= env_steps_logged(stopped) < 20000
    assert not (stopped / "ended.json").exists()
    assert (learned / "ended.json").is_file()
    assert load_config(root / "best.yaml").learner.lr == 0.001
    assert (root / "best.png").is_file()
    assert "rank" in (root / "results.txt").read_text()
