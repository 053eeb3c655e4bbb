"""Plain gymnasium ids: anything in gymnasium's registry, in a synchronous vector env.

An id may name the module that registers it, as gymnasium allows:
"my_package.envs:MyEnv-v0".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from rayrl.config import EnvConfig
from rayrl.errors import ConfigError, did_you_mean


def check_registered(key: str, env_id: str) -> None:
    """Raise a `ConfigError` naming `key` if `env_id` is not registered (after importing the
    module an "module:EnvId" id names); close matches are suggested."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"{key}={env_id!r}: cannot import module {module!r}: {exc}") from None
    if name not in gym.registry:
        close = did_you_mean(name, gym.registry)
        raise ConfigError(f"{key}: unknown environment {env_id!r}{close}")


class PlainGymnasium:
    """The family every id belongs to that no other family claims."""

    name = "gymnasium"
    defaults = MappingProxyType(
        {"clip_rewards": False, "terminal_on_life_loss": False, "repeat_action_probability": 0.0}
    )

    def owns(self, env_id: str) -> bool:
        return True

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        check_registered(key, config.id)

    def _kwargs(self, config: EnvConfig) -> dict[str, Any]:
        kwargs = dict(config.kwargs)
        if config.max_episode_steps is not None:
            kwargs["max_episode_steps"] = config.max_episode_steps
        return kwargs

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        return gym.make_vec(
            config.id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **self._kwargs(config),
        )

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        return wrap_raw(gym.make(config.id, render_mode="rgb_array", **self._kwargs(config)))

    def frame_stack(self, config: EnvConfig) -> int | None:
        return None


PLAIN = PlainGymnasium()
