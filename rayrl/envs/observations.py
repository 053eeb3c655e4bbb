"""Observations of any gymnasium space as one array each: what the contract carries.

A Box observation (of any dtype and rank) travels as it comes: frames as bytes, MinAtar's
grids as booleans, vectors as floats. Any other space a learner can take is flattened to
one float32 vector, in gymnasium's `flatten` layout: Discrete and MultiDiscrete parts
one-hot, MultiBinary parts as 0/1, Dict parts in the Dict's key order, Tuple parts in their
positions (a Tuple is a Dict of its positions), nested as deep as the space is.

Why not gymnasium's `FlattenObservation` wrappers: the adapter flattens whatever vector
env a suite gives (ale-py's C++ one included) in one place, a whole batch at once, part by
part, and records the layout that the rest of rayrl needs, which a wrapper does not give.
`gymnasium.spaces.flatten` is `ObservationEncoder.encode`'s reference in the tests, and
flattens each final observation.

The encoder also records what the rest of rayrl needs of the layout: the ranges of the
flat vector that came from float Box parts (the only ones `env.normalize.observations`
normalizes: a one-hot or a 0/1 flag scaled by running statistics would be neither), and the
range of a Dict's `action_mask` entry (PettingZoo's convention: 1 where an action is
allowed), which the categorical policies honour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rayrl.errors import ConfigError

ACTION_MASK_KEY = "action_mask"
"""The Dict entry that holds which actions are allowed (1) and which are not (0)."""

Range = tuple[int, int]
"""[start, stop) of a flattened observation."""


@dataclass(frozen=True)
class ObservationLayout:
    """Where the parts of a flattened observation are."""

    float_parts: tuple[Range, ...]
    """The ranges that came from float Box parts."""
    action_mask: Range | None
    """The range of the `action_mask` entry, or None."""


def is_flattened(space: gym.spaces.Space[Any]) -> bool:
    """Whether observations of `space` are flattened (every space but a Box)."""
    return not isinstance(space, gym.spaces.Box)


def check_observation_space(space: gym.spaces.Space[Any], key: str, env_id: str) -> None:
    """Raise a `ConfigError` naming `key` if observations of `space` cannot be one array: a
    Text, Graph, Sequence or OneOf part (no fixed size), an empty Dict or Tuple, or an
    `action_mask` entry that is not a 1-D array of integer flags."""
    _check_part(space, key, env_id)
    if isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces:
        _check_mask_space(space.spaces[ACTION_MASK_KEY], key, env_id)


def _check_part(space: gym.spaces.Space[Any], key: str, env_id: str) -> None:
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        parts = list(space.spaces.values()) if isinstance(space, gym.spaces.Dict) else list(space)
        if not parts:
            raise ConfigError(f"{key}={env_id!r} has observations of {space}, which hold nothing")
        for part in parts:
            _check_part(part, key, env_id)
        return
    if not isinstance(
        space,
        gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary,
    ):
        raise ConfigError(
            f"{key}={env_id!r} has observations of {space}, which rayrl cannot make one array "
            "of; it takes Box, Discrete, MultiDiscrete and MultiBinary observations, and Dict "
            "and Tuple observations of those"
        )


def _check_mask_space(space: gym.spaces.Space[Any], key: str, env_id: str) -> None:
    integral = space.dtype is not None and (
        np.issubdtype(space.dtype, np.integer) or space.dtype == np.bool_
    )
    if not (integral and space.shape is not None and len(space.shape) == 1):
        raise ConfigError(
            f"{key}={env_id!r}: its observations' {ACTION_MASK_KEY!r} entry is {space}; an "
            "action mask is a 1-D MultiBinary (or integer Box) with a 1 for each allowed action"
        )


class ObservationEncoder:
    """Batches of observations of `space` as one float32 (B, size) array each."""

    def __init__(self, space: gym.spaces.Space[Any]) -> None:
        self.source = space
        flat = gym.spaces.flatten_space(space)
        assert isinstance(flat, gym.spaces.Box)
        self.space = gym.spaces.Box(
            flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
        )
        float_parts: list[Range] = []
        action_mask = _layout(space, 0, float_parts)
        self.layout = ObservationLayout(_merged(float_parts), action_mask)

    def encode(self, batch: Any) -> np.ndarray:
        """A batch of observations (what a vector env returns) as (B, size) float32."""
        return _encode(self.source, batch).astype(np.float32, copy=False)

    def encode_one(self, obs: Any) -> np.ndarray:
        """One observation (a vector env's final one) as (size,) float32."""
        return np.asarray(gym.spaces.flatten(self.source, obs), np.float32)


def _encode(space: gym.spaces.Space[Any], batch: Any) -> np.ndarray:
    """`batch` (the vector env's batched form of `space`) as (B, flatdim) parts, in
    `gymnasium.spaces.flatten`'s layout."""
    if isinstance(space, gym.spaces.Dict):
        return np.concatenate([_encode(part, batch[k]) for k, part in space.spaces.items()], 1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([_encode(part, batch[i]) for i, part in enumerate(space)], 1)
    values = np.asarray(batch)
    if isinstance(space, gym.spaces.Discrete):
        return _one_hot(values - space.start, int(space.n))
    if isinstance(space, gym.spaces.MultiDiscrete):
        positions = (values - space.start).reshape(len(values), -1)
        sizes = space.nvec.reshape(-1)
        return np.concatenate([_one_hot(positions[:, i], int(n)) for i, n in enumerate(sizes)], 1)
    return values.reshape(len(values), -1).astype(np.float32)  # Box, MultiBinary


def _one_hot(indices: np.ndarray, size: int) -> np.ndarray:
    encoded = np.zeros((len(indices), size), np.float32)
    encoded[np.arange(len(indices)), indices.astype(np.int64)] = 1.0
    return encoded


def _layout(
    space: gym.spaces.Space[Any], start: int, float_parts: list[Range], *, top: bool = True
) -> Range | None:
    """Append the float Box parts' ranges (from `start`) to `float_parts`; the range of the
    action mask, if `space` is the observation's Dict (`top`) and holds one."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        action_mask = None
        parts = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space)
        for key, part in parts:
            size = gym.spaces.flatdim(part)
            if top and isinstance(space, gym.spaces.Dict) and key == ACTION_MASK_KEY:
                action_mask = (start, start + size)
            else:
                _layout(part, start, float_parts, top=False)
            start += size
        return action_mask
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        float_parts.append((start, start + math.prod(space.shape)))
    return None


def _merged(ranges: list[Range]) -> tuple[Range, ...]:
    """Adjacent ranges as one."""
    merged: list[Range] = []
    for start, stop in ranges:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return tuple(merged)
