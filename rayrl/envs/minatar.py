"""MinAtar (`MinAtar/<Game>-v1` ids): five Atari games on a 10x10 grid (Young & Tian 2019).

The `minatar` package (`pip install 'rayrl[minatar]'`) registers them with gymnasium; `-v1`
ids use each game's minimal action set (`-v0` all six actions). Observations are
(10, 10, channels) booleans, one channel per kind of object, which the replay stores as
bytes and the MinAtar network (`network: minatar_cnn`) reads as they are. The games run in
a gymnasium synchronous vector env: they step at tens of thousands of steps per second per
core, so the policy's inference, not the env, is what costs.

Sticky actions (`env.repeat_action_probability`) default to the MinAtar paper's 0.1. The
games have no episode cap of their own except Freeway's (a perfect Breakout player never
loses), so the suite cuts episodes at `env.max_episode_steps`, by default `MAX_STEPS`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import gymnasium as gym
import numpy as np

from rayrl.config import EnvConfig
from rayrl.envs.plain import SET_BY_RAYRL, PlainGymnasium
from rayrl.errors import ConfigError

MAX_STEPS = 10_000
"""Episodes are cut after this many steps unless `env.max_episode_steps` says otherwise."""
VIDEO_SCALE = 16
"""Each grid cell becomes a square of this many pixels in a video."""


def register_minatar() -> None:
    try:
        import minatar.gym
    except ImportError:
        raise ConfigError(
            "MinAtar ids need the minatar package: pip install 'rayrl[minatar]'"
        ) from None
    if "MinAtar/Breakout-v1" not in gym.registry:
        minatar.gym.register_envs()


class _PixelFrames(gym.Wrapper):
    """MinAtar renders a float image of one pixel per cell; videos want bytes, and bigger."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.metadata = {**env.metadata, "render_fps": 15}

    def render(self) -> np.ndarray:
        frame = np.asarray(self.env.render())
        frame = (255 * frame).clip(0, 255).astype(np.uint8)
        return frame.repeat(VIDEO_SCALE, axis=0).repeat(VIDEO_SCALE, axis=1)


class MinAtar(PlainGymnasium):
    """Gymnasium's synchronous vector env, as for plain ids, with the MinAtar package
    registered first, sticky actions, the episode cap and byte frames for videos."""

    name = "minatar"
    defaults = MappingProxyType(
        {"clip_rewards": False, "terminal_on_life_loss": False, "repeat_action_probability": 0.1}
    )
    set_by_rayrl = MappingProxyType(
        {
            **SET_BY_RAYRL,
            "game": "env.id",
            "sticky_action_prob": "env.repeat_action_probability",
        }
    )

    def owns(self, env_id: str) -> bool:
        return env_id.startswith("MinAtar/")

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        register_minatar()
        super().check(config, key)

    def _kwargs(self, config: EnvConfig) -> dict[str, Any]:
        return {
            **config.kwargs,
            "sticky_action_prob": config.repeat_action_probability,
            "max_episode_steps": config.max_episode_steps or MAX_STEPS,
        }

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        register_minatar()
        return super().make_vector_env(config, num_envs, num_threads)

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        register_minatar()
        env = gym.make(config.id, render_mode="rgb_array", **self._kwargs(config))
        return wrap_raw(_PixelFrames(env))


MINATAR = MinAtar()
