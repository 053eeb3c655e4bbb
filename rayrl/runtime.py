"""The Ray runtime: the one module where rayrl's plain classes become Ray actors.

- `RolloutWorker` -> a worker actor per `workers.num_workers`, `workers.cpus_per_worker` CPUs
  each, spread over the cluster;
- `ExperienceService` -> the experience actor (replay buffer or unroll queue), on the
  driver's node when possible (so that saving the buffer with a checkpoint writes into the
  run directory);
- `LearnerService` -> the learner actor(s), each with `learner.num_gpus` GPUs (one by
  default when the cluster has a GPU), so that on a cluster they land on GPU nodes;
- `Evaluator` -> an evaluation actor.

`train_ray` connects to (or starts) Ray, checks that the cluster can host the run, and
hands over to the driver's event loop (`rayrl.driver`).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config
from rayrl.core import ModelInfo
from rayrl.envs import EnvSpec
from rayrl.errors import ConfigError, UserError
from rayrl.evaluation import Evaluator
from rayrl.services import ExperienceService, LearnerService
from rayrl.session import TrainingSession, TrainResult
from rayrl.worker import RolloutWorker

logger = logging.getLogger(__name__)

LEARNER_CPUS = 1.0


def requested_cpus(config: Config) -> float:
    learners = getattr(config.algorithm, "num_learners", 1)
    return config.workers.num_workers * config.workers.cpus_per_worker + learners * LEARNER_CPUS


def connect(config: Config, address: str | None, dashboard: bool = False) -> bool:
    """Join the Ray at `address` (or $RAY_ADDRESS), or start a local one sized to this
    machine.

    Returns True when this call connected (so the caller disconnects, and a local Ray it
    started is shut down with it); False when Ray was already initialized in this process
    (a notebook, the test suite), which is then left as it is.
    """
    if ray.is_initialized():
        return False
    if address is None and os.environ.get("RAY_ADDRESS"):
        # inside a Ray job (`ray job submit`), or a user who points every Ray program at a
        # cluster: join it rather than start a second Ray
        address = os.environ["RAY_ADDRESS"]
        logger.info("joining the Ray cluster at RAY_ADDRESS=%s", address)
    if address is None:
        cpus = os.cpu_count() or 1
        needed = math.ceil(requested_cpus(config))
        if needed > cpus:
            logger.info(
                "the run asks for %d CPUs and this machine has %d: starting a local Ray with "
                "%d logical CPUs (workers share cores)",
                needed,
                cpus,
                needed,
            )
        _init_keeping_sigterm_handler(
            address="local",  # a new Ray even when another one runs on this machine
            num_cpus=max(cpus, needed),
            include_dashboard=dashboard,
            logging_level=logging.WARNING,
        )
        return True
    try:
        _init_keeping_sigterm_handler(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UserError(f"cannot connect to the Ray cluster at '{address}': {exc}") from None
    return True


def _init_keeping_sigterm_handler(**kwargs: Any) -> None:
    """`ray.init`, which installs its own SIGTERM handler (log and exit at once); a handler
    the caller installed before (the CLI's: stop like Ctrl-C, with a final checkpoint) is
    put back. Without one, Ray's stays."""
    previous = signal.getsignal(signal.SIGTERM)
    ray.init(**kwargs)
    if callable(previous) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def check_cluster(config: Config) -> float:
    """Raise if the cluster cannot host the run; returns the learner's GPU request."""
    resources = ray.cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    if requested_cpus(config) > cpus:
        raise ConfigError(
            f"the Ray cluster has {cpus:g} CPUs but the run asks for "
            f"{requested_cpus(config):g} (workers.num_workers={config.workers.num_workers} x "
            f"workers.cpus_per_worker={config.workers.cpus_per_worker:g} + 1 per learner); "
            "lower them or add nodes"
        )
    learners = getattr(config.algorithm, "num_learners", 1)
    num_gpus = config.learner.num_gpus
    if num_gpus is None:
        return 1.0 if gpus >= learners else 0.0
    if num_gpus * learners > gpus:
        raise ConfigError(
            f"learner.num_gpus={num_gpus:g} for {learners} learner(s) but the Ray cluster has "
            f"{gpus:g} GPUs; use null to take one per learner only when there are enough"
        )
    return num_gpus


class ActorFactory:
    """Creates the run's actors with their Ray options."""

    def __init__(self, config: Config, spec: EnvSpec, name_prefix: str, learner_gpus: float):
        self.config = config
        self.spec = spec
        self.prefix = name_prefix
        self.learner_gpus = learner_gpus
        self.num_learners = getattr(config.algorithm, "num_learners", 1)
        self.store_name = ALGORITHMS[config.algorithm.name].store_metrics

    def _name(self, role: str, incarnation: int) -> str:
        """`rayrl/<run>/<role>[.<incarnation>]`: named actors are easy to find in Ray's
        dashboard and state API (and to kill, for fault tests)."""
        return f"{self.prefix}/{role}" + (f".{incarnation}" if incarnation else "")

    def worker(self, index: int, incarnation: int) -> Any:
        return (
            # sample calls run one at a time; set_weights runs beside them, in its own group
            ray.remote(concurrency_groups={"weights": 1})(RolloutWorker)
            .options(
                name=self._name(f"worker-{index}", incarnation),
                num_cpus=self.config.workers.cpus_per_worker,
                scheduling_strategy="SPREAD",
            )
            .remote(self.config, index, incarnation)
        )

    def experience(self, restore: Path | None, incarnation: int = 0) -> Any:
        """The experience actor (replay buffer or unroll queue), on the driver's node."""
        here = ray.get_runtime_context().get_node_id()
        return (
            ray.remote(ExperienceService)
            .options(
                name=self._name(self.store_name, incarnation),
                num_cpus=0,
                # every caller may be waiting on the store at once: all workers' adds, the
                # learners' sample requests, and stats/priorities/save/stop calls
                max_concurrency=self.config.workers.num_workers
                * self.config.workers.max_chunks_in_flight
                + self.num_learners * self.config.learner.prefetch_requests
                + 8,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
            )
            .remote(self.config, self.spec, restore)
        )

    def learners(
        self,
        store: Any,
        state: dict[str, Any] | None,
        warm_start: ModelInfo | None,
        incarnation: int = 0,
    ) -> list[Any]:
        """The learner actors; several join one process group before they build."""
        learners = [
            ray.remote(LearnerService)
            .options(
                name=self._name(f"learner-{rank}" if rank else "learner", incarnation),
                num_cpus=LEARNER_CPUS,
                num_gpus=self.learner_gpus,
            )
            .remote(self.config, self.spec, store, state, warm_start)
            for rank in range(self.num_learners)
        ]
        if self.num_learners > 1:
            address = ray.get(learners[0].group_address.remote())
            ray.get(
                [
                    learner.join_group.remote(address, rank, self.num_learners)
                    for rank, learner in enumerate(learners)
                ]
            )
        return learners

    def evaluator(self, incarnation: int = 0) -> Any:
        return (
            ray.remote(Evaluator)
            .options(name=self._name("evaluator", incarnation), num_cpus=0)
            .remote(self.config)
        )


def train_ray(
    config: Config,
    session: TrainingSession,
    resume: dict[str, Any] | None,
    *,
    address: str | None = None,
    dashboard: bool = False,
) -> TrainResult:
    """Train with Ray actors until a stop condition; see `rayrl.driver`."""
    from rayrl.driver import RayDriver
    from rayrl.envs import env_spec

    connected_here = connect(config, address, dashboard)
    try:
        learner_gpus = check_cluster(config)
        factory = ActorFactory(
            config, env_spec(config.env), f"rayrl/{session.run_dir.root.name}", learner_gpus
        )
        return RayDriver(config, session, resume, factory).run()
    finally:
        if connected_here:
            ray.shutdown()
