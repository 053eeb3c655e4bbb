"""SAC end to end: Pendulum learned in both runtimes with normalized observations, whose
statistics travel with the published weights and reach the checkpoint, evaluation and a
resumed run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rayrl
from rayrl.checkpoint import load_checkpoint
from rayrl.errors import CheckpointError
from rayrl.normalization import MOMENTS_PREFIX
from tests.local_runs import local_run

COUNT = f"{MOMENTS_PREFIX}count"


def moments(path):
    payload = load_checkpoint(path)
    published = {
        k: v for k, v in payload["policy"]["weights"].items() if k.startswith(MOMENTS_PREFIX)
    }
    return payload, published, payload["learner"]["observation_moments"]


def assert_statistics_published(result: rayrl.TrainResult) -> None:
    """The weights evaluated and saved carry the learner's statistics, from every update."""
    _, published, learner_state = moments(result.run_dir / "checkpoints" / "latest.pt")
    for key, value in published.items():
        torch.testing.assert_close(value, learner_state[key])
    assert float(published[COUNT]) == result.counters.updates  # batch 256 / 256 per insert
    assert np.all(published[f"{MOMENTS_PREFIX}var"].numpy() > 0)


@pytest.mark.slow
@local_run(
    "pendulum_sac",
    "env.normalize.observations=true",
    "run.target_return=-300",
    "run.total_env_steps=12000",
    "run.eval_interval_env_steps=1000",
    seconds=45,
)
def test_sac_learns_pendulum_with_normalized_observations(local_run_result):
    """`pendulum_sac` reaches -200 in 4-7k env steps (10 deterministic episodes; a random
    policy scores about -1,200); the test asks for -300 within 12k, in one process (it
    evaluated -194 at 3,008 env steps, in 43 s). It evaluates every 1k env steps rather than
    the preset's 2k: each env step brings one update of 256 (about 20 ms of wall time here),
    and two runs with the Ray runtime had reached -300 by 3k (-225 and -236), a thousand
    env steps before the next evaluation the preset would make."""
    result = local_run_result
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= -300
    assert_statistics_published(result)


@pytest.mark.slow
def test_sac_learns_pendulum_with_ray_and_publishes_its_statistics(ray_cluster, tmp_path):
    """The Ray runtime's SAC learns, and the weights its learner actor publishes (to workers,
    evaluator and checkpoint) carry the learner's statistics. Its lower target (-400) and
    budget (12k env steps) are the margin for the asynchronous worker's timing; a 64x64
    actor and critics keep the updates cheap: seeds 0-2 reached it at 3,008 env steps (the
    third evaluation; -317, -320 and -273), in 54-68 s beside two other training runs."""
    result = rayrl.train(
        "pendulum_sac",
        overrides=[
            "logging.console=false",
            f"run.runs_dir={tmp_path}",
            "env.normalize.observations=true",
            "algorithm.hidden_sizes=[64, 64]",
            "run.target_return=-400",
            "run.total_env_steps=12000",
            "run.eval_interval_env_steps=1000",
        ],
    )
    assert result.stop_reason == "target_return reached"
    assert result.final_eval.mean >= -400
    assert_statistics_published(result)


def test_a_resumed_run_goes_on_from_its_statistics_and_its_replay(tiny_run, tmp_path):
    """The local runtime with the off-policy family's options (prioritized 3-step replay
    saved with the checkpoints), then a resume: the statistics go on counting from the
    checkpoint's (a fresh start would count only the resumed segment's updates), and the
    replay comes back."""
    common = [
        *tiny_run,
        "run.runtime=local",
        "env.normalize.observations=true",
        "algorithm.hidden_sizes=[32, 32]",
        "algorithm.random_env_steps=200",
        "algorithm.replay.min_size=256",
        "algorithm.n_step=3",
        "algorithm.replay.prioritized=true",
        "algorithm.replay.save_with_checkpoint=true",
    ]
    first = rayrl.train("pendulum_sac", overrides=[*common, "run.total_env_steps=1024"])
    _, saved, _ = moments(first.run_dir / "checkpoints" / "latest.pt")
    assert float(saved[COUNT]) == first.counters.updates > 0
    assert (first.run_dir / "checkpoints" / "replay.npz").is_file()
    resumed = rayrl.train(resume=first.run_dir, overrides=["run.total_env_steps=2048"])
    _, published, _ = moments(resumed.run_dir / "checkpoints" / "latest.pt")
    # the refilled replay needs no warm-up: an update for each of the 1,024 new env steps
    assert resumed.counters.updates - first.counters.updates > 1024 - 256
    assert float(published[COUNT]) == resumed.counters.updates
    evaluation = rayrl.evaluate(resumed.run_dir, episodes=2, which="latest")
    assert len(evaluation.returns) == 2
    # weights trained on normalized inputs are not fed raw ones
    with pytest.raises(CheckpointError, match=r"set env\.normalize\.observations=true"):
        rayrl.train(resume=first.run_dir, overrides=["env.normalize.observations=false"])
