"""PPO end to end: CartPole learned from every seed in one process and with the Ray runtime,
and the local runtime's run."""

from __future__ import annotations

import numpy as np
import pytest

import rayrl
from rayrl.files import read_jsonl
from rayrl.rundir import RunDirectory
from tests.local_runs import local_run


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed",
    [pytest.param(seed, marks=local_run("cartpole_ppo", f"run.seed={seed}")) for seed in (0, 1, 2)],
)
def test_ppo_cartpole_reaches_the_threshold_from_every_seed(local_run_result, seed):
    """`cartpole_ppo` as shipped, within its own budget (100k env steps), in one process: the
    local runtime is deterministic, so each seed solves at the same env step in every run
    (6,144, 18,432 and 18,432; 28,672, 30,720 and 40,960 before the preset took SB3's
    network), where with the Ray runtime the count varies with the asynchronous workers'
    timing (8k-37k in seeds 0-4, 2026-11-28) and a run costs three times the CPU. The Ray
    runtime's PPO learns in the test below and in `test_sweep.py`'s trials."""
    result = local_run_result
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 475
    assert len(result.final_eval.returns) == 10


def train_cartpole_to_300_with_ray(runs_dir, *overrides: str) -> rayrl.TrainResult:
    """`cartpole_ppo`, seed 0, with the Ray runtime, until it evaluates at 300."""
    return rayrl.train(
        "cartpole_ppo",
        overrides=[
            "logging.console=false",
            f"run.runs_dir={runs_dir}",
            "run.seed=0",
            "run.target_return=300",
            *overrides,
        ],
    )


@pytest.mark.slow
def test_ppo_learns_with_ray(ray_cluster, tmp_path):
    """The Ray runtime's PPO (asynchronous workers; unrolls from an older policy corrected
    or dropped) to 300, 14 times a random policy's 22, within the preset's budget of 100k
    env steps: seeds 0-4 reached 475, higher still, at 8k-37k env steps (median 10k) in
    12-23 s."""
    result = train_cartpole_to_300_with_ray(tmp_path)
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 300


@pytest.mark.slow
def test_paced_workers_sample_at_most_one_update_ahead_and_ppo_learns(ray_cluster, tmp_path):
    """With `algorithm.sample_ahead_updates=1` the workers never hold more than the update
    under way and the next one's unrolls beyond what the published weights learned from (one
    chunk of 8 envs x 32 steps is one update here), so the run's env steps stay within
    (updates + 2) x 256 to its end; unpaced, the queue, the learner's prefetched requests and
    the chunks in flight let the workers run about 7 updates ahead. Seed 0 reached 300 at
    23k env steps in 55 s (2026-12-02, beside two other runs)."""
    result = train_cartpole_to_300_with_ray(tmp_path, "algorithm.sample_ahead_updates=1")
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 300
    assert result.counters.env_steps <= (result.counters.updates + 2) * 8 * 32


def test_a_resumed_ray_run_samples_only_with_its_restored_weights(ray_cluster, tmp_path):
    """Workers that acted with their own fresh weights until the restored ones came sampled
    a chunk of an untrained policy each, as many versions behind as the run had updates,
    which the store dropped as stale (a resumed `mpe_spread_ppo` run at 1.5M env steps
    dropped 192 unrolls, its first returns a random policy's; here 16). Paced one update
    ahead, a resumed run drops none."""
    settings = [
        "logging.console=false",
        f"run.runs_dir={tmp_path}",
        "run.seed=0",
        "algorithm.sample_ahead_updates=1",
    ]
    first = rayrl.train("cartpole_ppo", overrides=[*settings, "run.total_env_steps=4096"])
    assert first.counters.updates >= 8  # fresh weights' chunks would lag that many versions
    resumed = rayrl.train(resume=first.run_dir, overrides=["run.total_env_steps=6144"])
    assert resumed.counters.updates > first.counters.updates
    rows = read_jsonl(RunDirectory(first.run_dir).metrics_path)
    after = [row for row in rows if row["env_steps"] > first.counters.env_steps]
    assert all(row.get("queue/dropped_stale", 0.0) == 0.0 for row in after)


def test_ppo_local_runtime_trains_checkpoints_and_evaluates(tiny_run):
    result = rayrl.train("cartpole_ppo", overrides=[*tiny_run, "run.runtime=local"])
    assert result.counters.updates == 2048 // (8 * 32)  # one per batch of 8 unrolls
    assert np.isfinite(result.final_eval.mean)
    evaluation = rayrl.evaluate(result.run_dir, episodes=2, which="latest")
    assert len(evaluation.returns) == 2
