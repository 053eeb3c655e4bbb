"""Evaluation videos from real envs: the recording env must feed the policy the observations
it was trained on (for Atari, gymnasium's wrappers in place of ale-py's C++ preprocessing)."""

from __future__ import annotations

import pytest

from rayrl.envs import env_spec
from rayrl.presets import load_config, with_overrides
from rayrl.video import record_episode
from tests import space_envs
from tests.parts import policy_for


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        ("cartpole_dqn", []),
        ("pong_dqn", ["env.max_episode_steps=50"]),  # a short, truncated game
        ("cartpole_impala", []),
        ("hopper_sac", ["env.max_episode_steps=30"]),  # MuJoCo renders headless (EGL)
        # flattened observations, an action mask and actions offset by the space's start
        ("cartpole_ppo", [f"env.id={space_envs.env_id('masked', 'discrete')}"]),
        ("cartpole_ppo", [f"env.id={space_envs.env_id('dict', 'multi_discrete')}"]),
    ],
)
def test_recorded_episode_is_an_mp4_played_by_the_trained_policy_shape(preset, overrides):
    config = with_overrides(load_config(preset), overrides)
    policy = policy_for(config, env_spec(config.env), None)
    video = record_episode(config.env, policy, seed=0)
    assert video[4:8] == b"ftyp"  # an MP4 container
    assert len(video) > 1000
