"""Atari (`ALE/<Game>-v5` ids) through ale-py, with the DeepMind preprocessing.

Training and evaluation use ale-py's C++ `AtariVectorEnv`, which does the preprocessing
(no-op starts, frame skip with max-pooling, 84x84 grayscale, frame stack, FIRE on reset) in
native threads, which is cheaper per step than gymnasium's Python wrappers (figures in
docs/performance.md). Its own episodic-life and
reward-clipping options are left off: the adapter applies both to the learning signal only,
so that reported returns are always whole games with raw scores.

An id without a preset gets the DeepMind setting for the learning signal: rewards clipped
to their sign and a lost life as a terminal (`defaults`), for learning only.

ale-py's vector env cannot render, so videos play on a single gymnasium env with
gymnasium's `AtariPreprocessing` and `FrameStackObservation`, which reproduce the same
observations (gymnasium's wrappers have no FIRE-on-reset: in games that need FIRE the
recorded episode starts when the policy presses it).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from rayrl.config import EnvConfig
from rayrl.envs.plain import check_registered
from rayrl.errors import ConfigError

MAX_FRAMES = 108_000
"""Atari episodes are cut at 30 minutes of play (108,000 emulator frames), as in the
DeepMind evaluations."""


def register_atari() -> None:
    """Make gymnasium know the `ALE/...` ids (ale-py ships the ROMs)."""
    import ale_py

    gym.register_envs(ale_py)


class Atari:
    name = "atari"
    defaults = MappingProxyType(
        {"clip_rewards": True, "terminal_on_life_loss": True, "repeat_action_probability": 0.0}
    )

    def owns(self, env_id: str) -> bool:
        return env_id.startswith("ALE/")

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        register_atari()
        check_registered(key, config.id)
        if config.kwargs:
            raise ConfigError(
                f"env.kwargs={config.kwargs!r} is not used by Atari envs; use env.atari.* "
                "(frame_skip, noop_max, ...) and env.repeat_action_probability instead"
            )

    def _max_frames(self, config: EnvConfig) -> int:
        if config.max_episode_steps is None:
            return MAX_FRAMES
        return config.max_episode_steps * config.atari.frame_skip

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        from ale_py.vector_env import AtariVectorEnv

        register_atari()
        return AtariVectorEnv(
            gym.spec(config.id).kwargs["game"],
            num_envs,
            num_threads=max(1, min(num_threads, num_envs)),
            autoreset_mode=AutoresetMode.SAME_STEP,
            stack_num=config.atari.frame_stack,
            frameskip=config.atari.frame_skip,
            noop_max=config.atari.noop_max,
            use_fire_reset=config.atari.fire_reset,
            # None only before `resolve_env`, which sets the suite's 0.0
            repeat_action_probability=config.repeat_action_probability or 0.0,
            max_num_frames_per_episode=self._max_frames(config),
            episodic_life=False,
            reward_clipping=False,
        )

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        register_atari()
        raw = gym.make(
            config.id,
            render_mode="rgb_array",
            frameskip=1,
            repeat_action_probability=config.repeat_action_probability,
            max_episode_steps=self._max_frames(config),
        )
        env = gym.wrappers.AtariPreprocessing(
            wrap_raw(raw),
            noop_max=config.atari.noop_max,
            frame_skip=config.atari.frame_skip,
            screen_size=84,
        )
        return gym.wrappers.FrameStackObservation(env, config.atari.frame_stack)

    def frame_stack(self, config: EnvConfig) -> int | None:
        return config.atari.frame_stack


ATARI = Atari()
