"""PettingZoo's parallel API: several agents in one env, each agent of each copy one slot.

An id "pettingzoo:<module>" names a module with PettingZoo's `parallel_env(**kwargs)`
("pettingzoo:mpe2.simple_spread_v3"); `env.kwargs` goes to it. `AgentSlots` runs copies
of it as one gymnasium vector env of copies x agents slots, so that one shared policy acts
for every agent, and every layer after the adapter (policies, processors, learners) sees
a single-agent batch. Written here because the library for it, SuperSuit's
`pettingzoo_env_to_vec_env_v1`, is unmaintained (its page says so, since 2025) and needs
every agent alive to the episode's end (its `black_death` wrapper gives a finished agent
zero observations that are then learned from), where the slots below mark those steps idle.

- Every agent must have the same action space and the same observation space; each
  observation carries the agent's index ("agent_index", a Discrete of the agents, added to
  a Dict observation or beside any other as "observation"), which the adapter flattens, so
  that the shared policy can tell the agents apart.
- An agent that finishes while others play on leaves its slot idle until its copy resets:
  each idle step is reported terminated, with a zero reward and the agent's last
  observation, and `info["active"]` False, so the adapter keeps it out of the episode
  returns and marks it for the learners to leave out.
- A copy resets (SAME_STEP) when its last agent finishes; its slots then all end their
  episodes on that step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from rayrl.config import EnvConfig
from rayrl.errors import ConfigError

PREFIX = "pettingzoo:"
TRUSTED_PACKAGES = ("pettingzoo", "mpe2")
"""Packages whose env modules a saved config may name without `--trust-env`: installed by
rayrl's `pettingzoo` extra, they run no code but their own."""
INDEX_KEY = "agent_index"
OBSERVATION_KEY = "observation"


def module_of(env_id: str) -> str:
    """The module an id names: "pettingzoo:mpe2.simple_spread_v3" -> "mpe2.simple_spread_v3"."""
    return env_id.removeprefix(PREFIX)


def is_trusted(env_id: str) -> bool:
    """Whether building `env_id` imports only a package rayrl's extra installs."""
    return env_id.startswith(PREFIX) and module_of(env_id).split(".")[0] in TRUSTED_PACKAGES


def with_agent_index(space: spaces.Space[Any], agents: int) -> spaces.Dict:
    """An agent's observation space with its index among `agents` beside it."""
    index = spaces.Discrete(agents)
    if isinstance(space, spaces.Dict):
        if INDEX_KEY in space.spaces:
            raise ValueError(f"the observations already have a {INDEX_KEY!r} entry")
        return spaces.Dict({**space.spaces, INDEX_KEY: index})
    return spaces.Dict({OBSERVATION_KEY: space, INDEX_KEY: index})


