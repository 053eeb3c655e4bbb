"""Sweeps on Ray Tune with real rayrl runs as trials: population-based training whose
perturbed value is the one that trains after the restore, a Ray-runtime trial whose actors
live in its placement group, a trial that cannot fit refused up front, and (the real CLI)
a failing trial, Ctrl-C and --resume. ASHA's early stopping runs as a cluster job in
test_job_submission.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from rayrl.errors import UserError
from rayrl.files import read_jsonl
from rayrl.sweeps import sweep
from rayrl.sweeps.trial import ADOPTED_FILE
from tests.integration.test_cli_ray import (  # noqa: F401 -- ray_tmp: a fixture
    ray_tmp,
    start_rayrl,
    wait_for,
)
from tests.processes import wait_gone
from tests.run_files import assert_in_env_step_order, env_steps_logged
from tests.wandb_offline import read_offline_run

REPO = Path(__file__).resolve().parents[2]

LOCAL_CARTPOLE = [
    "run.runtime=local",
    # one CPU each: on the test cluster, whose one (declared) GPU a local trial would
    # otherwise reserve, the trials then run side by side rather than taking turns
    "learner.device=cpu",
    "run.target_return=null",
    "run.eval_episodes=3",
    "run.eval_interval_env_steps=2048",
]


def test_pbt_trains_the_perturbed_value_after_the_restore(ray_cluster, tmp_path):
    """Two trials, one with a learning rate too small to learn: at a perturbation the worse
    copies the better's checkpoint and goes on at 0.8x or 1.2x the better's rate. The rate
    in its saved config, in Tune's config and in the learner's metrics after the copy is the
    perturbed one, not the checkpoint's."""
    result = sweep(
        {
            "name": "pbt",
            "sweeps_dir": str(tmp_path),
            "base": "cartpole_ppo",
            # synchronous PBT: both trials pause at 4,096 env steps until the other is
            # there, and the worse copies the better, whichever started first or ran
            # faster (asynchronous PBT never compared a trial that lagged by whole
            # intervals); 6,144 env steps: no perturbation on the final evaluation
            "set": [*LOCAL_CARTPOLE, "run.total_env_steps=6144", "algorithm.lr_decay=false"],
            "space": {"learner.lr": {"loguniform": [0.00001, 0.003]}},
            "num_trials": 2,
            "search_seed": 0,
            "max_concurrent": 2,
            "scheduler": {
                "name": "pbt",
                "perturbation_interval_env_steps": 4096,
                "quantile_fraction": 0.5,
                "resample_probability": 0.0,
                "synch": True,
            },
        }
    )
    adopted = []
    for trial in result.trials:
        rows = [r for r in read_jsonl(trial.run_dir / "metrics.jsonl") if "learner/lr" in r]
        assert_in_env_step_order(trial.run_dir)
        if (trial.run_dir / ADOPTED_FILE).is_file():
            adopted.append((trial, rows))
    assert adopted, "no trial copied another's checkpoint"
    for trial, rows in adopted:
        copy = read_jsonl(trial.run_dir / ADOPTED_FILE)[-1]
        perturbed = copy["config"]["learner"]["lr"]
        copied_rate = copy["checkpoint_config"]["learner"]["lr"]  # the better trial's
        # the checkpoint of the weights whose evaluation PBT compared, not the one before
        assert copy["env_steps"] == 4096
        assert perturbed / copied_rate in (pytest.approx(0.8), pytest.approx(1.2))
        assert trial.settings["learner.lr"] == pytest.approx(perturbed)  # Tune's config
        saved = yaml.safe_load((trial.run_dir / "config.yaml").read_text())
        assert saved["learner"]["lr"] == pytest.approx(perturbed)
        # what the learner used after the copy: the perturbed rate, not the checkpoint's
        after = [r for r in rows if r["env_steps"] > copy["env_steps"]]
        assert after
        assert all(r["learner/lr"] == pytest.approx(perturbed) for r in after)
    assert result.count("finished") == 2


def test_a_ray_runtime_trial_runs_its_actors_in_its_placement_group(ray_cluster, tmp_path):
    """The trial reserves a learner bundle (CPU, the GPU node's GPU) and three worker CPUs,
    4 of the test cluster's 5 CPUs: an actor placed outside its group would wait forever
    for the GPU and CPUs the group holds, and the run would fail its start timeout. With
    W&B on, the trial's run is in the sweep's W&B group."""
    result = sweep(
        {
            "name": "ray-trial",
            "sweeps_dir": str(tmp_path),
            "base": "cartpole_ppo",
            "set": [
                "run.target_return=null",
                "run.total_env_steps=4096",
                "run.eval_episodes=2",
                "workers.num_workers=3",
                "workers.envs_per_worker=4",
                "faults.start_timeout_s=60",
                "logging.wandb.enabled=true",  # offline in tests
            ],
            "space": {"algorithm.entropy_coef": {"choice": [0.003]}},
        }
    )
    (trial,) = result.trials
    assert trial.status == "finished", trial.error
    assert env_steps_logged(trial.run_dir) >= 4096
    # the sweep's trials share one W&B group, each with its settings in its config
    run = read_offline_run(trial.run_dir)
    assert run["group"] == "ray-trial"
    assert run["config"]["algorithm"]["entropy_coef"] == pytest.approx(0.003)


