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

CARTPOLE_NO_VELOCITY = "rayrl/CartPoleNoVel-v1"

POSITIONS = np.array([0, 2])
"""Indices of the cart position and pole angle in CartPole's observation."""


class CartPoleWithoutVelocities(CartPoleEnv):
    """CartPole whose observations keep only the positions. A subclass rather than an
    observation wrapper around CartPole: gymnasium's env checker (and `gymnasium.make` of
    a saved spec) must be able to rebuild the env from its registered entry point alone."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        full = self.observation_space
        assert isinstance(full, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(
            full.low[POSITIONS], full.high[POSITIONS], dtype=np.float32
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs[POSITIONS], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[POSITIONS], reward, terminated, truncated, info


def register() -> None:
    """Register the tasks (idempotent: every process that imports `rayrl.envs` calls it)."""
    if CARTPOLE_NO_VELOCITY not in gym.registry:
        gym.register(
            id=CARTPOLE_NO_VELOCITY,
            entry_point=CartPoleWithoutVelocities,
            max_episode_steps=500,
            reward_threshold=475.0,
        )
