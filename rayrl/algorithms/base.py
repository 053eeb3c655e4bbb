"""What an algorithm provides: its config class and builders for its parts.

An algorithm is a small module that, from the run's typed config, makes the Policy (CPU,
in every worker), the Learner, and the StepProcessor, and says whether it learns from a
replay buffer (off-policy) or from fresh unrolls (on-policy). The trainers and the Ray
runtime only ever call these builders, so adding an algorithm adds one module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rayrl.config import AlgorithmConfig, Config
from rayrl.core import Policy
from rayrl.envs import EnvSpec


@dataclass(frozen=True)
class Algorithm:
    name: str
    config_class: type[AlgorithmConfig]
    make_policy: Callable[[Config, EnvSpec, int | None], Policy]
    """(config, env spec, worker index) -> a CPU policy with that worker's exploration;
    worker index None gives the evaluation policy."""
    make_learner: Callable[[Config, EnvSpec], Any]
    """(config, env spec) -> the learner, on the configured device."""
    make_processor: Callable[[Config, EnvSpec, int], Any]
    """(config, env spec, number of envs) -> the worker's step processor."""
    uses_replay: bool
    """Off-policy from a replay buffer (True) or on-policy from fresh unrolls (False)."""
