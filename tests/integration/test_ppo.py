"""PPO end to end: CartPole learned with the Ray runtime from every seed, and the local
runtime's run."""

from __future__ import annotations

import numpy as np
import pytest

import rayrl


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_cartpole_reaches_the_threshold_from_every_seed(ray_cluster, tmp_path, seed):
    """`rayrl train --config cartpole_ppo` with a budget of 150k env steps instead of the
    preset's 100k (the learning rate and clip range anneal over it). The number of env steps
    to solve varies with the timing of the asynchronous workers, not only with the seed: 19
    timed runs of seeds 0-12, some on a loaded machine, solved in 20k-69k, and one CI run of
    seed 1 did not solve within 100k. 150k is twice the slowest of those."""
    budget = 150_000
    result = rayrl.train(
        "cartpole_ppo",
        overrides=[
            "logging.console=false",
            f"run.runs_dir={tmp_path}",
            f"run.seed={seed}",
            f"run.total_env_steps={budget}",
        ],
    )
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 475
    assert len(result.final_eval.returns) == 10
    assert result.counters.env_steps < budget
    assert "stale unrolls dropped" in result.summary


def test_ppo_local_runtime_trains_checkpoints_and_evaluates(tiny_run):
    result = rayrl.train("cartpole_ppo", overrides=[*tiny_run, "run.runtime=local"])
    assert result.counters.updates == 2048 // (8 * 32)  # one per batch of 8 unrolls
    assert np.isfinite(result.final_eval.mean)
    evaluation = rayrl.evaluate(result.run_dir, episodes=2, which="latest")
    assert len(evaluation.returns) == 2
