"""Partially observed tasks that need memory, registered with gymnasium under "rayrl/":
the plain suite builds them like any other gymnasium id.

`rayrl/CartPoleNoVel-v1` is CartPole-v1 with the velocities hidden: the observation is the
cart's position and the pole's angle only, so a policy must infer the velocities from what
it saw before (the task of RL Baselines3 Zoo's `CartPoleNoVel-v1`, which sb3-contrib's
recurrent PPO is benchmarked on). Same dynamics, reward, 500-step limit and 475 threshold.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.wrappers import TransformObservation

CARTPOLE_NO_VELOCITY = "rayrl/CartPoleNoVel-v1"

POSITIONS = np.array([0, 2])
"""Indices of the cart position and pole angle in CartPole's observation."""


def make_cartpole_without_velocities(**kwargs: Any) -> gym.Env:
    """CartPole whose observations keep only the positions (gymnasium's entry point)."""
    env = CartPoleEnv(**kwargs)
    full = env.observation_space
    assert isinstance(full, gym.spaces.Box)
    space = gym.spaces.Box(full.low[POSITIONS], full.high[POSITIONS], dtype=np.float32)
    return TransformObservation(env, lambda obs: obs[POSITIONS], space)


def register() -> None:
    """Register the tasks (idempotent: every process that imports `rayrl.envs` calls it)."""
    if CARTPOLE_NO_VELOCITY not in gym.registry:
        gym.register(
            id=CARTPOLE_NO_VELOCITY,
            entry_point=make_cartpole_without_velocities,
            max_episode_steps=500,
            reward_threshold=475.0,
        )
