"""The Ray runtime's entry point: connect (or start a local Ray), check the cluster, and
drive the run's actors until it stops."""

from __future__ import annotations

import logging
from typing import Any

from rayrl.config import Config
from rayrl.envs import env_spec
from rayrl.ray.capacity import check_cluster, cores_if_alone, evaluates_in_driver
from rayrl.ray.connect import Connected, connect, disconnect
from rayrl.ray.driver import RayDriver
from rayrl.ray.factory import ActorFactory
from rayrl.run_lifecycle import TrainResult, stop_if_interrupted
from rayrl.session import TrainingSession

logger = logging.getLogger(__name__)


def train_ray(
    config: Config,
    session: TrainingSession,
    resume: dict[str, Any] | None,
    *,
    address: str | None = None,
    dashboard: bool = False,
) -> TrainResult:
    """Train with Ray actors until a stop condition (`rayrl.run_lifecycle`)."""
    session.metrics.phase_done("setup")
    connected_here = connect(config, address, dashboard)
    session.metrics.phase_done("ray")
    try:
        stop_if_interrupted()  # one that a library swallowed while Ray started
        spec = env_spec(config.env)
        alone = connected_here is Connected.STARTED_LOCAL  # no autoscaler, no other node
        learner_gpus = check_cluster(config, spec, alone)
        in_driver = evaluates_in_driver(config.run.evaluator, cores_if_alone(alone))
        if in_driver:
            logger.info(
                "evaluations run on a thread of this process (run.evaluator=%s)",
                config.run.evaluator,
            )
        session.begin()
        factory = ActorFactory(
            config, spec, f"rayrl/{session.run_dir.root.name}", learner_gpus, in_driver
        )
        return RayDriver(config, session, resume, factory).run()
    finally:
        if connected_here:
            disconnect()
