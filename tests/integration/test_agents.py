"""Several agents in one env with one shared policy, end to end: PPO and APPO learn the test
env's rule (one agent of which finishes early) on both runtimes, with each agent's return in
the metrics and env steps counted per env copy; the `mpe_spread_ppo` preset learns on MPE's
simple_spread, and its run evaluates and resumes as a single-agent run does."""

from __future__ import annotations

import numpy as np
import pytest

import rayrl
from rayrl.files import read_jsonl
from tests.agent_envs import ENV_ID, EPISODE_STEPS, SHORT_STEPS
from tests.local_runs import local_run

AGENTS_OVERRIDES = (
    f"env.id={ENV_ID}",
    "env.normalize.observations=false",
    "algorithm.queue_capacity=48",  # 8 copies x 3 agents per worker chunk
    "run.total_env_steps=4096",
    "run.eval_interval_env_steps=4096",
    "run.eval_episodes=10",
    "run.target_return=null",
    "run.seed=0",
)
BEST = (2 * EPISODE_STEPS + SHORT_STEPS) / 3
"""The mean agent return of a perfect policy (7); chance is a third of it."""


def check_learned(result) -> None:
    """Both reached the best return, 7.0, in 8,192 env steps when this was written; the
    test asks for two thirds of the way from chance (2.3) to it at 4,096, and each agent's
    return in the metrics, agent_1's from its own 5 steps."""
    assert result.counters.env_steps == 4096
    assert result.final_eval.mean >= 5.5
    rows = read_jsonl(result.run_dir / "metrics.jsonl")
    short = [r["worker/agent_return/agent_1"] for r in rows if "worker/agent_return/agent_1" in r]
    assert short
    assert max(short) <= SHORT_STEPS
    evals = read_jsonl(result.run_dir / "eval.jsonl")
    assert evals[-1]["eval/agent_return/agent_0"] <= EPISODE_STEPS


@local_run("cartpole_ppo", *AGENTS_OVERRIDES)
def test_a_shared_ppo_policy_learns_every_agents_rule_in_one_process(local_run_result):
    check_learned(local_run_result)


@local_run("cartpole_appo", *AGENTS_OVERRIDES)
def test_a_shared_appo_policy_learns_every_agents_rule_in_one_process(local_run_result):
    check_learned(local_run_result)


@pytest.mark.parametrize("preset", ["cartpole_ppo", "cartpole_appo"])
def test_a_shared_policy_trains_with_ray(ray_cluster, tiny_run, preset):
    result = rayrl.train(
        preset,
        overrides=[
            *tiny_run,
            f"env.id={ENV_ID}",
            "env.normalize.observations=false",
            "algorithm.queue_capacity=24",
            "algorithm.sample_ahead_updates=1",
        ],
    )
    assert result.counters.env_steps >= 2048
    assert result.counters.updates >= 1
    assert 0.0 <= result.final_eval.mean <= BEST
    assert result.final_eval.agent_returns["agent_1"].max() <= SHORT_STEPS
    assert len(result.final_eval.returns) == 2  # episodes of copies, not of agents


SPREAD_BUDGET = 50_000


@pytest.mark.slow
@local_run("mpe_spread_ppo", "run.seed=0", f"run.total_env_steps={SPREAD_BUDGET}", seconds=40)
def test_mpe_spread_learns_resumes_and_evaluates(local_run_result, tmp_path):
    """simple_spread's random policy scores -27.0 (mean agent return over 200 episodes, std
    7.6 per episode); the preset in one process reached -20.6 at 40k env steps. Its run
    then evaluates (no --trust-env: mpe2 is the pettingzoo extra's) and resumes."""
    result = local_run_result
    assert result.final_eval.mean >= -23.5
    assert set(result.final_eval.agent_returns) == {"agent_0", "agent_1", "agent_2"}
    evaluated = rayrl.evaluate(result.run_dir, episodes=6, which="latest")
    assert len(evaluated.returns) == 6
    assert np.all(evaluated.lengths == 25)
    resumed = rayrl.train(
        resume=result.run_dir,
        overrides=[f"run.total_env_steps={SPREAD_BUDGET + 4000}", "logging.console=false"],
    )
    assert resumed.counters.env_steps >= SPREAD_BUDGET + 4000