class AgentSlots(gym.vector.VectorEnv):
    """`copies` copies of a parallel env, agent `a` of copy `c` in slot `c * agents + a`."""

    def __init__(self, make: Callable[[], Any], copies: int, env_id: str) -> None:
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.envs = [make() for _ in range(copies)]
        first = self.envs[0]
        self.agent_names: tuple[str, ...] = tuple(first.possible_agents)
        self.agents_per_env = len(self.agent_names)
        observation_space = shared_space(
            first.observation_space, self.agent_names, env_id, "observation"
        )
        self.single_action_space = shared_space(
            first.action_space, self.agent_names, env_id, "action"
        )
        self.single_observation_space = with_agent_index(observation_space, self.agents_per_env)
        self.num_envs = copies * self.agents_per_env
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.env_id = env_id
        self._last: list[Any] = [None] * self.num_envs
        """Each slot's latest observation (what an idle slot shows)."""

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every copy (copy c gets seed + c)."""
        for c, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seed is None else int(seed) + c)  # type: ignore[arg-type]
            self._take(c, obs)
        return self._batch(self._last), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n, agents = self.num_envs, self.agents_per_env
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        active = np.zeros(n, dtype=bool)
        final_obs = np.full(n, None, dtype=object)
        for c, env in enumerate(self.envs):
            slots = range(c * agents, (c + 1) * agents)
            live = set(env.agents)
            self._check_agents(live - set(self.agent_names), "env.agents lists")
            step_actions = {
                name: actions[slot]
                for name, slot in zip(self.agent_names, slots, strict=True)
                if name in live
            }
            obs, reward, term, trunc, _ = env.step(step_actions)
            for returned, what in (
                (obs, "observations"),
                (reward, "rewards"),
                (term, "terminations"),
            ):
                self._check_agents(live - set(returned), f"the step's {what} lack")
            for name, slot in zip(self.agent_names, slots, strict=True):
                if name in live:
                    active[slot] = True
                    rewards[slot] = reward[name]
                    terminated[slot], truncated[slot] = bool(term[name]), bool(trunc[name])
                    self._last[slot] = self._indexed(obs[name], slot % agents)
                else:
                    terminated[slot] = True  # an idle step: nothing to bootstrap or learn
            if not env.agents:  # the last agent finished: the copy starts again
                # an agent still playing when its copy ends (no flag of its own) is cut off
                truncated[slots.start : slots.stop] |= ~terminated[slots.start : slots.stop]
                for slot in slots:
                    final_obs[slot] = self._last[slot]
                obs, _ = env.reset()
                self._take(c, obs)
            else:  # agents that finished, and idle slots, show their last observation
                for slot in slots:
                    if terminated[slot] or truncated[slot]:
                        final_obs[slot] = self._last[slot]
        info = {"final_obs": final_obs, "_final_obs": final_obs != None, "active": active}  # noqa: E711
        return self._batch(self._last), rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()

    def _check_agents(self, agents: set[str], what: str) -> None:
        """Raise, naming them, if `agents` is not empty: agents the slots cannot follow."""
        if agents:
            raise ValueError(
                f"{self.env_id}: {what} {sorted(agents)}; rayrl needs every agent of "
                "possible_agents present from reset until it finishes, with an observation, "
                "a reward and its flags at each of its steps (agents that join later are not "
                "supported)"
            )

    def _take(self, copy: int, obs: Mapping[str, Any]) -> None:
        self._check_agents(set(self.agent_names) - set(obs), "reset's observations lack")
        for a, name in enumerate(self.agent_names):
            self._last[copy * self.agents_per_env + a] = self._indexed(obs[name], a)

    def _indexed(self, obs: Any, agent: int) -> dict[str, Any]:
        if isinstance(obs, Mapping):
            return {**obs, INDEX_KEY: agent}
        return {OBSERVATION_KEY: obs, INDEX_KEY: agent}

    def _batch(self, items: list[Any]) -> Any:
        out = create_empty_array(self.single_observation_space, self.num_envs)
        assert out is not None  # None only for spaces without a fixed shape (refused)
        return concatenate(self.single_observation_space, items, out)


def shared_space(
    space_of: Callable[[str], spaces.Space[Any]], agents: tuple[str, ...], env_id: str, kind: str
) -> spaces.Space[Any]:
    """The one `kind` space every agent has; a `ConfigError` when they differ."""
    first = space_of(agents[0])
    for name in agents[1:]:
        if space_of(name) != first:
            raise ConfigError(
                f"env.id={env_id!r}: a policy shared by all agents needs one {kind} space for "
                f"all, but {agents[0]!r} has {first} and {name!r} has {space_of(name)}"
            )
    return first


class PettingZooSuite:
    """Ids "pettingzoo:<module>": a PettingZoo parallel env, agents as vector-env slots."""

    name = "pettingzoo"
    defaults = MappingProxyType(
        {"clip_rewards": False, "terminal_on_life_loss": False, "repeat_action_probability": 0.0}
    )

    def owns(self, env_id: str) -> bool:
        return env_id.startswith(PREFIX)

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        self._parallel_env(config.id, key)
        if config.max_episode_steps is not None:
            raise ConfigError(
                f"env.max_episode_steps={config.max_episode_steps} is not applied to "
                f"PettingZoo envs ({config.id!r}); set the env's own limit in env.kwargs "
                "(MPE's max_cycles)"
            )

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        make = self._parallel_env(config.id, "env.id")
        kwargs = dict(config.kwargs)

        def one() -> Any:
            try:
                return make(**kwargs)
            except TypeError as exc:
                first_line = str(exc).strip().splitlines()[0]
                raise ConfigError(
                    f"env.kwargs={kwargs!r} does not fit {config.id!r}: {first_line}"
                ) from None

        return AgentSlots(one, num_envs, config.id)

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        raise ConfigError(
            f"videos of envs with several agents ({config.id!r}) are not recorded yet; leave "
            "logging.video_interval_evals unset"
        )

    def frame_stack(self, config: EnvConfig) -> int | None:
        return None

    @staticmethod
    def _parallel_env(env_id: str, key: str) -> Callable[..., Any]:
        module_name = module_of(env_id)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"{key}={env_id!r}: cannot import {module_name!r} ({exc}); PettingZoo's MPE "
                'envs come with `pip install "rayrl[pettingzoo]"`'
            ) from None
        make = getattr(module, "parallel_env", None)
        if make is None:
            raise ConfigError(
                f"{key}={env_id!r}: module {module_name!r} has no parallel_env(); name the "
                "module of a PettingZoo env with the parallel API (mpe2.simple_spread_v3)"
            )
        return make


PETTINGZOO = PettingZooSuite()
