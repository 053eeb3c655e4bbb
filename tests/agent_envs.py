"""A test-only PettingZoo parallel env with several agents (`env.id:
"pettingzoo:tests.agent_envs"`), one of which finishes before the others.

Each agent sees a one-hot code and is rewarded 1 when its action matches it (chance is a
third), so a short run beats chance. Agent `agent_1` plays `SHORT_STEPS` steps, the others
`EPISODE_STEPS`: its slot then idles until the episode ends. An action for an agent that
has finished, or outside the action space, raises, as does a step after the episode ended.
`env.kwargs`: `agents` (how many), `mismatched` (agent_1 gets a larger observation space:
refused), `truncate` (every agent ends by truncation rather than termination), `late`
(the last agent has no observation at reset: an agent that joins later, refused).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

CODES = 3
EPISODE_STEPS = 8
SHORT_STEPS = 5
SHORT_AGENT = "agent_1"


class CodeMatch(ParallelEnv):
    metadata: ClassVar[dict[str, Any]] = {"name": "code_match_v0", "render_modes": []}

    def __init__(
        self, agents: int = 3, mismatched: bool = False, truncate: bool = False, late: bool = False
    ) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(agents)]
        self.mismatched = mismatched
        self.truncate = truncate
        self.late = late
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._codes: dict[str, int] = {}
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        size = CODES + 1 if self.mismatched and agent == SHORT_AGENT else CODES
        return spaces.Box(0.0, 1.0, (size,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(CODES)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        obs = self._observe()
        if self.late:
            obs.pop(self.possible_agents[-1])
        return obs, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step after the episode ended")
        if set(actions) != set(self.agents):
            raise RuntimeError(f"actions for {sorted(actions)}, agents playing {self.agents}")
        for agent, action in actions.items():
            if not self.action_space(agent).contains(np.int64(action)):
                raise RuntimeError(f"{agent}'s action {action!r} is outside its space")
        rewards = {a: float(int(actions[a]) == self._codes[a]) for a in self.agents}
        self._t += 1
        ending = {
            a: self._t >= (SHORT_STEPS if a == SHORT_AGENT else EPISODE_STEPS) for a in self.agents
        }
        terminated = {a: ending[a] and not self.truncate for a in self.agents}
        truncated = {a: ending[a] and self.truncate for a in self.agents}
        obs = self._observe()
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not ending[a]]
        return obs, rewards, terminated, truncated, infos

    def _observe(self) -> dict[str, np.ndarray]:
        obs = {}
        for agent in self.agents:
            self._codes[agent] = int(self._rng.integers(CODES))
            one_hot = np.zeros(self.observation_space(agent).shape, np.float32)
            one_hot[self._codes[agent]] = 1.0
            obs[agent] = one_hot
        return obs


def parallel_env(**kwargs: Any) -> CodeMatch:
    return CodeMatch(**kwargs)


ENV_ID = "pettingzoo:tests.agent_envs"
