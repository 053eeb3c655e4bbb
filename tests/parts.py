"""An algorithm's parts built from a whole config, as the runtimes build them, for tests."""

from __future__ import annotations

from typing import Any

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config
from rayrl.contract import Acting, Learner, Policy
from rayrl.envs.spec import EnvSpec


def policy_for(config: Config, spec: EnvSpec, worker_index: int | None) -> Policy:
    """Worker `worker_index`'s policy (None: the evaluation policy)."""
    workers = config.workers
    acting = Acting(config.run.seed, worker_index, workers.envs_per_worker, workers.num_workers)
    return ALGORITHMS[config.algorithm.name].build_policy(config.algorithm, spec, acting)


def learner_for(config: Config, spec: EnvSpec) -> Any:
    learner: Learner = ALGORITHMS[config.algorithm.name].build_learner(
        config.algorithm, spec, config.learner, config.run
    )
    return learner
