"""The one place where rayrl's plain classes become Ray actors, with their Ray options.

- `WorkerService` (a `RolloutWorker` in its shell) -> a worker actor per
  `workers.num_workers`, `workers.cpus_per_worker` CPUs each, spread over the cluster;
  `set_weights` runs in its own concurrency group, beside a sample call in progress;
- `ExperienceService` -> the experience actor (replay buffer or unroll queue), on the
  driver's node: always when it is saved with checkpoints (`algorithm.replay.
  save_with_checkpoint`: it writes and reads the replay in the run directory, which is on the
  driver's node), when possible otherwise; reserving the memory it holds when full
  (`memory=`; saving it copies only its small per-transition arrays, `rayrl.replay.npz`);
- `LearnerService` -> the learner actor(s), each with the GPUs `check_cluster` decided (one
  by default when the cluster has a GPU), so that on a cluster they land on GPU nodes;
  `pulse` (the supervisor's probe) runs in its own concurrency group, beside a `train` call
  in progress;
- `MachineMonitor` -> on each machine other than the driver's that runs an actor of the
  run, a small actor that reads its load and its processes' states for the watchdogs;
- `Evaluator` -> an evaluation actor, or (`run.evaluator`, decided by `capacity.
  evaluates_in_driver`) a `DriverEvaluator`: the same evaluator on a thread of the driver's
  process, which a small machine does not pay a process and a torch import for; once one
  of those could not be stopped (an env step that never returns), the evaluators that
  follow are actors.

Every actor is named `rayrl/<run>/<role>[.<incarnation>]`: easy to find in Ray's dashboard
and state API (and to kill, for fault tests); an evaluator in the driver names its thread.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayrl.algorithms import ALGORITHMS
from rayrl.compat import ray_internals
from rayrl.config import Config
from rayrl.envs.spec import EnvSpec
from rayrl.errors import RunFailedError
from rayrl.evaluation import Evaluator
from rayrl.ray.capacity import learner_cpus
from rayrl.ray.driver_evaluator import DriverEvaluator, DriverEvaluators
from rayrl.ray.experience_service import ExperienceService
from rayrl.ray.identity import Identified
from rayrl.ray.learner_service import LearnerService, LearnerStart
from rayrl.ray.placement import Placement
from rayrl.ray.restarts import constructor_error, one_line
from rayrl.ray.watchdog import MachineMonitor
from rayrl.ray.worker_service import WorkerService

logger = logging.getLogger(__name__)

CAPACITY_NOTICE_S = 30.0
"""An actor not started after this long that Ray has placed in no process yet waits for
capacity (said once)."""
GROUP_POLL_S = 1.0
"""How often the driver, waiting for the learners to form their group, looks at the clock."""


class ActorFactory:
    """Creates (and kills) the run's actors."""

    def __init__(
        self,
        config: Config,
        spec: EnvSpec,
        name_prefix: str,
        learner_gpus: float,
        evaluator_in_driver: bool = False,
    ):
        self.config = config
        self.spec = spec
        self.prefix = name_prefix
        self.learner_gpus = learner_gpus
        self.driver_evaluators = DriverEvaluators() if evaluator_in_driver else None
        self.family = ALGORITHMS[config.algorithm.name].family
        self.placement = Placement(config)

    def _name(self, role: str, incarnation: int) -> str:
        return f"{self.prefix}/{role}" + (f".{incarnation}" if incarnation else "")

    def worker(self, index: int, incarnation: int) -> Any:
        config = self.config
        return (
            # sample calls run one at a time; set_weights runs beside them, in its own group
            ray.remote(  # type: ignore[call-overload, unused-ignore]  # Ray's overloads omit concurrency_groups
                concurrency_groups={"weights": 1}
            )(WorkerService)
            .options(
                name=self._name(f"worker-{index}", incarnation),
                num_cpus=config.workers.cpus_per_worker,
                **self.placement.worker(index),
            )
            .remote(
                config.env, config.workers, config.algorithm, config.run.seed, index, incarnation
            )
        )

    def experience(self, restore: Path | None, incarnation: int = 0) -> Any:
        """The experience actor (replay buffer or unroll queue), on the driver's node."""
        here = ray.get_runtime_context().get_node_id()
        workers, learner = self.config.workers, self.config.learner
        return (
            # the probe runs in a group of its own: orphaned adds of replaced workers, blocked
            # by the replay ratio, can take every thread of the default group
            ray.remote(  # type: ignore[call-overload, unused-ignore]  # Ray's overloads omit concurrency_groups
                concurrency_groups={"probe": 1}
            )(ExperienceService)
            .options(
                name=self._name(self.family.store.namespace, incarnation),
                num_cpus=0,
                # what it holds when full: Ray places it where that fits, and counts it
                memory=self.family.store_memory(self.config, self.spec),
                # every caller may be waiting on the store at once: all workers' adds, the
                # learners' sample requests, and stats/priorities/save/stop calls
                max_concurrency=workers.num_workers * workers.max_chunks_in_flight
                + learner.num_learners * learner.prefetch_requests
                + 8,
                **self.placement.store(
                    NodeAffinitySchedulingStrategy(
                        here, soft=not self.family.persists(self.config.algorithm)
                    )
                ),
            )
            .remote(self.family, self.family.store_settings(self.config, self.spec), restore)
        )

    def learners(self, store: Any, start: LearnerStart, incarnation: int = 0) -> list[Any]:
        """The learner actors; several join one process group before they build."""
        config = self.config
        count = config.learner.num_learners
        learners = [
            # train and the other calls run one at a time; the probe runs beside them
            ray.remote(  # type: ignore[call-overload, unused-ignore]  # Ray's overloads omit concurrency_groups
                concurrency_groups={"probe": 1}
            )(LearnerService)
            .options(
                name=self._name(f"learner-{rank}" if rank else "learner", incarnation),
                num_cpus=learner_cpus(self.learner_gpus),
                num_gpus=self.learner_gpus,
                **self.placement.learner(rank),
            )
            .remote(config.algorithm, self.spec, config.learner, config.run, store, start)
            for rank in range(count)
        ]
        if count > 1:
            self._form_group(learners)
        return learners

    def _form_group(self, learners: list[Any]) -> None:
        """Join the learners into one process group, within `faults.start_timeout_s`. The
        driver waits here, so the wait for Ray to place them is said here too, as
        `LearnerSupervisor` says it for one learner."""
        created = time.monotonic()
        try:
            (address,) = self._values([learners[0].group_address.remote()], learners, created)
            joins = [
                learner.join_group.remote(address, rank, len(learners))
                for rank, learner in enumerate(learners)
            ]
            self._values(joins, learners, created)
        except RayError as error:
            for learner in learners:
                self.kill(learner)
            cause = constructor_error(error) or one_line(error)
            raise RunFailedError(f"the learners could not form their group: {cause}") from None

    def _values(self, refs: list[Any], learners: list[Any], created: float) -> list[Any]:
        """The values of `refs`, calls to `learners` created at `created`; said once when
        Ray has not placed every learner after `CAPACITY_NOTICE_S`, and a failure naming
        what they wait for past `faults.start_timeout_s`."""
        timeout = self.config.faults.start_timeout_s
        said = False
        while True:
            waited = time.monotonic() - created
            if waited > timeout:
                for learner in learners:
                    self.kill(learner)
                if any(is_placed(learner) is False for learner in learners):
                    raise RunFailedError(
                        learners_not_placed(len(learners), self.learner_gpus, waited, timeout)
                    )
                raise RunFailedError(
                    f"the learners could not form their group within {waited:.0f} s "
                    f"(faults.start_timeout_s={timeout:g})"
                )
            ready, _ = ray.wait(
                refs, num_returns=len(refs), timeout=min(GROUP_POLL_S, timeout - waited)
            )
            if len(ready) == len(refs):
                return ray.get(refs)
            unplaced = not said and waited >= CAPACITY_NOTICE_S
            if unplaced and any(is_placed(learner) is False for learner in learners):
                said = True
                logger.warning(learners_waiting(len(learners), self.learner_gpus, waited, timeout))

    def evaluator(self, incarnation: int = 0) -> Any:
        config = self.config
        name = self._name("evaluator", incarnation)
        arguments = (config.env, config.algorithm, config.run.eval_episodes, config.run.seed)
        if self.driver_evaluators is not None:
            host = self.driver_evaluators.make(name, *arguments)
            if host is not None:
                return host
        return (
            ray.remote(EvaluatorActor)
            .options(name=name, num_cpus=0, **self.placement.evaluator())
            # one torch thread: a process of its own, beside the ones that train
            .remote(*arguments, torch_threads=1)
        )

    @staticmethod
    def kill(handle: Any) -> None:
        """Kill an actor for good (Ray does not restart it); abandon a `DriverEvaluator`."""
        if isinstance(handle, DriverEvaluator):
            handle.kill()
        else:
            ray.kill(handle, no_restart=True)


