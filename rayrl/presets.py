"""Loading a run's config: a preset name or a YAML file, `dotted.key=value` overrides, and
the saved config of an earlier run (older layouts migrated), validated before anything
starts. The layer above the algorithms: it knows each algorithm's config class by name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config, apply_override, build_config, config_to_dict, read_source
from rayrl.envs import resolve_env
from rayrl.families import OffPolicyConfig

logger = logging.getLogger(__name__)

ALGORITHM_CONFIGS = {name: algorithm.config_class for name, algorithm in ALGORITHMS.items()}


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Build and validate a `Config` from a plain mapping (YAML-shaped); env settings left
    None take their env family's defaults, so that the saved config says what ran."""
    config = build_config(data, ALGORITHM_CONFIGS)
    return replace(config, env=resolve_env(config.env))


def load_config(source: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a preset name or YAML file (None: the default preset), apply overrides, validate."""
    data = read_source(source)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)


def with_overrides(config: Config, overrides: Sequence[str]) -> Config:
    """A copy of `config` with `dotted.key=value` overrides applied and validated."""
    data = config_to_dict(config)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)


def migrate_saved(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A run's saved config (config.yaml or a checkpoint's) in today's layout.

    rayrl 0.1 kept the replay settings in a top-level `replay` section, the chunk length in
    `workers.steps_per_chunk`, and the learner count and IMPALA's optimizer in `algorithm`.
    They moved to the family that reads them (`algorithm.replay`, `algorithm.steps_per_chunk`)
    and to the learner (`learner.num_learners`, `learner.optimizer`,
    `learner.rmsprop_alpha`); for on-policy algorithms, which never read the first two, those
    are dropped."""
    data = {key: dict(value) if isinstance(value, Mapping) else value for key, value in raw.items()}
    algorithm = data.setdefault("algorithm", {})
    workers = data.setdefault("workers", {})
    learner = data.setdefault("learner", {})
    cls = ALGORITHM_CONFIGS.get(algorithm.get("name", "dqn"))
    off_policy = cls is not None and issubclass(cls, OffPolicyConfig)
    moved = []
    if "replay" in data:
        replay = data.pop("replay")
        if off_policy:
            algorithm.setdefault("replay", replay)
        moved.append("replay")
    if "steps_per_chunk" in workers:
        steps = workers.pop("steps_per_chunk")
        if off_policy:
            algorithm.setdefault("steps_per_chunk", steps)
        moved.append("workers.steps_per_chunk")
    for key in ("num_learners", "optimizer", "rmsprop_alpha"):
        if key in algorithm:
            learner.setdefault(key, algorithm.pop(key))
            moved.append(f"algorithm.{key}")
    if moved:
        logger.info("read a rayrl 0.1 config: moved %s to their current places", ", ".join(moved))
    return data


def saved_config(raw: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """The validated config of an earlier run, with overrides applied on top."""
    data = migrate_saved(raw)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)