def test_a_trial_the_cluster_can_never_hold_is_refused_before_any_starts(ray_cluster, tmp_path):
    spec = {
        "name": "too-big",
        "sweeps_dir": str(tmp_path),
        "base": "cartpole_ppo",
        "space": {"workers.num_workers": {"choice": [1, 8]}},
    }
    with pytest.raises(UserError) as refused:
        sweep(spec)
    message = str(refused.value)
    # the learner takes the cluster's GPU and no CPU (rayrl.ray.capacity.learner_cpus)
    assert message.startswith("a trial with workers.num_workers=8 needs {CPU: 8, GPU: 1,")
    assert "the Ray cluster ({CPU: 5" in message
    assert "\n" not in message
    assert not (tmp_path / "too-big").exists()  # a refused sweep leaves nothing


def start_sweep(cwd: Path, temp_dir: Path, *args: str) -> subprocess.Popen:
    # the trials' processes import tests.fake_envs
    return start_rayrl(cwd, temp_dir, "sweep", *args, PYTHONPATH=str(REPO))


def test_a_failed_trial_is_one_line_and_an_interrupted_sweep_resumes(tmp_path, ray_tmp):  # noqa: F811
    """The first trial's rewards turn NaN (the run stops with status 1): one line, and the
    sweep goes on to the second, which Ctrl-C interrupts after its first checkpoint.
    `--resume` keeps the failed trial as it was and continues the other from its checkpoint
    (the rows before it kept), to its budget."""
    spec = tmp_path / "nan_sweep.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "resumable",
                "base": "cartpole_ppo",
                "set": [
                    *LOCAL_CARTPOLE,
                    "run.total_env_steps=20000",
                    "run.checkpoint_interval_env_steps=2048",
                    "learner.max_nonfinite_steps=1",
                    "logging.log_interval_s=0.2",
                ],
                "space": {
                    "env.id": {"grid": ["tests.fake_envs:NanRewardCartPole-v0", "CartPole-v1"]}
                },
                "max_concurrent": 1,
            }
        )
    )
    root = tmp_path / "sweeps" / "resumable"
    proc = start_sweep(tmp_path, ray_tmp, str(spec))
    runs = root / "runs"

    def second_trial_checkpointed() -> bool:
        dirs = sorted(runs.glob("*")) if runs.is_dir() else []
        return (
            len(dirs) == 2
            and (dirs[1] / "checkpoints" / "latest.pt").is_file()
            and env_steps_logged(dirs[1]) > 0
        )

    wait_for(second_trial_checkpointed, 240, proc)
    failed, going = sorted(runs.iterdir())
    before = read_jsonl(going / "metrics.jsonl")
    saved = torch.load(going / "checkpoints" / "latest.pt", weights_only=True)
    assert before[0]["env_steps"] <= saved["counters"]["env_steps"]  # a row the resume keeps
    failed_metrics = (failed / "metrics.jsonl").read_bytes()
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, output
    assert f"interrupted: continue with rayrl sweep --resume {root}" in output
    (failure,) = [line for line in output.splitlines() if " failed: " in line]
    assert "(env.id=tests.fake_envs:NanRewardCartPole-v0 run.seed=0) failed: " in failure
    assert "RunFailedError: the run stopped with status 1" in failure
    assert failure.endswith("the sweep goes on")
    assert wait_gone(ray_tmp, timeout_s=150) == []

    proc = start_sweep(tmp_path, ray_tmp, "--resume", "sweeps/resumable")  # as typed
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert "2 trials: 1 finished, 1 failed" in output
    assert (failed / "metrics.jsonl").read_bytes() == failed_metrics  # not run again
    after = read_jsonl(going / "metrics.jsonl")
    assert after[0] == before[0]  # resumed from its checkpoint, not started over
    assert env_steps_logged(going) >= 20000
    assert_in_env_step_order(going)
    assert json.loads((going / "ended.json").read_text())["exit_code"] == 0
    assert "best settings: --set env.id=CartPole-v1" in output
    assert (root / "best.yaml").is_file()
    assert (root / "results.txt").is_file()
    assert wait_gone(ray_tmp, timeout_s=150) == []
