"""Which algorithms take which action spaces: what a refusal suggests instead.

Each algorithm refuses the actions it cannot take in its own builder (before anything
starts); this table is what those refusals name as working, so that a user is never sent
to an algorithm that would refuse the same env.
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces


def algorithms_for(action_space: spaces.Space[Any]) -> str:
    """The algorithms that take `action_space`, as a refusal names them."""
    if isinstance(action_space, spaces.Discrete):
        return "use appo, dqn, impala or ppo"
    if isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return "use appo, impala or ppo"
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return "use appo, impala, ppo or sac"
    if isinstance(action_space, spaces.MultiBinary) and len(action_space.shape) == 1:
        return (
            "no algorithm takes MultiBinary actions; MultiDiscrete([2] * n) is the same "
            "choice, which appo, impala and ppo take"
        )
    return "no algorithm takes these; rayrl takes Discrete, 1-D MultiDiscrete and 1-D Box actions"
