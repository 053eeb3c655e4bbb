"""Loading a run's config: a preset name or a YAML file, `dotted.key=value` overrides, and
the saved config of an earlier run (older layouts migrated), validated before anything
starts. The layer above the algorithms: it knows each algorithm's config class by name.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rayrl.algorithms import ALGORITHMS
from rayrl.config import (
    DEFAULT_ALGORITHM,
    Config,
    apply_override,
    build_config,
    config_to_dict,
    read_source,
)
from rayrl.envs import resolve_env
from rayrl.families import OffPolicyConfig
from rayrl.renamed_keys import FamilyName, migrate

logger = logging.getLogger(__name__)

ALGORITHM_CONFIGS = {name: algorithm.config_class for name, algorithm in ALGORITHMS.items()}


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Build and validate a `Config` from a plain mapping (YAML-shaped); env settings left
    None take their env suite's defaults, so that the saved config says what ran."""
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


def family_name(algorithm: str | None) -> FamilyName | None:
    """The family of the algorithm named `algorithm` (None: the default algorithm), or
    None for a name no algorithm has."""
    cls = ALGORITHM_CONFIGS.get(algorithm or DEFAULT_ALGORITHM)
    if cls is None:
        return None
    return "off-policy" if issubclass(cls, OffPolicyConfig) else "on-policy"


def migrate_saved(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A run's saved config (config.yaml or a checkpoint's) in today's layout: the keys of
    `rayrl.renamed_keys.RENAMED_KEYS` moved to their new names."""
    data = copy.deepcopy(dict(raw))
    moved = migrate(data, family_name((data.get("algorithm") or {}).get("name")))
    if moved:
        logger.info(
            "read a config of an older rayrl: moved %s to their new names", ", ".join(moved)
        )
    return data


def saved_config(raw: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """The validated config of an earlier run, with overrides applied on top."""
    data = migrate_saved(raw)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)
