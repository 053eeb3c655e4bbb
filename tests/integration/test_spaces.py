"""Every space a user brings trains on both runtimes: Discrete, MultiDiscrete, MultiBinary,
Dict and Tuple observations (flattened), action masks (never violated: the test envs raise
on a disallowed action), MultiDiscrete and Box actions; and gymnasium's env checker passes
on the envs rayrl ships and on its suites' wrapped envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rayrl
from rayrl.config import EnvConfig
from rayrl.envs import resolve_env
from rayrl.envs.atari import ATARI
from rayrl.envs.memory import CARTPOLE_NO_VELOCITY
from rayrl.errors import ConfigError
from tests import space_envs

OBSERVATIONS = ["discrete", "multi_discrete", "multi_binary", "dict", "tuple", "masked"]
"""The observation kinds beyond a Box, each with Discrete actions."""
ACTING = [
    ("cartpole_ppo", "masked", "multi_discrete"),
    ("cartpole_ppo", "dict", "box"),
    ("cartpole_impala", "masked", "discrete"),
    ("cartpole_appo", "masked", "multi_discrete"),
    ("cartpole_ppo", "dict", "multi_discrete_one"),
    ("cartpole_pomdp_ppo", "discrete", "discrete"),
    ("cartpole_pomdp_ppo", "masked", "multi_discrete"),
]
"""The policy-gradient algorithms, each with a mask or a space of actions beyond Discrete;
the LSTM preset on a Discrete observation (the POPGym `RepeatPreviousEasy` failure) and with
a mask."""


def overrides(observation: str, action: str) -> list[str]:
    return [f"env.id={space_envs.env_id(observation, action)}", "env.normalize.observations=false"]


def local_overrides(runs_dir, observation: str, action: str) -> list[str]:
    return [
        *overrides(observation, action),
        "run.runtime=local",
        "logging.console=false",
        f"run.runs_dir={runs_dir}",
        "run.total_env_steps=4096",
        "run.eval_interval_env_steps=4096",
        "run.eval_episodes=10",
        "run.target_return=null",
        "run.seed=0",
    ]


@pytest.mark.parametrize("observation", OBSERVATIONS)
def test_ppo_learns_from_each_kind_of_observation_in_one_process(observation, tmp_path):
    """The rule (act as the observation's code says) is learned from every encoding: chance
    is a third of the 20 steps' reward; each kind reached 20 in 4,096 env steps."""
    result = rayrl.train(
        "cartpole_ppo", overrides=local_overrides(tmp_path / "runs", observation, "discrete")
    )
    assert result.counters.env_steps >= 4096
    assert result.final_eval.mean >= 12.0


@pytest.mark.parametrize(("preset", "observation", "action"), ACTING)
def test_each_policy_gradient_algorithm_acts_in_each_space_in_one_process(
    preset, observation, action, tmp_path
):
    result = rayrl.train(preset, overrides=local_overrides(tmp_path / "runs", observation, action))
    assert result.counters.env_steps >= 4096
    assert np.isfinite(result.final_eval.mean)


@pytest.mark.parametrize(
    ("preset", "observation", "action"),
    [("cartpole_ppo", kind, "discrete") for kind in OBSERVATIONS] + ACTING,
)
def test_every_space_trains_with_ray(ray_cluster, tiny_run, preset, observation, action):
    """The workers paced one update ahead of the learner, so that the run cannot end its
    budget before the learner has learned from the space (unpaced, a worker can sample a
    tiny budget before the learner's process has started)."""
    result = rayrl.train(
        preset,
        overrides=[
            *tiny_run,
            *overrides(observation, action),
            "algorithm.sample_ahead_updates=1",
        ],
    )
    assert result.counters.env_steps >= 2048
    assert result.counters.updates >= 1
    assert np.isfinite(result.final_eval.mean)


def test_q_learning_and_sac_take_flattened_observations(tmp_path):
    for preset, action in (("cartpole_dqn", "discrete"), ("pendulum_sac", "box")):
        result = rayrl.train(
            preset,
            overrides=[
                *local_overrides(tmp_path / "runs", "dict", action),
                "run.total_env_steps=600",
                "run.eval_interval_env_steps=600",
                "run.eval_episodes=2",
                "algorithm.replay.min_size=200",
                "learner.batch_size=32",
            ],
        )
        assert result.counters.updates >= 1, preset
        assert np.isfinite(result.final_eval.mean), preset


def test_a_space_rayrl_cannot_take_is_refused_in_one_line_before_anything_starts(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError, match=r"env.id='tests.space_envs:Spaces-text-.*Text") as info:
        rayrl.train(
            "cartpole_ppo", overrides=[*overrides("text", "discrete"), f"run.runs_dir={runs}"]
        )
    assert "\n" not in str(info.value)
    assert not runs.exists() or not any(runs.iterdir())  # no run directory left behind


def test_normalizing_an_observation_without_a_float_part_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"env.normalize.observations=true needs float") as info:
        rayrl.train(
            "cartpole_pomdp_ppo",
            overrides=[f"env.id={space_envs.env_id('discrete', 'discrete')}"],
        )
    assert "\n" not in str(info.value)


def test_normalization_leaves_the_parts_that_are_not_floats_as_they_are(tmp_path):
    """With a Dict holding a float Box, a one-hot and 0/1 flags, the floats are normalized
    and the rest reach the network as they came (the policy's input, checked in a run)."""
    result = rayrl.train(
        "cartpole_ppo",
        overrides=[
            *local_overrides(tmp_path / "runs", "dict", "discrete"),
            "env.normalize.observations=true",
        ],
    )
    assert result.final_eval.mean >= 12.0


ENVS_TO_CHECK = {
    "CartPoleNoVel": lambda: gym.make(CARTPOLE_NO_VELOCITY),  # rebuilt from its saved spec
    "Atari suite": lambda: ATARI.make_render_env(resolve_env(EnvConfig(id="ALE/Pong-v5"))),
    **{
        f"test env {kind}": lambda kind=kind: (
            gym.make(space_envs.env_id(kind, "discrete")).unwrapped
        )
        for kind in OBSERVATIONS
        if kind != "masked"  # the checker's random actions ignore the mask, which it refuses
    },
}


@pytest.mark.parametrize("name", ENVS_TO_CHECK)
def test_gymnasiums_env_checker_passes(name):
    """On the env rayrl registers, on the Atari suite's preprocessed env and on the test
    envs above. Not on MinAtar's: its `reset(seed)` seeds its game, not gymnasium's
    `np_random`, which the checker asserts."""
    env = ENVS_TO_CHECK[name]()
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
