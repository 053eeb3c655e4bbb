"""What an env suite provides, and what the rest of rayrl knows about an env.

An env suite (plain gymnasium ids, Atari through ale-py, ...) is one module that turns an
`EnvConfig` into the three things rayrl needs: the training vector env (in gymnasium's
SAME_STEP autoreset mode, which `rayrl.envs.adapter` resolves), a single rendering env
for evaluation videos that shows the policy the observations it trained on, and the spec.
Its `make_*` methods take a resolved config (`rayrl.envs.resolve_env`: the settings left
None filled from the suite's `defaults`), as `rayrl.envs.make_env` and the videos pass it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from rayrl.config import EnvConfig
from rayrl.envs.observations import ObservationLayout


@dataclass(frozen=True)
class EnvSpec:
    """What the rest of rayrl needs to know about an env, without holding one open."""

    observation_space: gym.spaces.Space[Any]
    action_space: gym.spaces.Space[Any]
    frame_stack: int | None
    """Frames per observation for stacked (Atari) observations; None when unstacked."""
    observation_clip: float | None = None
    """With `env.normalize.observations`, the clip of the normalized observations every
    network sees; None when networks see the observations as they come."""
    reward_clip: float | None = None
    """With `env.normalize.rewards`, the clip of the normalized rewards the learner learns
    from; None when it learns from the rewards as they come."""
    layout: ObservationLayout | None = None
    """Where the parts of a flattened observation are (`rayrl.envs.observations`); None
    for observations that come as a Box."""
    agents: tuple[str, ...] = ()
    """The agents of an env with several (`rayrl.envs.pettingzoo`), each a slot of the
    vector env; empty for a single-agent env."""

    @property
    def agents_per_env(self) -> int:
        """Slots of the vector env per env copy: what turns slot steps into env steps."""
        return max(1, len(self.agents))

    @property
    def action_mask(self) -> tuple[int, int] | None:
        """The [start, stop) of the allowed actions' flags in each observation, or None."""
        return None if self.layout is None else self.layout.action_mask


def observation_bytes(spec: EnvSpec) -> int:
    """Bytes of one observation (a whole stack for stacked ones)."""
    space = spec.observation_space
    dtype = np.dtype(space.dtype) if space.dtype is not None else np.dtype(np.float32)
    return math.prod(space.shape or (1,)) * dtype.itemsize


class EnvSuite(Protocol):
    """A kind of environment id and how to build it. Used like::

    suite = suite_of(config.id)
    suite.check(config)                                  # before anything starts
    vector_env = suite.make_vector_env(config, num_envs, num_threads)
    video_env = suite.make_render_env(config, wrap_raw=RecordVideo)
    """

    name: str

    @property
    def defaults(self) -> Mapping[str, Any]:
        """`EnvConfig` values for fields left None (`clip_rewards`, `terminal_on_life_loss`,
        `repeat_action_probability`): the suite's standard setting."""
        ...

    def owns(self, env_id: str) -> bool:
        """Whether `env_id` belongs to this suite."""
        ...

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        """Raise a `ConfigError` naming the field if `config` cannot make this suite's env
        (an unknown id, `env.kwargs` that the suite sets itself); `key` is the field that
        named `config.id` (`env.eval_id` for the evaluation env)."""
        ...

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        """`num_envs` copies in SAME_STEP autoreset mode, without the training-only signal
        (reward clipping, episodic life), which the adapter applies; `env.kwargs` that the
        env does not take raise a `ConfigError` (validation makes one env first)."""
        ...

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        """One env rendering `rgb_array` frames whose observations are the training ones;
        `wrap_raw` is applied to the raw env first (a video recorder records full frames)."""
        ...

    def frame_stack(self, config: EnvConfig) -> int | None:
        """Frames stacked per observation, or None for unstacked observations."""
        ...
