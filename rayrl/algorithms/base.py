"""What an algorithm provides: its config class and builders for its parts.

An algorithm is a small module that, from the run's typed config, makes the Policy (CPU,
in every worker), the Learner, the StepProcessor, and the ExperienceStore between them (a
replay buffer for off-policy learning, a queue of fresh unrolls for on-policy learning). The
trainers and the Ray runtime only ever call these builders, so adding an algorithm adds one
module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rayrl.config import AlgorithmConfig, Config
from rayrl.core import ExperienceStore, Policy
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
    make_store: Callable[[Config, EnvSpec], ExperienceStore]
    """(config, env spec) -> where chunks wait for the learner."""
    chunk_steps: Callable[[Config], int]
    """Vector-env steps a worker takes per chunk."""
    store_metrics: str
    """Metric namespace of its store: "replay" or "queue"."""
