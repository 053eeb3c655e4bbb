"""APPO end to end: `cartpole_appo` solves CartPole in one process, and the Ray runtime's
asynchronous workers train, checkpoint and evaluate with it, recurrent too."""

from __future__ import annotations

import numpy as np
import pytest

import rayrl
from tests.local_runs import local_run


@pytest.mark.slow
@local_run("cartpole_appo", "run.seed=0", seconds=25)
def test_appo_cartpole_reaches_the_threshold_in_one_process(local_run_result):
    """`cartpole_appo` as shipped, within its budget of 100k env steps (seed 0 solved at
    16,384)."""
    result = local_run_result
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= 475


@pytest.mark.parametrize("overrides", [[], ["algorithm.lstm_size=8"]], ids=["mlp", "lstm"])
def test_appo_with_ray_trains_checkpoints_and_evaluates(ray_cluster, tiny_run, overrides):
    """The workers paced one update ahead: unpaced, a worker could sample the tiny budget
    before the learner's process has started, and the run end without an update."""
    paced = "algorithm.sample_ahead_updates=1"
    result = rayrl.train("cartpole_appo", overrides=[*tiny_run, *overrides, paced])
    assert result.counters.env_steps >= 2048
    assert result.counters.updates >= 1
    assert np.isfinite(result.final_eval.mean)
    evaluation = rayrl.evaluate(result.run_dir, episodes=2, which="latest")
    assert len(evaluation.returns) == 2


def test_appo_with_two_learners_keeps_them_identical(ray_cluster, tiny_run):
    """Two all-reduced learners (`learner.num_learners=2`): each recomputes V-trace targets
    on its own batches every pass, and the averaged gradients keep their parameters equal.
    The workers are paced one update ahead, so that the learners learn before the tiny budget
    ends."""
    result = rayrl.train(
        "cartpole_appo",
        overrides=[*tiny_run, "learner.num_learners=2", "algorithm.sample_ahead_updates=1"],
    )
    assert result.counters.updates >= 1
    assert len(result.learner_digests) == 2
    assert len(set(result.learner_digests)) == 1
