"""Test-only environments, registered on import (`env.id: "tests.fake_envs:<Id>"`).

Rollout workers run in Ray worker processes, which import this module by name through
gymnasium's "module:EnvId" syntax; the test Ray puts the repository on their PYTHONPATH.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class HangingCartPole(CartPoleEnv):
    """CartPole that hangs forever once a marker file exists (path in RAYRL_TEST_HANG_FILE),
    the way a stuck emulator or a dead network env hangs a worker. The file is removed by
    the first env that sees it, so the replacement worker runs normally."""

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
        return super().step(action)


gym.register("HangingCartPole-v0", entry_point=HangingCartPole, max_episode_steps=500)