def _have_waited(count: int, gpus: float, waited: float) -> str:
    subject = "the learner has" if count == 1 else f"the {count} learners have"
    resources = f"{gpus:g} GPU(s)" if gpus else f"{learner_cpus(gpus):g} CPU"
    return f"{subject} waited {waited:.0f} s for a node with {resources} free"


def learners_waiting(count: int, gpus: float, waited: float, timeout_s: float) -> str:
    """The notice for `count` learners of `gpus` GPUs each that Ray has not placed after
    `waited` s."""
    return (
        f"{_have_waited(count, gpus, waited)}; the run stops if it waits past "
        f"faults.start_timeout_s={timeout_s:g} s"
    )


def learners_not_placed(count: int, gpus: float, waited: float, timeout_s: float) -> str:
    """Why the run stops when Ray has not placed `count` learners in time."""
    return (
        f"{_have_waited(count, gpus, waited)} (faults.start_timeout_s={timeout_s:g}); was a "
        "GPU node lost? The checkpoints are kept: --resume the run when the cluster has one, "
        "or with --set learner.num_gpus=0 to train on CPU"
    )


def machine_monitor(address: str) -> Any:
    """A `MachineMonitor` (`rayrl.ray.watchdog`) on a Ray node at `address` (any, where a
    machine has several), reserving no CPU; None when no node is there any more (its actors'
    deaths are on their way)."""
    nodes = [
        node for node in ray.nodes() if node["Alive"] and node["NodeManagerAddress"] == address
    ]
    if not nodes:
        return None
    # soft=False: on another node it would read another machine
    strategy = NodeAffinitySchedulingStrategy(nodes[0]["NodeID"], soft=False)
    return ray.remote(MachineMonitor).options(num_cpus=0, scheduling_strategy=strategy).remote()


def is_placed(handle: Any) -> bool | None:
    """Whether Ray has given the actor a process: one it has not (no pid in Ray's actor
    table) waits for the resources it asks for. None when that cannot be read."""
    return ray_internals.actor_has_process(handle)


class EvaluatorActor(Identified, Evaluator):
    """The evaluator as an actor: it answers `identify` as every actor of a run does."""
