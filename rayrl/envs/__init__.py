"""Environments: a small registry of env suites, and the adapter every env comes out of.

`SUITES` is tried in order and the first suite that owns an id builds it: Atari
(`ALE/...` ids, ale-py's C++ vector env), MinAtar (`MinAtar/...` ids), MuJoCo (gymnasium's
MuJoCo ids, through the `mujoco` package), PettingZoo's parallel envs with several agents
(`pettingzoo:<module>` ids, each agent a slot of the vector env) and plain gymnasium ids
(anything else, with the partially observed tasks of `rayrl.envs.memory` registered among
them). Adding
a suite is one module (see `rayrl.envs.spec.EnvSuite`) and one entry here. A suite also
gives the defaults of the env settings left None (the learning signal, sticky actions):
`resolve_env`.

Every training and evaluation env is a `VectorEnvAdapter` over a SAME_STEP vector env,
which also applies the training-only learning signal (clipped rewards, episodic life).
"""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np

from rayrl.config import EnvConfig
from rayrl.envs import memory
from rayrl.envs.adapter import VectorEnvAdapter
from rayrl.envs.atari import ATARI
from rayrl.envs.minatar import MINATAR
from rayrl.envs.mujoco import MUJOCO
from rayrl.envs.observations import check_observation_space
from rayrl.envs.pettingzoo import PETTINGZOO
from rayrl.envs.plain import PLAIN
from rayrl.envs.spec import EnvSpec, EnvSuite
from rayrl.errors import ConfigError

__all__ = [
    "SUITES",
    "EnvSpec",
    "EnvSuite",
    "VectorEnvAdapter",
    "check_env",
    "check_normalization",
    "env_spec",
    "make_env",
    "resolve_env",
    "spec_of",
    "suite_of",
]

memory.register()

SUITES: tuple[EnvSuite, ...] = (ATARI, MINATAR, MUJOCO, PETTINGZOO, PLAIN)
"""Env suites, tried in order; the last one owns every id."""


def suite_of(env_id: str) -> EnvSuite:
    """The suite that builds `env_id`."""
    return next(suite for suite in SUITES if suite.owns(env_id))


def resolve_env(config: EnvConfig) -> EnvConfig:
    """`config` with its suite's defaults for the settings left None."""
    defaults = suite_of(config.id).defaults
    missing = {key: value for key, value in defaults.items() if getattr(config, key) is None}
    return replace(config, **missing) if missing else config


def check_env(config: EnvConfig) -> None:
    """Raise a `ConfigError` naming the field if the env or the evaluation env cannot be made."""
    suite_of(config.id).check(config)
    if config.eval_id is not None:
        suite_of(config.eval_id).check(eval_env_config(config), key="env.eval_id")


def eval_env_config(config: EnvConfig) -> EnvConfig:
    """The env config evaluation (and its videos) play on: `env.eval_id` when set."""
    return resolve_env(config if config.eval_id is None else replace(config, id=config.eval_id))


def make_env(
    config: EnvConfig, num_envs: int, *, training: bool, num_threads: int = 1
) -> VectorEnvAdapter:
    """A vector env of `num_envs` copies; `training` turns on the training-only signal."""
    config = resolve_env(config)
    env = suite_of(config.id).make_vector_env(config, num_envs, num_threads)
    try:
        check_observation_space(env.single_observation_space, "env.id", config.id)
    except ConfigError:
        env.close()
        raise
    return VectorEnvAdapter(
        env,
        clip_rewards=training and config.clip_rewards is True,  # None was resolved above
        terminal_on_life_loss=training and config.terminal_on_life_loss is True,
    )


def env_spec(config: EnvConfig) -> EnvSpec:
    """Spaces and frame layout of the configured env (opens and closes one copy)."""
    env = make_env(config, 1, training=False)
    try:
        return spec_of(env, config)
    finally:
        env.close()


def spec_of(env: VectorEnvAdapter, config: EnvConfig) -> EnvSpec:
    """Spaces and frame layout of an open env (float64 observations are served as float32)."""
    observation_space = env.single_observation_space
    if isinstance(observation_space, gym.spaces.Box) and observation_space.dtype == np.float64:
        observation_space = gym.spaces.Box(
            observation_space.low.astype(np.float32),
            observation_space.high.astype(np.float32),
            shape=observation_space.shape,
            dtype=np.float32,
        )
    normalize = config.normalize
    return EnvSpec(
        observation_space=observation_space,
        action_space=env.single_action_space,
        frame_stack=suite_of(config.id).frame_stack(config),
        observation_clip=normalize.clip if normalize.observations else None,
        reward_clip=normalize.clip if normalize.rewards else None,
        layout=None if env.encoder is None else env.encoder.layout,
        agents=env.agent_names,
    )


def check_normalization(config: EnvConfig, spec: EnvSpec, raw_space: gym.spaces.Space) -> None:
    """Raise a `ConfigError` if observation normalisation is asked for observations it
    cannot apply to: frames and grids, which the networks scale themselves, or flattened
    observations without a float part (it normalizes the float parts only)."""
    if not config.normalize.observations:
        return
    if spec.layout is not None:
        normalizable = bool(spec.layout.float_parts)
    else:
        dtype = spec.observation_space.dtype
        normalizable = dtype is not None and np.issubdtype(dtype, np.floating)
    if not normalizable:
        raise ConfigError(
            f"env.normalize.observations=true needs float observations (a Box of floats, or "
            f"a Dict or Tuple with a float Box part, the only parts it normalizes); "
            f"{config.id!r} gives {raw_space}. Leave it false for frames, grids and "
            "discrete observations"
        )
