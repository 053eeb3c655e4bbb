"""Epsilon-greedy exploration: a decaying schedule, or Ape-X's fixed per-actor epsilons."""

from __future__ import annotations

import numpy as np


def linear_epsilon(env_steps: int, start: float, end: float, decay_env_steps: int) -> float:
    """Epsilon moving linearly from `start` to `end` over the first `decay_env_steps`."""
    fraction = min(1.0, env_steps / max(1, decay_env_steps))
    return start + fraction * (end - start)


def apex_epsilons(num_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X's per-actor epsilons eps_i = eps ** (1 + alpha * i / (N - 1)), i = 0..N-1
    (Horgan et al. 2018); a single actor gets `epsilon`."""
    if num_actors == 1:
        return np.array([epsilon])
    i = np.arange(num_actors)
    return epsilon ** (1.0 + alpha * i / (num_actors - 1))
