"""The algorithms rayrl ships, by name (the value of `algorithm.name` in a config)."""

from __future__ import annotations

from typing import Any

from rayrl.algorithms import appo, dqn, impala, ppo, sac
from rayrl.contract import Algorithm

ALGORITHMS: dict[str, Algorithm[Any, Any]] = {
    algorithm.name: algorithm
    for algorithm in (dqn.ALGORITHM, impala.ALGORITHM, ppo.ALGORITHM, appo.ALGORITHM, sac.ALGORITHM)
}

__all__ = ["ALGORITHMS", "Algorithm"]
