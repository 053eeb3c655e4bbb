"""The algorithms rayrl ships, by name (the value of `algorithm.name` in a config)."""

from __future__ import annotations

from rayrl.algorithms import dqn, impala, ppo, sac
from rayrl.contract import Algorithm

ALGORITHMS: dict[str, Algorithm] = {
    "dqn": dqn.ALGORITHM,
    "impala": impala.ALGORITHM,
    "ppo": ppo.ALGORITHM,
    "sac": sac.ALGORITHM,
}

__all__ = ["ALGORITHMS", "Algorithm"]
