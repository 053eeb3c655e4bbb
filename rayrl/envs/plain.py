"""Plain gymnasium ids: anything in gymnasium's registry, in a synchronous vector env.

An id may name the module that registers it, as gymnasium allows:
"my_package.envs:MyEnv-v0". `env.kwargs` goes to the env's constructor through
`gymnasium.make_vec`, beside the arguments the suite sets itself (`SET_BY_RAYRL`): those
are refused in `env.kwargs` before anything starts, naming the setting that owns each,
rather than failing in gymnasium with a TypeError or being silently overridden.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from rayrl.config import EnvConfig
from rayrl.errors import ConfigError, did_you_mean

SET_BY_RAYRL: Mapping[str, str] = MappingProxyType(
    {
        "id": "env.id",
        "num_envs": "workers.envs_per_worker",
        "vectorization_mode": "rayrl (a synchronous vector env)",
        "vector_kwargs": "rayrl (SAME_STEP autoreset)",
        "wrappers": "rayrl",
        "render_mode": "rayrl (rgb_array for videos only)",
        "max_episode_steps": "env.max_episode_steps",
    }
)
"""`gymnasium.make_vec`'s and `gymnasium.make`'s arguments that the suite sets, and the
setting that owns each."""


def check_kwargs(kwargs: Mapping[str, object], set_by_rayrl: Mapping[str, str]) -> None:
    """Raise a `ConfigError` naming every key of `env.kwargs` that the suite sets itself."""
    taken = [f"{key!r} is set by {set_by_rayrl[key]}" for key in kwargs if key in set_by_rayrl]
    if taken:
        raise ConfigError(
            f"env.kwargs={dict(kwargs)!r}: {'; '.join(taken)}; env.kwargs holds only the "
            "env's own constructor arguments"
        )


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
    """The suite every id belongs to that no other suite claims."""

    name = "gymnasium"
    defaults = MappingProxyType(
        {"clip_rewards": False, "terminal_on_life_loss": False, "repeat_action_probability": 0.0}
    )
    set_by_rayrl = SET_BY_RAYRL

    def owns(self, env_id: str) -> bool:
        return True

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        check_registered(key, config.id)
        check_kwargs(config.kwargs, self.set_by_rayrl)

    def _kwargs(self, config: EnvConfig) -> dict[str, Any]:
        kwargs = dict(config.kwargs)
        if config.max_episode_steps is not None:
            kwargs["max_episode_steps"] = config.max_episode_steps
        return kwargs

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        try:
            return gym.make_vec(
                config.id,
                num_envs=num_envs,
                vectorization_mode="sync",
                vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
                **self._kwargs(config),
            )
        except TypeError as exc:
            if not config.kwargs:  # not the user's arguments: a bug, with its traceback
                raise
            first_line = str(exc).strip().splitlines()[0]
            raise ConfigError(
                f"env.kwargs={config.kwargs!r} does not fit {config.id!r}: {first_line}"
            ) from None

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        return wrap_raw(gym.make(config.id, render_mode="rgb_array", **self._kwargs(config)))

    def frame_stack(self, config: EnvConfig) -> int | None:
        return None


PLAIN = PlainGymnasium()
