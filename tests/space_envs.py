"""Test-only environments with every kind of observation and action space rayrl takes,
registered on import (`env.id: "tests.space_envs:Spaces-<observation>-<action>-v0"`).

Each is a short task with a learnable rule: the reward is 1 when the action matches the
observation's `code` (for Box actions: minus the distance of the first action to the
code's sign), so a few thousand steps of learning beat chance. An action outside the
action space raises (the MultiDiscrete actions count one dimension from -1, so actions
that were not offset by the space's `start` fail). With the `masked` observation, whose
`action_mask` allows a random half of the actions at each step (at least one), an action
the mask disallows raises: a run that violates a mask fails.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

CODES = 3
"""Values of the observation's code, and the discrete actions."""
EPISODE_STEPS = 20


def observation_space(kind: str, actions: int) -> gym.spaces.Space[Any]:
    position = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    return {
        "discrete": gym.spaces.Discrete(CODES, start=1),
        "multi_discrete": gym.spaces.MultiDiscrete([CODES, 2]),
        "multi_binary": gym.spaces.MultiBinary(CODES),
        "dict": gym.spaces.Dict(
            {
                "position": position,
                "code": gym.spaces.Discrete(CODES),
                "flags": gym.spaces.MultiBinary(2),
                "nested": gym.spaces.Dict(
                    {"steps": gym.spaces.Box(0.0, EPISODE_STEPS, (1,), np.float32)}
                ),
            }
        ),
        "tuple": gym.spaces.Tuple((position, gym.spaces.Discrete(CODES))),
        "masked": gym.spaces.Dict(
            {"code": gym.spaces.Discrete(CODES), "action_mask": gym.spaces.MultiBinary(actions)}
        ),
        "box": gym.spaces.Box(-1.0, 1.0, (CODES,), np.float32),
        "text": gym.spaces.Text(4),  # no fixed size: refused
    }[kind]


def action_space(kind: str) -> gym.spaces.Space[Any]:
    return {
        "discrete": gym.spaces.Discrete(CODES),
        "multi_discrete": gym.spaces.MultiDiscrete([CODES, 2], start=[0, -1]),
        "multi_discrete_one": gym.spaces.MultiDiscrete([CODES]),
        "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    }[kind]


class SpacesEnv(gym.Env):
    """Observations of `observation` kind, actions of `action` kind; it renders the code as
    a coloured frame."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012 (gymnasium's)

    def __init__(self, observation: str, action: str, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.action_space = action_space(action)
        self.kind = observation
        flags = (
            CODES
            if isinstance(self.action_space, gym.spaces.Discrete)
            else int(np.sum(getattr(self.action_space, "nvec", [2])))
        )
        self.observation_space = observation_space(observation, flags)
        self.code = 0
        self.mask = np.ones(flags, np.int8)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action: Any):
        if not self.action_space.contains(np.asarray(action, self.action_space.dtype)):
            raise RuntimeError(f"action {action} is not in {self.action_space}")
        reward = self._reward(action)
        self.steps += 1
        return self._observe(), reward, False, self.steps >= EPISODE_STEPS, {}

    def render(self) -> np.ndarray:
        frame = np.zeros((32, 32, 3), np.uint8)
        frame[:, :, self.code] = 255
        return frame

    def _reward(self, action: Any) -> float:
        if isinstance(self.action_space, gym.spaces.Box):
            return -abs(float(action[0]) - (self.code - 1) / 2)
        chosen = np.atleast_1d(np.asarray(action) - getattr(self.action_space, "start", 0))
        if self.kind == "masked":
            offsets = np.concatenate([[0], np.cumsum(getattr(self.action_space, "nvec", [CODES]))])
            for dimension, choice in enumerate(chosen):
                if not self.mask[offsets[dimension] + int(choice)]:
                    raise RuntimeError(f"action {action} taken against the mask {self.mask}")
        return float(int(chosen[0]) == self.code)

    def _observe(self) -> Any:
        self.code = int(self.np_random.integers(CODES))
        self.mask = (self.np_random.random(len(self.mask)) < 0.5).astype(np.int8)
        if isinstance(self.action_space, gym.spaces.MultiDiscrete):
            start = 0
            for size in self.action_space.nvec:  # at least one choice per dimension
                self.mask[start + int(self.np_random.integers(size))] = 1
                start += int(size)
        else:
            self.mask[int(self.np_random.integers(len(self.mask)))] = 1
        position = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {
            "discrete": self.code + 1,
            "multi_discrete": np.array([self.code, self.steps % 2]),
            "multi_binary": np.eye(CODES, dtype=np.int8)[self.code],
            "dict": {
                "position": position,
                "code": self.code,
                "flags": np.array([self.steps % 2, 1], np.int8),
                "nested": {"steps": np.array([self.steps], np.float32)},
            },
            "tuple": (position, self.code),
            "masked": {"code": self.code, "action_mask": self.mask.copy()},
            "box": np.eye(CODES, dtype=np.float32)[self.code],
            "text": "abc"[self.code],
        }[self.kind]


OBSERVATIONS = (
    "discrete",
    "multi_discrete",
    "multi_binary",
    "dict",
    "tuple",
    "masked",
    "box",
    "text",
)
ACTIONS = ("discrete", "multi_discrete", "multi_discrete_one", "box")


def env_id(observation: str, action: str) -> str:
    """The id a config names (`env.id`)."""
    return f"tests.space_envs:Spaces-{observation}-{action}-v0"


for _observation in OBSERVATIONS:
    for _action in ACTIONS:
        gym.register(
            f"Spaces-{_observation}-{_action}-v0",
            entry_point=SpacesEnv,
            kwargs={"observation": _observation, "action": _action},
        )
