"""Test-only environments, registered on import (`env.id: "tests.fake_envs:<Id>"`).

Rollout workers run in Ray worker processes, which import this module by name through
gymnasium's "module:EnvId" syntax; the test Ray puts the repository on their PYTHONPATH.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class HangingCartPole(CartPoleEnv):
    """CartPole that hangs forever once a marker file exists (path in RAYRL_TEST_HANG_FILE),
    the way a stuck emulator or a dead network env hangs a worker. The file is removed by
    the first env that sees it, so the replacement worker runs normally.

    Each step also takes at least a millisecond, like a real emulator, so that a run stepping
    it cannot reach its end before a hang timeout expires, however fast the machine."""

    STEP_S = 0.001

    def step(self, action):
        marker = os.environ.get("RAYRL_TEST_HANG_FILE")
        if marker and Path(marker).exists():
            try:
                Path(marker).unlink()
            except FileNotFoundError:
                pass
            else:
                while True:
                    time.sleep(1)
        time.sleep(self.STEP_S)
        return super().step(action)


gym.register("HangingCartPole-v0", entry_point=HangingCartPole, max_episode_steps=500)

# Plain CartPole under an id that imports this module, as a user's package registers its
# envs: for the tests of `trust_env`, which need an env id that imports a module and nothing
# else of it (HangingCartPole's millisecond a step would only slow them down).
gym.register("ImportedCartPole-v0", entry_point=CartPoleEnv, max_episode_steps=500)


class NanRewardCartPole(CartPoleEnv):
    """CartPole whose rewards turn NaN after each env's first `FINITE_STEPS` steps, the way a
    broken reward function (a division by zero, an overflow) poisons a run."""

    FINITE_STEPS = 150

    def step(self, action):
        self.steps_taken = getattr(self, "steps_taken", 0) + 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps_taken > self.FINITE_STEPS:
            reward = math.nan
        return obs, reward, terminated, truncated, info


gym.register("NanRewardCartPole-v0", entry_point=NanRewardCartPole, max_episode_steps=500)
