"""The one place where gymnasium's autoreset semantics are resolved.

rayrl runs every vector env in gymnasium's SAME_STEP autoreset mode: a step that ends an
episode returns the *reset* observation, and the true final observation arrives in
`info["final_obs"]`. This adapter turns that into a `StepBatch` whose `next_obs` is always the
true successor, so a transition is never paired with the next episode's first observation
(the off-by-one that the NEXT_STEP default invites), and no step is wasted on a reset.

Observations of any space but a Box come out flattened to one float32 vector each
(`rayrl.envs.observations`), the final ones too.

It also applies the training-only learning signal (sign-clipped rewards, a lost life as a
terminal) while counting episode returns on the raw rewards of whole games.

An env with several agents (`rayrl.envs.pettingzoo`) has a slot per agent per copy: the
adapter then reports one episode per copy (its length in env steps, the mean of its agents'
returns and each agent's), counts no idle slot's step, and marks each step's active slots in
the step's `extras[ACTIVE_EXTRA]`, which the learners leave the idle ones out of.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rayrl.core import StepBatch
from rayrl.envs.observations import ObservationEncoder, is_flattened

ACTIVE_EXTRA = "active"
"""A step's extra in an env with several agents: True where the slot's agent acted (False
on the idle steps of an agent that finished before the others)."""


class Episode(NamedTuple):
    """A finished episode: a whole game, raw (unclipped) rewards. With several agents, the
    episode of one env copy: the mean of its agents' returns, and each agent's."""

    env_index: int
    episode_return: float
    length: int
    agent_returns: tuple[float, ...] = ()


class VectorEnvAdapter:
    """A SAME_STEP gymnasium vector env seen as a stream of `StepBatch`es."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        *,
        clip_rewards: bool = False,
        terminal_on_life_loss: bool = False,
    ) -> None:
        mode = env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"VectorEnvAdapter needs autoreset mode SAME_STEP, got {mode}")
        self.env = env
        self.num_envs = env.num_envs
        self.raw_observation_space = env.single_observation_space
        """The env's own observation space (`single_observation_space` is what rayrl
        carries: the flattened one for a space that is not a Box)."""
        self.encoder = encoder_of(self.raw_observation_space)
        self.single_observation_space = (
            self.raw_observation_space if self.encoder is None else self.encoder.space
        )
        self.single_action_space = env.single_action_space
        self.agent_names: tuple[str, ...] = getattr(env, "agent_names", ())
        """The agents of an env with several (each a slot of each copy); empty for one."""
        self.agents_per_env = max(1, len(self.agent_names))
        self.num_copies = self.num_envs // self.agents_per_env
        """Env copies: what env steps count (with one agent, `num_envs`)."""
        self.clip_rewards = clip_rewards
        self.terminal_on_life_loss = terminal_on_life_loss
        self.obs: np.ndarray = np.empty(0)
        """Observations the next actions are taken in."""
        self.episode_starts = np.ones(self.num_envs, dtype=bool)
        """True where `obs` begins an episode: what a recurrent policy resets its state on."""
        self._lives: np.ndarray | None = None
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self._lengths = np.zeros(self.num_copies, dtype=np.int64)
        self._finished: list[Episode] = []

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (env i gets seed + i) and return the first observations."""
        obs, info = self.env.reset(seed=seed)
        self.obs = carried_observations(obs, self.encoder)
        self.episode_starts = np.ones(self.num_envs, dtype=bool)
        self._lives = self._read_lives(info)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._finished = []
        return self.obs

    def step(
        self,
        actions: np.ndarray,
        extras: dict[str, np.ndarray] | None = None,
        state: dict[str, np.ndarray] | None = None,
    ) -> StepBatch:
        """Step every env; `self.obs` moves on to the observations for the next actions.
        `extras` and `state` (the policy's, see `PolicyOutput`) travel with the step.

        Continuous actions are clipped to the action space for the env, and discrete ones
        offset by the space's `start`; the StepBatch keeps them as the policy produced them
        (their log-probabilities refer to those)."""
        obs, rewards, terminated, truncated, info = self.env.step(
            env_actions(self.single_action_space, actions)
        )
        obs = carried_observations(obs, self.encoder)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        env_reset = terminated | truncated
        raw_rewards = np.asarray(rewards, dtype=np.float64)

        next_obs = obs
        if env_reset.any():
            next_obs = obs.copy()
            final_obs = info["final_obs"]
            for i in np.flatnonzero(env_reset):
                final = final_obs[i]
                next_obs[i] = final if self.encoder is None else self.encoder.encode_one(final)

        learn_terminated = terminated.copy()
        lives = self._read_lives(info)
        if self.terminal_on_life_loss and lives is not None and self._lives is not None:
            learn_terminated |= (lives < self._lives) & ~env_reset
        self._lives = lives

        learn_rewards = np.sign(raw_rewards) if self.clip_rewards else raw_rewards
        if self.agent_names:
            active = np.asarray(info[ACTIVE_EXTRA], dtype=bool)
            self._track_copies(raw_rewards, env_reset, active)
            extras = {**(extras or {}), ACTIVE_EXTRA: active}
        else:
            self._track_episodes(raw_rewards, env_reset)
        step = StepBatch(
            obs=self.obs,
            actions=np.asarray(actions),
            rewards=learn_rewards.astype(np.float32),
            terminated=learn_terminated,
            truncated=truncated & ~terminated,
            next_obs=next_obs,
            env_reset=env_reset,
            extras=extras or {},
            state=state or {},
        )
        self.obs = obs
        self.episode_starts = env_reset
        return step

    def pop_episodes(self) -> list[Episode]:
        """The episodes that ended since the last call, in the order they ended."""
        finished, self._finished = self._finished, []
        return finished

    def close(self) -> None:
        self.env.close()

    def _track_episodes(self, raw_rewards: np.ndarray, env_reset: np.ndarray) -> None:
        self._returns += raw_rewards
        self._lengths += 1
        for i in np.flatnonzero(env_reset):
            self._finished.append(Episode(int(i), float(self._returns[i]), int(self._lengths[i])))
            self._returns[i] = 0.0
            self._lengths[i] = 0

    def _track_copies(
        self, raw_rewards: np.ndarray, env_reset: np.ndarray, active: np.ndarray
    ) -> None:
        """Episodes of whole copies: a copy's episode ends when all its slots end theirs on
        one step (its reset); an idle slot adds nothing to its agent's return."""
        self._returns += np.where(active, raw_rewards, 0.0)
        self._lengths += 1
        per_copy = env_reset.reshape(self.num_copies, self.agents_per_env).all(axis=1)
        for c in np.flatnonzero(per_copy):
            slots = slice(c * self.agents_per_env, (c + 1) * self.agents_per_env)
            returns = tuple(float(r) for r in self._returns[slots])
            self._finished.append(
                Episode(int(c), float(np.mean(returns)), int(self._lengths[c]), returns)
            )
            self._returns[slots] = 0.0
            self._lengths[c] = 0

    @staticmethod
    def _read_lives(info: dict[str, Any]) -> np.ndarray | None:
        lives = info.get("lives")
        return None if lives is None else np.asarray(lives).copy()


def agent_returns(agents: tuple[str, ...], episodes: list[Episode]) -> dict[str, list[float]]:
    """Each agent's returns in `episodes` (of an env with several agents; {} for one)."""
    return {
        agent: [episode.agent_returns[a] for episode in episodes] for a, agent in enumerate(agents)
    }


def encoder_of(space: gym.spaces.Space[Any]) -> ObservationEncoder | None:
    """What flattens observations of `space`; None for a Box, which travels as it comes."""
    return ObservationEncoder(space) if is_flattened(space) else None


def carried_observations(obs: Any, encoder: ObservationEncoder | None) -> np.ndarray:
    """A batch of observations as rayrl carries them: flattened (`encoder`), or float64
    cast to float32 (which would double replay memory for no gain in precision that
    matters)."""
    if encoder is not None:
        return encoder.encode(obs)
    return obs.astype(np.float32) if obs.dtype == np.float64 else obs


def env_actions(space: gym.spaces.Space[Any], actions: np.ndarray) -> np.ndarray:
    """A batch of the policy's actions as the env takes them: continuous ones clipped to
    the space, discrete ones offset by its `start` (the policies count from 0)."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high).astype(space.dtype)
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete) and np.any(
        space.start != 0
    ):
        return actions + space.start
    return actions
