"""Learning you can check in CI: each algorithm's MinAtar preset on Breakout must reach an
evaluation return well above a random policy's. The runs go in one process
(`tests/local_runs.py`), where they are deterministic and run beside the suite's other local
learning runs, two at a time: the Ray runtime's DQN, IMPALA and PPO learn in their CartPole
tests (`test_ray_runtime.py`, `test_impala.py`, `test_recurrent.py`, `test_ppo.py`).

A uniformly random policy (sticky actions 0.1, 100 episodes) scores 0.40 on
MinAtar/Breakout-v1 (std 0.62, 95th percentile 1; the mean of 20 such episodes has a
standard deviation of 0.14). Measured on this 2-core machine (seed 0): PPO evaluated 3.2 at
150k env steps with the Ray runtime (20 evaluation episodes, 6k env steps/s; 3.0 at 150k
with the critic of its own and normalised rewards the preset has since 2026-11-27) and 3.9
at 106k in one process (41 s), IMPALA 3.0 at 400k with the Ray runtime (10 episodes, 8k env
steps/s); their target is 3 (a paddle that returns the ball a few times), their budgets more
than twice that. IMPALA in one process reached 3 at 100k, 100k and 75k env steps (seeds 0-2,
13-17 s each), since its preset replays each batch 4 times (`algorithm.epochs`, 2026-11-28)
at 25k, 50k and 25k (12-17 s each), and with 64 unrolls per update at the rate scaled for
this budget (2026-12-06) at 50k, 50k and 25k. DQN with the paper's one update per env step
runs at about 230 env steps/s here (a batch-32 update of the small CNN costs about 6 ms on
this CPU), too slow for CI: its test keeps the preset's network, optimizer and loss and
changes only the pace (4x fewer updates per insert, a shorter warm-up and exploration
schedule, a faster target copy), all named in the test. In one process it evaluated 3.55 at
60k env steps (seed 0; seeds 1 and 2: 1.55 and 1.95 at 50k, in 70-85 s each), so its target
is 1.5 (3.75 times the random policy's mean) within 150k.
"""

from __future__ import annotations

import pytest

import rayrl
from tests.local_runs import local_run

pytestmark = pytest.mark.slow

SEED_AND_EVALUATION = ("run.seed=0", "run.eval_episodes=20")

DQN_AT_A_CHEAPER_PACE = (
    "algorithm.replay.samples_per_insert=8",
    "algorithm.replay.min_size=2000",
    "algorithm.epsilon_decay_env_steps=25000",
    "algorithm.target_update_every=250",
)


def check(result: rayrl.TrainResult, target: float) -> None:
    assert result.stop_reason == "target_return reached", result.summary
    assert result.final_eval.mean >= target
    assert len(result.final_eval.returns) == 20


@local_run(
    "minatar_ppo",
    *SEED_AND_EVALUATION,
    "run.target_return=3.0",
    "run.total_env_steps=1000000",
    "run.eval_interval_env_steps=50000",
    seconds=45,
)
def test_ppo_learns_minatar_breakout(local_run_result):
    check(local_run_result, 3.0)


@local_run(
    "minatar_impala",
    *SEED_AND_EVALUATION,
    "run.target_return=3.0",
    "run.total_env_steps=1500000",
    "run.eval_interval_env_steps=25000",
)
def test_impala_learns_minatar_breakout(local_run_result):
    check(local_run_result, 3.0)


@local_run(
    "minatar_dqn",
    *SEED_AND_EVALUATION,
    "run.target_return=1.5",
    "run.total_env_steps=150000",
    "run.eval_interval_env_steps=10000",
    *DQN_AT_A_CHEAPER_PACE,
    seconds=75,
)
def test_dqn_learns_minatar_breakout(local_run_result):
    check(local_run_result, 1.5)
