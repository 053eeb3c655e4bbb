"""Environment construction: gymnasium vector envs and Atari through ale-py.

Every env comes out as a `VectorEnvAdapter` over a SAME_STEP vector env. Atari ids
(`ALE/<Game>-v5`) use ale-py's C++ `AtariVectorEnv`, which does the DeepMind preprocessing
(no-op starts, frame skip with max-pooling, 84x84 grayscale, frame stack, FIRE on reset) in
native threads: on a 2-core machine it steps preprocessed Pong about 2x faster than
gymnasium's Python wrappers (figures in docs/benchmarks.md). Its own episodic-life and
reward-clipping options are left off: the adapter applies both to the learning signal only,
so that reported returns are always whole games with raw scores.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rayrl.config import EnvConfig
from rayrl.envs.adapter import VectorEnvAdapter
from rayrl.errors import ConfigError, did_you_mean

__all__ = [
    "EnvSpec",
    "VectorEnvAdapter",
    "check_env",
    "env_spec",
    "is_atari",
    "make_env",
    "spec_of",
]

ATARI_MAX_FRAMES = 108_000
"""Atari episodes are cut at 30 minutes of play (108,000 emulator frames), as in the
DeepMind evaluations."""


@dataclass(frozen=True)
class EnvSpec:
    """What the rest of rayrl needs to know about an env, without holding one open."""

    observation_space: gym.spaces.Space
    action_space: gym.spaces.Space
    frame_stack: int | None
    """Frames per observation for stacked (Atari) observations; None when unstacked."""


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def register_atari() -> None:
    import ale_py

    gym.register_envs(ale_py)


def check_env(config: EnvConfig) -> None:
    """Raise a `ConfigError` naming close matches if `config.id` is not a registered env.

    Like gymnasium, an id may name the module that registers it: "my_package.envs:MyEnv-v0".
    """
    register_atari()
    for key, env_id in (("env.id", config.id), ("env.eval_id", config.eval_id)):
        if env_id is None:
            continue
        module, _, name = env_id.rpartition(":")
        if module:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigError(
                    f"{key}={env_id!r}: cannot import module {module!r}: {exc}"
                ) from None
        if name not in gym.registry:
            raise ConfigError(
                f"{key}: unknown environment {env_id!r}{did_you_mean(name, gym.registry)}"
            )
    if is_atari(config.id) and config.kwargs:
        raise ConfigError(
            f"env.kwargs={config.kwargs!r} is not used by Atari envs; use the env.* Atari "
            "fields (frame_skip, noop_max, ...) instead"
        )


def make_env(
    config: EnvConfig, num_envs: int, *, training: bool, num_threads: int = 1
) -> VectorEnvAdapter:
    """A vector env of `num_envs` copies; `training` turns on the training-only signal."""
    if is_atari(config.id):
        env = _make_atari(config, num_envs, num_threads)
    else:
        kwargs = dict(config.kwargs)
        if config.max_episode_steps is not None:
            kwargs["max_episode_steps"] = config.max_episode_steps
        env = gym.make_vec(
            config.id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **kwargs,
        )
    return VectorEnvAdapter(
        env,
        clip_rewards=training and config.clip_rewards,
        terminal_on_life_loss=training and config.terminal_on_life_loss,
    )


def _make_atari(config: EnvConfig, num_envs: int, num_threads: int) -> gym.vector.VectorEnv:
    from ale_py.vector_env import AtariVectorEnv

    register_atari()
    game = gym.spec(config.id).kwargs["game"]
    max_frames = ATARI_MAX_FRAMES
    if config.max_episode_steps is not None:
        max_frames = config.max_episode_steps * config.frame_skip
    return AtariVectorEnv(
        game,
        num_envs,
        num_threads=max(1, min(num_threads, num_envs)),
        autoreset_mode=AutoresetMode.SAME_STEP,
        stack_num=config.frame_stack,
        frameskip=config.frame_skip,
        noop_max=config.noop_max,
        use_fire_reset=config.fire_reset,
        repeat_action_probability=config.repeat_action_probability,
        max_num_frames_per_episode=max_frames,
        episodic_life=False,
        reward_clipping=False,
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
    if observation_space.dtype == np.float64:
        observation_space = gym.spaces.Box(
            observation_space.low.astype(np.float32),
            observation_space.high.astype(np.float32),
            shape=observation_space.shape,
            dtype=np.float32,
        )
    return EnvSpec(
        observation_space=observation_space,
        action_space=env.single_action_space,
        frame_stack=config.frame_stack if is_atari(config.id) else None,
    )
